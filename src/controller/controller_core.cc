// ControllerCore: agent streams, ingest and the detection loop. API queries
// are in controller_queries.cc, the services' links in controller_links.cc.
#include "src/controller/controller_core.h"

#include <atomic>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

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
  absl::StatusOr<TrainerPolicyService::Settings> trainer =
      core->trainers_->ReadSettings();
  if (!trainer.ok()) return trainer.status();
  core->trainers_->Reset(*trainer);
  if (core->options_.leadership == nullptr) {
    if (absl::Status s = core->migration_->Load(); !s.ok()) return s;
  }
  return core;
}

ControllerCore::ControllerCore(Options options,
                               std::unique_ptr<FaultStore> store,
                               std::unique_ptr<DetectionEngine> engine)
    : options_(std::move(options)),
      store_(std::move(store)),
      faults_(std::make_unique<FaultService>(
          FaultService::Options{options_.clock, store_.get(),
                                options_.leadership, options_.metrics})),
      nodes_(std::make_unique<NodeService>(NodeService::Options{
          options_.clock, store_.get(), options_.leadership, options_.metrics,
          options_.node_grace, options_.max_hosts, options_.node_expiry,
          options_.max_tracked_processes})),
      trainers_(
          std::make_unique<TrainerPolicyService>(TrainerPolicyService::Options{
              options_.clock, store_.get(), options_.leadership, &trainer_link_,
              options_.sync, options_.lora})),
      migration_(std::make_unique<MigrationService>(MigrationService::Options{
          options_.clock, store_.get(), options_.leadership, options_.migrate,
          &migration_links_, &migration_links_, &migration_links_})),
      start_unix_ns_(absl::ToUnixNanos(options_.clock->Now())),
      inbox_(options_.ingest_inbox_bytes),
      engine_(std::move(engine)) {}

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

absl::StatusOr<uint64_t> ControllerCore::AgentConnected(
    const v1::NodeRegistration& registration, CommandSink* sink) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  {
    CoreLock lock(this);
    DrainInbox();  // batches of a session this one may supersede
  }
  NodeService::Registered r = nodes_->Register(registration, sink);
  const std::string& host = r.registration.host();
  {
    CoreLock lock(this);
    ApplyGone(r.gone);  // made room for it
    if (!r.status.ok()) return r.status;
    if (absl::Status s = engine_->AddNode(r.registration); !s.ok()) {
      Logger("controller")->error("agent {}: {}", host, s.ToString());
    }
    Liveness& l = liveness_[host];
    sessions_.erase(l.session);  // superseded
    l.session = r.session;
    l.last_seen_unix_ns = NowUnixNs();
    sessions_[r.session] = host;
  }
  migration_->OnHostUp(host);
  return r.session;
}

void ControllerCore::ApplyGone(const NodeService::Gone& gone) {
  for (const auto& [host, session] : gone.shed) {
    auto it = liveness_.find(host);
    if (it == liveness_.end() || it->second.session != session) continue;
    sessions_.erase(session);
    it->second.session = 0;
    if (!it->second.lost) {
      it->second.lost = true;
      engine_->NodeLost(host);
    }
    migration_->HostGone(host);  // takes only its own lock
  }
  for (const std::string& host : gone.forgotten) {
    engine_->ForgetNode(host);
    liveness_.erase(host);
    migration_->HostGone(host);
  }
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
  finished_.push_back(ApplyBatch(session, batch, std::move(done)));
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
    finished_.push_back(ApplyBatch(e.session, e.batch, std::move(e.done)));
  }
}

void ControllerCore::UnlockIngest() {
  for (;;) {
    DrainInbox();
    std::vector<Joined> finished;
    finished.swap(finished_);
    mu_.Unlock();
    // Without the lock: a completion may start the stream's next read (or
    // end the stream), which must not wait for or call back into the core.
    for (Joined& j : finished) Complete(std::move(j));
    ingest_handoff_.fetch_add(1, std::memory_order_acq_rel);
    if (inbox_.empty() || !mu_.TryLock()) return;
  }
}

ControllerCore::Joined ControllerCore::ApplyBatch(
    uint64_t session, const v1::ConnectRequest* batch, BatchDone done) {
  Joined j{std::move(done), absl::OkStatus(), session, "", batch};
  auto sit = sessions_.find(session);
  if (sit == sessions_.end()) {
    j.status = absl::FailedPreconditionError(
        "stream is not registered (superseded or shed); reconnect");
    return j;
  }
  j.host = sit->second;
  const std::string& host = j.host;
  Liveness& live = liveness_[host];
  live.last_seen_unix_ns = NowUnixNs();
  if (live.lost) {
    live.lost = false;
    engine_->NodeBack(host);
    Logger("controller")->info("agent {} reports again", host);
  }
  absl::Status& first = j.status;
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
  const v1::ConnectRequest& b = *batch;
  for (int i = 0; i < b.communicators_size(); ++i) {
    note(engine_->AddCommunicator(host, b.communicators(i)), "communicators",
         i);
  }
  for (int i = 0; i < b.lifecycle_size(); ++i) {
    note(engine_->AddLifecycle(host, b.lifecycle(i)), "lifecycle", i);
  }
  for (int i = 0; i < b.summaries_size(); ++i) {
    note(engine_->AddSummary(host, b.summaries(i)), "summaries", i);
  }
  for (int i = 0; i < b.progress_size(); ++i) {
    note(engine_->AddProgress(host, b.progress(i)), "progress", i);
  }
  if (options_.metrics) options_.metrics->AddSummaries(b.summaries_size());
  return j;
}

void ControllerCore::Complete(Joined j) {
  if (j.host.empty()) {  // nothing joined (an ended session)
    j.done(std::move(j.status));
    return;
  }
  // The first error of the batch, in the order a reader of the batch meets
  // them: counters, detection records, trainer reports, migration acks.
  absl::Status first = nodes_->AfterJoin(j.session, *j.batch);
  auto keep = [&first](absl::Status s) {
    if (first.ok()) first = std::move(s);
  };
  keep(std::move(j.status));
  keep(trainers_->OnReports(j.host, *j.batch));
  planning_->ObserveBatch(j.host, *j.batch);
  keep(migration_->OnBatch(j.host, *j.batch));
  j.done(std::move(first));
}

void ControllerCore::AgentDisconnected(uint64_t session) {
  std::string host;
  {
    CoreLock lock(this);
    DrainInbox();  // the stream's last batches before its end
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return;
    host = it->second;
    sessions_.erase(it);
    Liveness& l = liveness_[host];
    l.session = 0;
    l.last_seen_unix_ns = NowUnixNs();
    l.lost = true;
    engine_->NodeLost(host);
  }
  (void)nodes_->Disconnect(session);
  migration_->OnHostDown(host);
}

ControllerCore::InputStats ControllerCore::input_stats() {
  const NodeService::Stats n = nodes_->stats();
  CoreLock lock(this);
  DrainInbox();
  InputStats s = input_;
  s.hosts_refused = n.hosts_refused;
  s.nics_dropped = n.nics_dropped;
  s.counters_refused = n.counters_refused;
  s.claims_refused = n.claims_refused;
  s.sessions_superseded = n.sessions_superseded;
  s.streams_shed = n.streams_shed;
  s.nodes_expired = n.nodes_expired;
  s.processes_refused = n.processes_refused;
  return s;
}

void ControllerCore::RunCycle() {
  if (!CheckLeader().ok()) {  // followers detect nothing
    faults_->EndFormerWatches(/*now=*/false);
    migration_->EndFormerWatches(/*now=*/false);
    return;
  }
  MutexLock cycle(&cycle_mu_);
  const std::vector<std::string> resolved = faults_->TakeResolved();
  mu_.Lock();
  DrainInbox();  // every batch that arrived before the cycle counts
  // Faults operators resolved since the last cycle: the engine stops
  // updating them and opens a new fault if the condition is still seen.
  for (const std::string& id : resolved) engine_->ForgetFault(id);
  std::unique_ptr<CycleWork> spent;
  const CycleResult r = RunEngineLocked(/*yield=*/true, &spent);
  UnlockIngest();
  spent.reset();  // the cycle's copies, freed without the lock
  // Durable writes and reads without the lock: batches keep being joined.
  StoreFaults(r.faults);
  // The trainer policies (sync, then multi-LoRA) on one read of the open
  // faults.
  if (trainers_->Active()) {
    absl::StatusOr<std::vector<v1::Fault>> open = faults_->OpenFaults();
    if (open.ok()) {
      trainers_->RunCycle(*open);
    } else {
      Logger("controller.sync")
          ->error("trainer policies: reading open faults: {}",
                  open.status().ToString());
    }
  }
  migration_->RunCycle();
}

void ControllerCore::YieldToIngest() {
  // Only when a batch waits: the cycle then joins it here and lets the lock
  // go while its completion (the stream's next read) runs.
  if (inbox_.empty() && finished_.empty()) return;
  DrainInbox();
  std::vector<Joined> finished;
  finished.swap(finished_);
  mu_.Unlock();
  for (Joined& j : finished) Complete(std::move(j));
  mu_.Lock();
}

void ControllerCore::PrepareCycle() {
  ApplyGone(nodes_->ShedAndExpire());
  if (options_.agent_silence > absl::ZeroDuration()) {
    const uint64_t now = NowUnixNs();
    const uint64_t silence = absl::ToInt64Nanoseconds(options_.agent_silence);
    for (auto& [host, e] : liveness_) {
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
  const std::vector<std::string> forget = faults_->StoreCycleFaults(faults);
  if (forget.empty()) return;
  CoreLock lock(this);
  for (const std::string& id : forget) engine_->ForgetFault(id);
}

void ControllerCore::SendProfiling(const ProfilingRequest& r) {
  v1::AgentCommand cmd;
  v1::SetActivationMask* m = cmd.mutable_set_activation_mask();
  m->set_comm_hash(r.comm_hash);
  m->set_rank(r.rank);
  m->set_event_mask(r.event_mask);
  m->set_duration_ms(r.duration_ms);
  if (nodes_->Send(r.host, cmd).written) {
    Logger("controller")
        ->info("deep profiling asked of {} for comm {:x}", r.host, r.comm_hash);
  }
}

}  // namespace pitstop::controller
