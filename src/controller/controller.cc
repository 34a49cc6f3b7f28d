// Controller: creating the services, agent streams across them, the
// detection loop and its cycle. Leadership is in controller_leadership.cc,
// the cross-service queries in controller_queries.cc.
#include "src/controller/controller.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_links.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(
    Options options) {
  absl::StatusOr<std::unique_ptr<FaultStore>> store =
      options.open_store ? options.open_store()
                         : FaultStore::Open(options.db_path);
  if (!store.ok()) return store.status();
  std::unique_ptr<Controller> c(
      new Controller(std::move(options), std::move(*store)));
  if (absl::Status s = c->Init(); !s.ok()) return s;
  return c;
}

Controller::Controller(Options options, std::unique_ptr<FaultStore> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      start_unix_ns_(
          static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()))),
      links_(std::make_unique<Links>(this)) {}

absl::Status Controller::Init() {
  faults_ = std::make_unique<FaultService>(FaultService::Options{
      options_.clock, store_.get(), options_.leadership, options_.metrics});
  nodes_ = std::make_unique<NodeService>(NodeService::Options{
      options_.clock, store_.get(), options_.leadership, options_.metrics,
      options_.node_grace, options_.max_hosts, options_.node_expiry,
      options_.max_tracked_processes});
  trainers_ =
      std::make_unique<TrainerPolicyService>(TrainerPolicyService::Options{
          options_.clock, store_.get(), options_.leadership, links_.get(),
          options_.sync, options_.lora, options_.policy_actions});
  TrainerProfileService::Options profiles = options_.profiles;
  profiles.clock = options_.clock;
  profiles_ = std::make_unique<TrainerProfileService>(profiles);
  PlanningService::Options po;
  po.planner = options_.planning;
  po.planner.clock = options_.clock;
  po.planner.store = store_.get();
  po.leadership = options_.leadership;
  po.sender = links_.get();
  absl::StatusOr<std::unique_ptr<PlanningService>> planning =
      PlanningService::Create(std::move(po));
  if (!planning.ok()) return planning.status();
  planning_ = std::move(*planning);
  if (planning_->enabled()) {
    // Every fault change (cycles, operators' resolves, mitigations) reaches
    // the planner: COMM_SLOW verdicts mark links (it takes only its own
    // short lock, a leaf).
    faults_->Subscribe("", /*include_existing=*/false,
                       [p = planning_.get()](const v1::WatchFaultsResponse& r) {
                         p->ObserveFault(r.fault());
                       });
  }
  migration_ = std::make_unique<MigrationService>(MigrationService::Options{
      options_.clock, store_.get(), options_.leadership, options_.migrate,
      links_.get(), links_.get(), links_.get(), options_.policy_actions});
  IngestService::Options io;
  io.clock = options_.clock;
  io.store = store_.get();
  io.leadership = options_.leadership;
  io.metrics = options_.metrics;
  io.after_join = links_.get();
  io.engine = options_.engine;
  io.agent_silence = options_.agent_silence;
  io.ingest_off_lock = options_.ingest_off_lock;
  io.detect_off_lock = options_.detect_off_lock;
  io.inbox_bytes = options_.ingest_inbox_bytes;
  // Faults open at the last stop (a failed read only loses that).
  const absl::StatusOr<std::vector<v1::Fault>> open = faults_->OpenFaults();
  absl::StatusOr<std::unique_ptr<DetectionEngine>> engine =
      IngestService::NewEngine(io, store_.get(), open.ok() ? &*open : nullptr);
  if (!engine.ok()) return engine.status();
  ingest_ = std::make_unique<IngestService>(std::move(io), std::move(*engine));
  // The trainer policies' settings set before the restart.
  absl::StatusOr<TrainerPolicyService::Settings> trainer =
      trainers_->ReadSettings();
  if (!trainer.ok()) return trainer.status();
  trainers_->Reset(*trainer);
  // With several controllers the elected one loads them (BecomeLeader).
  if (options_.leadership == nullptr) return migration_->Load();
  return absl::OkStatus();
}

Controller::~Controller() { Stop(); }

void Controller::Start() {
  MutexLock lock(&loop_mu_);
  if (loop_.joinable()) return;
  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
}

void Controller::Stop() {
  {
    MutexLock lock(&loop_mu_);
    stopping_ = true;
    loop_cv_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
}

void Controller::Loop() {
  for (;;) {
    {
      MutexLock lock(&loop_mu_);
      if (!stopping_)
        loop_cv_.WaitWithTimeout(&loop_mu_, options_.cycle_period);
      if (stopping_) return;
    }
    RunCycle();
    planning_->Run();  // it plans on its own snapshot
  }
}

absl::StatusOr<uint64_t> Controller::AgentConnected(
    const v1::NodeRegistration& registration, CommandSink* sink) {
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  ingest_->Flush();  // batches of a session this one may supersede
  const NodeService::Registered r = nodes_->Register(registration, sink);
  // Nodes expired to make room, even when refused.
  ingest_->SessionsGone(r.gone.shed, r.gone.forgotten);
  for (const auto& [host, session] : r.gone.shed) migration_->HostGone(host);
  for (const std::string& host : r.gone.forgotten) migration_->HostGone(host);
  if (!r.status.ok()) return r.status;
  ingest_->SessionOpened(r.session, r.registration);
  migration_->OnHostUp(r.registration.host());
  // Only now does the node show its agent connected: a caller that sees it
  // may rely on the stream's batches being accepted.
  nodes_->Opened(r.session);
  return r.session;
}

void Controller::SubmitAgentBatch(uint64_t session,
                                  const v1::ConnectRequest* batch,
                                  BatchDone done) {
  ingest_->SubmitAgentBatch(session, batch, std::move(done));
}

absl::Status Controller::AgentBatch(uint64_t session,
                                    const v1::ConnectRequest& batch) {
  std::promise<absl::Status> result;
  std::future<absl::Status> got = result.get_future();
  SubmitAgentBatch(session, &batch,
                   [&result](absl::Status s) { result.set_value(s); });
  return got.get();
}

void Controller::BatchRefused() {
  batches_refused_.fetch_add(1);
  if (options_.metrics) options_.metrics->Refused("batch_parse_cost", 1);
}

void Controller::AgentDisconnected(uint64_t session) {
  // Detection first: the stream's last batches are joined (and their
  // counters counted) while the session is still the node's.
  const std::string host = ingest_->SessionClosed(session);
  (void)nodes_->Disconnect(session);
  if (!host.empty()) migration_->OnHostDown(host);
}

Controller::InputStats Controller::input_stats() {
  const NodeService::Stats n = nodes_->stats();
  const IngestService::Stats i = ingest_->stats();
  InputStats s;
  s.hosts_refused = n.hosts_refused;
  s.nics_dropped = n.nics_dropped;
  s.counters_refused = n.counters_refused;
  s.claims_refused = n.claims_refused;
  s.sessions_superseded = n.sessions_superseded;
  s.streams_shed = n.streams_shed;
  s.nodes_expired = n.nodes_expired;
  s.processes_refused = n.processes_refused;
  s.members_refused = i.members_refused;
  s.comms_refused = i.comms_refused;
  s.foreign_claims_refused = i.claims_refused;
  s.foreign_deaths_refused = i.deaths_refused;
  s.batches_queued = i.batches_queued;
  s.batches_refused = batches_refused_.load();
  return s;
}

void Controller::RunCycle() {
  if (!CheckLeader(options_.leadership).ok()) {  // followers detect nothing
    faults_->EndFormerWatches(/*now=*/false);
    migration_->EndFormerWatches(/*now=*/false);
    return;
  }
  MutexLock cycle(&cycle_mu_);
  // Faults operators resolved since the last cycle: the engine stops
  // updating them and opens a new fault if the condition is still seen.
  ingest_->ForgetFaults(faults_->TakeResolved());
  // Silent streams closed, gone nodes forgotten.
  const NodeService::Gone gone = nodes_->ShedAndExpire();
  ingest_->SessionsGone(gone.shed, gone.forgotten);
  for (const auto& [host, session] : gone.shed) migration_->HostGone(host);
  for (const std::string& host : gone.forgotten) migration_->HostGone(host);
  const CycleResult r = ingest_->RunCycle();
  for (const ProfilingRequest& p : r.profiling) {
    v1::AgentCommand cmd;
    v1::SetActivationMask* m = cmd.mutable_set_activation_mask();
    m->set_comm_hash(p.comm_hash);
    m->set_rank(p.rank);
    m->set_event_mask(p.event_mask);
    m->set_duration_ms(p.duration_ms);
    if (nodes_->Send(p.host, std::move(cmd)).written) {
      Logger("controller")
          ->info("deep profiling asked of {} for comm {:x}", p.host,
                 p.comm_hash);
    }
  }
  // Stored without the ingest lock: batches keep being joined meanwhile.
  ingest_->ForgetFaults(faults_->StoreCycleFaults(r.faults));
  // The trainer policies (sync, then multi-LoRA) and the trainer profiles
  // on one read of the open faults, taken while trainers report.
  absl::StatusOr<std::vector<v1::Fault>> open = std::vector<v1::Fault>();
  if (trainers_->Active()) {
    open = faults_->OpenFaults();
    if (open.ok()) {
      trainers_->RunCycle(*open);
    } else {
      Logger("controller.sync")
          ->error("trainer policies: reading open faults: {}",
                  open.status().ToString());
    }
  }
  migration_->RunCycle();
  if (open.ok()) RunTrainerProfiles(*open);
}

void Controller::RunTrainerProfiles(const std::vector<v1::Fault>& open) {
  TrainerProfileService::CycleOut out = profiles_->RunCycle(open);
  // refused_total{what="trainer_profiles"} (the table's ceiling),
  // {what="trainer_profiles_per_host"} (a host's share, issue #33) and
  // {what="trainer_profiles_foreign"} (another host's live trainer).
  const TrainerProfileService::Stats ps = profiles_->stats();
  if (options_.metrics != nullptr) {
    options_.metrics->Refused(
        "trainer_profiles",
        static_cast<double>(ps.trainers_refused -
                            profiles_counted_.trainers_refused));
    options_.metrics->Refused(
        "trainer_profiles_per_host",
        static_cast<double>(ps.trainers_refused_host -
                            profiles_counted_.trainers_refused_host));
    options_.metrics->Refused(
        "trainer_profiles_foreign",
        static_cast<double>(ps.trainers_refused_foreign -
                            profiles_counted_.trainers_refused_foreign));
  }
  profiles_counted_ = ps;
  for (const TrainerProfileService::Attach& a : out.profiles) {
    (void)faults_->AttachTrainerProfile(a.fault_id, a.profile);
  }
  for (const TrainerProfileService::Request& r : out.requests) {
    v1::AgentCommand cmd;
    *cmd.mutable_trainer_profile() = r.request;
    // An agent that is not connected: the capture's deadline says so.
    (void)nodes_->Send(r.host, std::move(cmd));
  }
}

}  // namespace pitstop::controller
