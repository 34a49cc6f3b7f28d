// ControllerCore: agent streams, the detection loop and fault notification.
// API queries are in controller_queries.cc.
#include "src/controller/controller_core.h"

#include <atomic>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/agent_limits.h"

namespace pitstop::controller {

absl::StatusOr<std::unique_ptr<ControllerCore>> ControllerCore::Create(
    Options options) {
  absl::StatusOr<std::unique_ptr<FaultStore>> store =
      options.open_store ? options.open_store()
                         : FaultStore::Open(options.db_path);
  if (!store.ok()) return store.status();
  options.engine.first_fault_number = (*store)->NextFaultNumber();
  absl::StatusOr<std::unique_ptr<DetectionEngine>> engine =
      DetectionEngine::Create(options.clock, options.engine);
  if (!engine.ok()) return engine.status();
  for (const auto& [job, policy] : (*store)->Policies()) {
    (void)(*engine)->SetJobPolicy(job, policy);
  }
  // Faults open at the last stop: the same condition seen again updates
  // them instead of opening duplicates.
  if (absl::StatusOr<std::vector<v1::Fault>> open =
          (*store)->List("", /*include_resolved=*/false, 0);
      open.ok()) {
    (*engine)->AdoptOpenFaults(*open);
  }
  std::unique_ptr<ControllerCore> core(new ControllerCore(
      std::move(options), std::move(*store), std::move(*engine)));
  if (absl::Status s = core->StartPlanning(); !s.ok()) return s;
  // The trainer policies' settings set before the restart.
  absl::StatusOr<TrainerSettings> trainer = core->ReadTrainerSettings();
  if (!trainer.ok()) return trainer.status();
  {
    MutexLock lock(&core->mu_);
    ApplyTrainerSettings(*trainer, core->sync_.get(), core->lora_.get());
  }
  if (core->options_.leadership == nullptr) {
    MutexLock lock(&core->mu_);
    if (absl::Status s = core->LoadMigrations(); !s.ok()) return s;
  }
  return core;
}

ControllerCore::ControllerCore(Options options,
                               std::unique_ptr<FaultStore> store,
                               std::unique_ptr<DetectionEngine> engine)
    : options_(std::move(options)),
      store_(std::move(store)),
      start_unix_ns_(absl::ToUnixNanos(options_.clock->Now())),
      inbox_(options_.ingest_inbox_bytes),
      engine_(std::move(engine)),
      commands_(options_.clock) {
  MutexLock lock(&mu_);
  next_command_id_ = std::max<uint64_t>(1, start_unix_ns_ / 1000);
  drains_ = store_->Drains();
  process_budget_ = options_.max_tracked_processes;
  SyncPolicyEngine::Options sync = options_.sync;
  sync.directive_ids = &directive_ids_;
  sync_ = std::make_unique<SyncPolicyEngine>(options_.clock, std::move(sync));
  LoraPolicyEngine::Options lora = options_.lora;
  lora.directive_ids = &directive_ids_;
  lora_ = std::make_unique<LoraPolicyEngine>(options_.clock, std::move(lora));
  TrainerProfileService::Options profiles = options_.profiles;
  profiles.clock = options_.clock;
  profiles_ = std::make_unique<TrainerProfileService>(profiles);
}

ControllerCore::~ControllerCore() { Stop(); }

uint64_t ControllerCore::NowUnixNs() const {
  return static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()));
}

void ControllerCore::Start() {
  MutexLock lock(&loop_mu_);
  if (loop_.joinable()) return;
  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
}

void ControllerCore::Stop() {
  {
    MutexLock lock(&loop_mu_);
    stopping_ = true;
    loop_cv_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
}

void ControllerCore::Loop() {
  for (;;) {
    {
      MutexLock lock(&loop_mu_);
      if (!stopping_)
        loop_cv_.WaitWithTimeout(&loop_mu_, options_.cycle_period);
      if (stopping_) return;
    }
    RunCycle();
    RunPlanning();  // off the lock: it plans on its own snapshot
  }
}

void ControllerCore::CountRefused(const char* what, uint64_t* counter,
                                  uint64_t n) {
  *counter += n;
  if (options_.metrics) options_.metrics->Refused(what, n);
}

absl::StatusOr<uint64_t> ControllerCore::AgentConnected(
    const v1::NodeRegistration& registration, CommandSink* sink) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  v1::NodeRegistration reg = registration;
  int nics_dropped = 0;
  if (absl::Status s = CheckRegistration(&reg, &nics_dropped); !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  DrainInbox();  // batches of a session this one may supersede
  auto existing = nodes_.find(reg.host());
  if (existing == nodes_.end() && nodes_.size() >= options_.max_hosts) {
    ShedAndExpire();  // make room from nodes that are gone
    if (nodes_.size() >= options_.max_hosts) {
      CountRefused("hosts", &input_.hosts_refused);
      return absl::ResourceExhaustedError(absl::StrCat(
          "registration.host: the controller already tracks ", nodes_.size(),
          " hosts (budget max_hosts); ", reg.host(), " refused"));
    }
  }
  if (existing != nodes_.end() && existing->second.session != 0) {
    // Two live streams claim one host: decided by agent id and start time,
    // never by which stream came last (docs/reliability.md).
    NodeEntry& cur = existing->second;
    if (!NewClaimWins(cur.registration, reg)) {
      CountRefused("claims", &input_.claims_refused);
      if (input_.claims_refused % 100 == 1) {
        Logger("controller")
            ->warn(
                "agent {} (agent_id {}) refused: host served by agent {} "
                "started later ({} refusals)",
                reg.host(), reg.agent_id(), cur.registration.agent_id(),
                input_.claims_refused);
      }
      return absl::AlreadyExistsError(
          absl::StrCat("registration.host: ", reg.host(),
                       " is served by agent ", cur.registration.agent_id(),
                       ", started later than ", reg.agent_id()));
    }
    sessions_.erase(cur.session);
    if (cur.sink != nullptr) {
      cur.sink->Close(absl::AbortedError(absl::StrCat(
          "superseded: agent ", reg.agent_id(), " registered ", reg.host())));
    }
    ++input_.sessions_superseded;
    // The same agent reconnecting is routine; another agent taking the
    // host over is worth a warning.
    Logger("controller")
        ->log(cur.registration.agent_id() == reg.agent_id()
                  ? spdlog::level::info
                  : spdlog::level::warn,
              "agent {}: stream of {} superseded by {}; closed", reg.host(),
              cur.registration.agent_id(), reg.agent_id());
    cur.session = 0;
    cur.sink = nullptr;
  }
  if (nics_dropped > 0) {
    CountRefused("nics", &input_.nics_dropped, nics_dropped);
    Logger("controller")
        ->warn("agent {}: {} NICs beyond {} dropped from its registration",
               reg.host(), nics_dropped, kMaxNicsPerNode);
  }
  absl::Status s = engine_->AddNode(reg);
  if (!s.ok()) return s;
  const uint64_t session = next_id_++;
  NodeEntry& e = nodes_[reg.host()];
  e.registration = reg;
  e.session = session;
  e.sink = sink;
  e.last_seen_unix_ns = NowUnixNs();
  sessions_[session] = reg.host();
  if (options_.metrics) options_.metrics->SetAgentsConnected(sessions_.size());
  Logger("controller")
      ->info("agent {} connected (agent_id {}, {} GPUs{})", reg.host(),
             reg.agent_id(), reg.gpus_size(), reg.standby() ? ", standby" : "");
  if (migrations_) migrations_->OnHostUp(reg.host());
  ResendUnacked(reg.host(), sink);
  return session;
}

void ControllerCore::SubmitAgentBatch(uint64_t session,
                                      const v1::ConnectRequest* batch,
                                      BatchDone done) {
  if (options_.ingest_off_lock) {
    if (!mu_.TryLock()) {
      // A cycle, a disk write or a query holds the lock: do not wait for it.
      IngestInbox::Entry e{session, batch, std::move(done)};
      if (inbox_.Push(e)) {
        // The holder may have checked the inbox just before the push and
        // let go: then nobody would join this batch until the next cycle.
        // Either it sees the batch or this TryLock succeeds (ordered on
        // both sides by ingest_handoff_, see UnlockIngest).
        ingest_handoff_.fetch_add(1, std::memory_order_acq_rel);
        if (mu_.TryLock()) UnlockIngest();
        return;
      }
      done = std::move(e.done);  // the inbox is full: wait, slowing agents
      mu_.Lock();
    }
  } else {
    mu_.Lock();
  }
  DrainInbox();  // earlier batches first
  finished_.emplace_back(std::move(done), ApplyBatch(session, *batch));
  UnlockIngest();
}

absl::Status ControllerCore::AgentBatch(uint64_t session,
                                        const v1::ConnectRequest& batch) {
  std::promise<absl::Status> result;
  std::future<absl::Status> got = result.get_future();
  SubmitAgentBatch(session, &batch,
                   [&result](absl::Status s) { result.set_value(s); });
  return got.get();
}

ControllerCore::CoreLock::CoreLock(ControllerCore* core) : core_(core) {
  core_->mu_.Lock();
}

ControllerCore::CoreLock::~CoreLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  core_->UnlockIngest();
}

void ControllerCore::DrainInbox() {
  if (inbox_.empty()) return;
  std::vector<IngestInbox::Entry> queued = inbox_.TakeAll();
  input_.batches_queued += queued.size();
  if (options_.metrics) options_.metrics->AddBatchesQueued(queued.size());
  for (IngestInbox::Entry& e : queued) {
    finished_.emplace_back(std::move(e.done), ApplyBatch(e.session, *e.batch));
  }
}

void ControllerCore::UnlockIngest() {
  for (;;) {
    DrainInbox();
    std::vector<std::pair<BatchDone, absl::Status>> finished;
    finished.swap(finished_);
    mu_.Unlock();
    // Without the lock: a completion may start the stream's next read (or
    // end the stream), which must not wait for or call back into the core.
    for (auto& [done, status] : finished) done(std::move(status));
    ingest_handoff_.fetch_add(1, std::memory_order_acq_rel);
    if (inbox_.empty() || !mu_.TryLock()) return;
  }
}

absl::Status ControllerCore::ApplyBatch(uint64_t session,
                                        const v1::ConnectRequest& batch) {
  auto sit = sessions_.find(session);
  if (sit == sessions_.end()) {
    return absl::FailedPreconditionError(
        "stream is not registered (superseded or shed); reconnect");
  }
  const std::string& host = sit->second;
  NodeEntry& node = nodes_[host];
  node.last_seen_unix_ns = NowUnixNs();
  if (node.lost) {
    node.lost = false;
    engine_->NodeBack(host);
    Logger("controller")->info("agent {} reports again", host);
  }
  absl::Status first;
  if (batch.has_counters()) {
    if (absl::Status s = CheckCounters(batch.counters()); !s.ok()) {
      CountRefused("counters", &input_.counters_refused);
      first = s;  // the previous values stay
    } else {
      node.connected_ranks = batch.counters().connected_ranks();
      node.plugin_dropped = batch.counters().plugin_dropped();
      if (batch.counters().undelivered() > node.undelivered) {
        Logger("controller")
            ->warn(
                "agent {}: {} summaries/events accepted by its agents and "
                "never delivered (counters.undelivered)",
                host, batch.counters().undelivered());
      }
      node.undelivered = batch.counters().undelivered();
    }
  }
  AccountRecords(host, &node, batch);
  auto note = [&](absl::Status s, absl::string_view what, int i) {
    if (!s.ok() && first.ok()) {
      // Keeps RESOURCE_EXHAUSTED (a full table is not the agent's bad
      // input); FAILED_PRECONDITION is reserved for a superseded session,
      // which ends the agent's stream.
      const absl::StatusCode code = absl::IsFailedPrecondition(s)
                                        ? absl::StatusCode::kInvalidArgument
                                        : s.code();
      first =
          absl::Status(code, absl::StrCat(what, "[", i, "]: ", s.message()));
    }
  };
  for (int i = 0; i < batch.communicators_size(); ++i) {
    note(engine_->AddCommunicator(host, batch.communicators(i)),
         "communicators", i);
  }
  for (int i = 0; i < batch.lifecycle_size(); ++i) {
    note(engine_->AddLifecycle(host, batch.lifecycle(i)), "lifecycle", i);
  }
  for (int i = 0; i < batch.summaries_size(); ++i) {
    note(engine_->AddSummary(host, batch.summaries(i)), "summaries", i);
  }
  for (int i = 0; i < batch.progress_size(); ++i) {
    note(engine_->AddProgress(host, batch.progress(i)), "progress", i);
  }
  for (int i = 0; i < batch.trainer_reports_size(); ++i) {
    note(sync_->AddReport(host, batch.trainer_reports(i)), "trainer_reports",
         i);
    note(lora_->AddReport(host, batch.trainer_reports(i)), "trainer_reports",
         i);
    note(profiles_->OnReport(host, batch.trainer_reports(i)), "trainer_reports",
         i);
  }
  if (options_.metrics) options_.metrics->AddSummaries(batch.summaries_size());
  if (planner_) {
    planner_->ObserveBatch(host, batch);
    for (uint64_t id : batch.acked_command_ids()) planner_->Acked(host, id);
  }
  if (batch.acked_command_ids_size() > 0) {
    for (uint64_t id : batch.acked_command_ids()) commands_.Acked(host, id);
    PublishCommandCounts();
  }
  if (absl::Status s = MigrationInput(host, batch); !s.ok() && first.ok()) {
    first = s;
  }
  return first;
}

void ControllerCore::AgentDisconnected(uint64_t session) {
  CoreLock lock(this);
  DrainInbox();  // the stream's last batches before its end
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  NodeEntry& e = nodes_[it->second];
  e.session = 0;
  e.sink = nullptr;
  e.last_seen_unix_ns = NowUnixNs();
  e.lost = true;
  engine_->NodeLost(it->second);
  Logger("controller")->info("agent {} disconnected", it->second);
  const std::string host = it->second;
  sessions_.erase(it);
  if (migrations_) migrations_->OnHostDown(host, "", "agent stream lost");
  if (options_.metrics) options_.metrics->SetAgentsConnected(sessions_.size());
}

ControllerCore::InputStats ControllerCore::input_stats() {
  CoreLock lock(this);
  DrainInbox();
  return input_;
}

void ControllerCore::ShedAndExpire() {
  const uint64_t now = NowUnixNs();
  const uint64_t grace = absl::ToInt64Nanoseconds(options_.node_grace);
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.node_expiry);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    NodeEntry& e = it->second;
    const uint64_t silent = now - std::min(now, e.last_seen_unix_ns);
    if (e.session != 0 && silent > grace) {
      // A stream this silent is dead or stuck; closing it frees its
      // descriptor and makes a live agent reconnect.
      sessions_.erase(e.session);
      if (e.sink != nullptr) {
        e.sink->Close(absl::DeadlineExceededError(absl::StrCat(
            "agent stream silent for ", silent / 1'000'000'000, " s")));
      }
      e.session = 0;
      e.sink = nullptr;
      if (!e.lost) {
        e.lost = true;
        engine_->NodeLost(it->first);
      }
      ++input_.streams_shed;
      Logger("controller")
          ->warn("agent {}: stream silent for {} s; closed", it->first,
                 silent / 1'000'000'000);
    }
    if (e.session == 0 && expiry > 0 &&
        silent > static_cast<uint64_t>(expiry) && !drains_.count(it->first)) {
      engine_->ForgetNode(it->first);
      e.records.Release(&process_budget_);
      commands_.Forget(it->first);
      ++input_.nodes_expired;
      Logger("controller")
          ->info("node {} forgotten: no agent for {} s", it->first,
                 silent / 1'000'000'000);
      it = nodes_.erase(it);
      continue;
    }
    ++it;
  }
  if (options_.metrics) options_.metrics->SetAgentsConnected(sessions_.size());
}

void ControllerCore::RunCycle() {
  if (!CheckLeader().ok()) {  // followers detect nothing
    CoreLock lock(this);
    EndFormerWatches(/*now=*/false);
    return;
  }
  MutexLock cycle(&cycle_mu_);
  absl::StatusOr<std::vector<v1::Fault>> open = std::vector<v1::Fault>();
  if (!options_.join_off_lock) {  // the old way: everything under the lock
    {
      MutexLock writes(&write_mu_);
      mu_.Lock();
      DrainInbox();
      std::unique_ptr<CycleWork> spent;
      const CycleResult r = RunEngineLocked(/*yield=*/false, &spent);
      StoreFaults(r.faults);
      if (!sync_->empty() || !lora_->empty()) {
        open = store_->List("", false, 0);
        RunTrainerPolicies(open);
      }
      RunMigrations();
      UnlockIngest();
    }
    if (open.ok()) RunTrainerProfiles(*open);
    return;
  }
  mu_.Lock();
  DrainInbox();  // every batch that arrived before the cycle counts
  std::unique_ptr<CycleWork> spent;
  const CycleResult r = RunEngineLocked(/*yield=*/true, &spent);
  const bool trainers = !sync_->empty() || !lora_->empty();
  UnlockIngest();
  spent.reset();  // the cycle's copies, freed without the lock
  // Durable writes and reads without the lock: batches keep being joined.
  {
    MutexLock writes(&write_mu_);
    StoreFaults(r.faults);
  }
  if (trainers) open = store_->List("", false, 0);
  {
    CoreLock lock(this);
    RunTrainerPolicies(open);
    RunMigrations();
  }
  if (open.ok()) RunTrainerProfiles(*open);
}

void ControllerCore::YieldToIngest() {
  // Only when a batch waits: the cycle then joins it here and lets the lock
  // go while its completion (the stream's next read) runs.
  if (inbox_.empty() && finished_.empty()) return;
  DrainInbox();
  std::vector<std::pair<BatchDone, absl::Status>> finished;
  finished.swap(finished_);
  mu_.Unlock();
  for (auto& [done, status] : finished) done(std::move(status));
  mu_.Lock();
}

void ControllerCore::PrepareCycle() {
  ShedAndExpire();
  if (options_.agent_silence > absl::ZeroDuration()) {
    const uint64_t now = NowUnixNs();
    const uint64_t silence = absl::ToInt64Nanoseconds(options_.agent_silence);
    for (auto& [host, e] : nodes_) {
      if (e.session != 0 && !e.lost && now - e.last_seen_unix_ns > silence) {
        e.lost = true;
        engine_->NodeLost(host);
        Logger("controller")
            ->warn(
                "agent {} silent for {} ms: its ranks are not judged "
                "until it reports again",
                host, (now - e.last_seen_unix_ns) / 1'000'000);
      }
    }
  }
}

CycleResult ControllerCore::RunEngineLocked(bool yield,
                                            std::unique_ptr<CycleWork>* spent) {
  PrepareCycle();
  // With `yield`, batches queued during the cycle are joined between
  // communicators (the lock is let go there): a batch waits for one
  // communicator's copy or publication, not for the whole cycle. cycle_mu_
  // keeps engine_.
  const std::function<void()> between =
      yield ? std::function<void()>(
                  [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { YieldToIngest(); })
            : std::function<void()>();
  CycleResult r;
  if (yield && options_.detect_off_lock) {
    std::unique_ptr<CycleWork> work = engine_->BeginCycle(between);
    // The detectors on the engine's copy, without the lock: batches are
    // joined (by their senders) meanwhile. A batch queued before the lock
    // was let go is joined by UnlockIngest.
    UnlockIngest();
    work->Detect();
    mu_.Lock();
    DrainInbox();
    r = engine_->FinishCycle(work.get(), between);
    *spent = std::move(work);
  } else {
    r = engine_->RunCycle(between);
  }
  AfterCycle(r);
  return r;
}

void ControllerCore::AfterCycle(const CycleResult& r) {
  last_cycle_ms_ = absl::ToDoubleMilliseconds(r.cycle_time);
  const EngineStats stats = engine_->stats();
  const uint64_t joined = stats.collectives_joined;
  if (options_.metrics) {
    options_.metrics->ObserveCycle(absl::ToDoubleSeconds(r.cycle_time));
    options_.metrics->AddCollectivesJoined(joined - last_joined_);
    options_.metrics->Refused("members",
                              stats.members_refused - input_.members_refused);
    options_.metrics->Refused("communicators",
                              stats.comms_refused - input_.comms_refused);
  }
  input_.members_refused = stats.members_refused;
  input_.comms_refused = stats.comms_refused;
  last_joined_ = joined;
  for (const ProfilingRequest& p : r.profiling) SendProfiling(p);
}

void ControllerCore::StoreFaults(const std::vector<v1::Fault>& faults) {
  if (faults.empty()) return;
  struct Stored {
    v1::Fault fault;
    bool is_new = false;
    bool ignored = false;
  };
  std::vector<Stored> stored;
  for (const v1::Fault& f : faults) {
    const bool is_new = absl::IsNotFound(store_->Get(f.fault_id()).status());
    bool ignored = false;
    absl::StatusOr<v1::Fault> s = store_->Upsert(f, &ignored);
    if (!s.ok()) {
      Logger("controller")
          ->error("storing fault {}: {}", f.fault_id(), s.status().ToString());
      continue;
    }
    stored.push_back(Stored{std::move(*s), is_new, ignored});
  }
  // The lock for the engine and the watchers only (already held in the
  // old way, join_off_lock false); write_mu_ keeps these notifications in
  // the order of the writes.
  auto notify = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const Stored& s : stored) {
      if (s.ignored) {
        engine_->ForgetFault(s.fault.fault_id());
        continue;
      }
      if (s.is_new) {
        Logger("controller")
            ->warn("fault {} opened: {}", s.fault.fault_id(),
                   s.fault.summary());
        if (options_.metrics) {
          options_.metrics->FaultOpened(s.fault.fault_class());
        }
      }
      Notify(s.is_new ? v1::WatchFaultsResponse::CHANGE_OPENED
             : s.fault.state() == v1::FAULT_STATE_RESOLVED
                 ? v1::WatchFaultsResponse::CHANGE_RESOLVED
                 : v1::WatchFaultsResponse::CHANGE_UPDATED,
             s.fault);
    }
  };
  if (!options_.join_off_lock) {
    notify();
    return;
  }
  CoreLock lock(this);
  notify();
}

void ControllerCore::SendProfiling(const ProfilingRequest& r) {
  v1::AgentCommand cmd;
  cmd.set_command_id(next_command_id_++);
  v1::SetActivationMask* m = cmd.mutable_set_activation_mask();
  m->set_comm_hash(r.comm_hash);
  m->set_rank(r.rank);
  m->set_event_mask(r.event_mask);
  m->set_duration_ms(r.duration_ms);
  if (SendToAgent(r.host, cmd)) {
    Logger("controller")
        ->info("deep profiling asked of {} for comm {:x}", r.host, r.comm_hash);
  }
}

bool ControllerCore::SendToAgent(const std::string& host,
                                 const v1::AgentCommand& cmd) {
  auto it = nodes_.find(host);
  if (it == nodes_.end()) return false;
  const bool connected = it->second.sink != nullptr;
  if (connected) {
    v1::ConnectResponse resp;
    *resp.add_commands() = cmd;
    it->second.sink->Send(resp);
  }
  if (CommandLedger::Tracked(cmd)) {
    commands_.Sent(host, cmd, connected);
    PublishCommandCounts();
  }
  return connected;
}

void ControllerCore::ResendUnacked(const std::string& host, CommandSink* sink) {
  std::vector<v1::AgentCommand> again = commands_.ForReconnect(host);
  PublishCommandCounts();
  if (again.empty() || sink == nullptr) return;
  v1::ConnectResponse resp;
  for (v1::AgentCommand& c : again) *resp.add_commands() = std::move(c);
  sink->Send(resp);
  Logger("controller")
      ->info("agent {}: {} unacked command(s) sent again on its new stream",
             host, resp.commands_size());
}

void ControllerCore::PublishCommandCounts() {
  if (options_.metrics == nullptr) return;
  const CommandLedger::Counts t = commands_.Total();
  options_.metrics->SetAgentCommands(t.sent, t.acked, t.resent, t.dropped,
                                     t.pending);
}

void ControllerCore::Notify(v1::WatchFaultsResponse::Change change,
                            const v1::Fault& f) {
  // Every fault change passes here (cycles and operators' resolves).
  if (planner_) planner_->ObserveFault(f);
  v1::WatchFaultsResponse resp;
  resp.set_change(change);
  *resp.mutable_fault() = f;
  for (const auto& [id, w] : watchers_) {
    if (w.job_id.empty() || w.job_id == f.job_id()) w.fn(resp);
  }
}

uint64_t ControllerCore::Subscribe(const std::string& job_id,
                                   bool include_existing, WatchFn fn) {
  CoreLock lock(this);
  return AddWatcher(job_id, include_existing, std::move(fn), nullptr);
}

uint64_t ControllerCore::AddWatcher(const std::string& job_id,
                                    bool include_existing, WatchFn fn,
                                    WatchEndFn end) {
  if (include_existing) {
    absl::StatusOr<std::vector<v1::Fault>> open =
        store_->List(job_id, false, 0);
    if (open.ok()) {
      v1::WatchFaultsResponse resp;
      resp.set_change(v1::WatchFaultsResponse::CHANGE_EXISTING);
      for (auto it = open->rbegin(); it != open->rend(); ++it) {
        *resp.mutable_fault() = *it;
        fn(resp);
      }
    }
  }
  const uint64_t id = next_id_++;
  watchers_[id] = Watcher{job_id, std::move(fn), std::move(end)};
  return id;
}

void ControllerCore::Unsubscribe(uint64_t id) {
  CoreLock lock(this);
  watchers_.erase(id);
  ending_watches_.erase(id);
}

}  // namespace pitstop::controller
