// IngestService: the engine's part of the detection cycle, the queries of
// detection state, and job policies.
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/detect/scheduled_hosts.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/ingest/ingest_service.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

absl::Status Required(const std::string& value, absl::string_view field) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  return absl::OkStatus();
}

}  // namespace

void IngestService::ForgetFaults(const std::vector<std::string>& fault_ids) {
  if (fault_ids.empty()) return;
  IngestLock lock(this);
  for (const std::string& id : fault_ids) engine_->ForgetFault(id);
}

void IngestService::RetireComms(const std::vector<uint64_t>& comm_hashes,
                                const std::string& why) {
  IngestLock lock(this);
  engine_->RetireComms(comm_hashes, why);
}

CycleResult IngestService::RunCycle() {
  mu_.Lock();
  DrainInbox();  // every batch that arrived before the cycle counts
  std::unique_ptr<CycleWork> spent;
  const CycleResult r = RunEngineLocked(&spent);
  UnlockIngest();
  spent.reset();  // the cycle's copies, freed without the lock
  return r;
}

void IngestService::MarkSilent() {
  if (options_.agent_silence <= absl::ZeroDuration()) return;
  const uint64_t now = NowUnixNs();
  const uint64_t silence = absl::ToInt64Nanoseconds(options_.agent_silence);
  for (auto& [host, e] : liveness_) {
    if (e.session != 0 && !e.lost && now - e.last_seen_unix_ns > silence) {
      // Unreachable, but its ranks stay its own: only an ended session
      // (and a grace) lets another host report them.
      e.lost = true;
      engine_->NodeSilent(host);
      Logger("controller")
          ->warn(
              "agent {} silent for {} ms: its ranks are not judged until it "
              "reports again",
              host, (now - e.last_seen_unix_ns) / 1'000'000);
    }
  }
}

CycleResult IngestService::RunEngineLocked(std::unique_ptr<CycleWork>* spent) {
  MarkSilent();
  // Batches queued during the cycle are joined between communicators (the
  // lock is let go there): a batch waits for one communicator's copy or
  // publication, not for the whole cycle. The Controller's cycle lock keeps
  // engine_ (Reset) meanwhile.
  const std::function<void()> between =
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { YieldToIngest(); };
  CycleResult r;
  if (options_.detect_off_lock) {
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

void IngestService::AfterCycle(const CycleResult& r) {
  last_cycle_ms_ = absl::ToDoubleMilliseconds(r.cycle_time);
  const EngineStats stats = engine_->stats();
  const uint64_t joined = stats.collectives_joined;
  if (options_.metrics) {
    options_.metrics->ObserveCycle(absl::ToDoubleSeconds(r.cycle_time));
    options_.metrics->AddCollectivesJoined(joined - last_joined_);
  }
  // refused_total{what}: the cluster ceilings under their old names, the
  // shares of hosts and jobs beside them, and claims for other hosts.
  const std::pair<const char*, uint64_t> refused[] = {
      {"members", stats.members_refused - stats.members_refused_host -
                      stats.members_refused_job -
                      stats.members_refused_host_job},
      {"members_per_host", stats.members_refused_host},
      {"members_per_job", stats.members_refused_job},
      {"members_per_host_job", stats.members_refused_host_job},
      {"communicators", stats.comms_refused - stats.comms_refused_host -
                            stats.comms_refused_job -
                            stats.comms_refused_host_job},
      {"communicators_per_host", stats.comms_refused_host},
      {"communicators_per_job", stats.comms_refused_job},
      {"communicators_per_host_job", stats.comms_refused_host_job},
      {"summaries", stats.summaries_refused - stats.summaries_refused_host -
                        stats.summaries_refused_job -
                        stats.summaries_refused_host_job},
      {"summaries_per_host", stats.summaries_refused_host},
      {"summaries_per_job", stats.summaries_refused_job},
      {"summaries_per_host_job", stats.summaries_refused_host_job},
      {"foreign_claims", stats.claims_refused},
      {"unscheduled_hosts", stats.unscheduled_refused},
      {"foreign_deaths", stats.deaths_refused},
      {"jobless_superseded", stats.jobless_superseded},
      {"config_failures", stats.config_failures_refused},
  };
  for (const auto& [what, total] : refused) {
    uint64_t& last = refused_last_[what];
    if (options_.metrics && total > last) {
      options_.metrics->Refused(what, static_cast<double>(total - last));
    }
    last = total;
  }
  members_refused_ = stats.members_refused;
  comms_refused_ = stats.comms_refused;
  claims_refused_ = stats.claims_refused;
  deaths_refused_ = stats.deaths_refused;
  last_joined_ = joined;
}

void IngestService::Reset(std::unique_ptr<DetectionEngine> engine) {
  IngestLock lock(this);
  liveness_.clear();
  sessions_.clear();
  engine_ = std::move(engine);
  last_joined_ = 0;
  members_refused_ = 0;
  comms_refused_ = 0;
  claims_refused_ = 0;
  deaths_refused_ = 0;
  refused_last_.clear();
}

void IngestService::CloseSessions() {
  IngestLock lock(this);
  liveness_.clear();
  sessions_.clear();
}

std::vector<v1::Communicator> IngestService::Communicators(
    const std::string& job_id) {
  IngestLock lock(this);
  std::vector<v1::Communicator> out;
  for (v1::Communicator& c : engine_->Communicators()) {
    if (job_id.empty() || c.job_id() == job_id) out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<v1::Communicator> IngestService::Communicator(
    uint64_t comm_hash) {
  if (comm_hash == 0) {
    return absl::InvalidArgumentError("comm_hash: required (non-zero)");
  }
  IngestLock lock(this);
  v1::Communicator c;
  if (engine_->GetCommunicator(comm_hash, &c)) return c;
  return absl::NotFoundError(
      absl::StrCat("communicator ", absl::Hex(comm_hash), " not found"));
}

std::vector<v1::Job> IngestService::Jobs() {
  IngestLock lock(this);
  return engine_->Jobs();
}

absl::StatusOr<v1::JobPolicy> IngestService::GetPolicy(
    const std::string& job_id) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  return JobPolicy(job_id);
}

v1::JobPolicy IngestService::JobPolicy(const std::string& job_id) {
  IngestLock lock(this);
  return engine_->GetJobPolicy(job_id);
}

absl::StatusOr<v1::JobPolicy> IngestService::SetPolicy(
    const std::string& job_id, const v1::JobPolicy& policy) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  // Checked and stored first, then set: a write the store refuses (a
  // deposed leader's) changes nothing here either. The store write holds
  // policy_mu_, not mu_: agent batches are not held by the disk sync or
  // the etcd round trip.
  const v1::JobPolicy& defaults = options_.engine.default_policy;
  if (absl::Status s = ValidatePolicy(policy, defaults); !s.ok()) return s;
  policy_mu_.Lock();
  if (absl::Status s =
          options_.store->SavePolicy(job_id, ResolvePolicy(policy, defaults));
      !s.ok()) {
    policy_mu_.Unlock();
    return s;
  }
  mu_.Lock();
  absl::StatusOr<v1::JobPolicy> set = engine_->SetJobPolicy(job_id, policy);
  // policy_mu_ first: the completions UnlockIngest runs take other
  // services' locks, which no lock of this service may be held across.
  policy_mu_.Unlock();
  UnlockIngest();
  return set;
}

absl::StatusOr<std::vector<std::string>> IngestService::SetJobHosts(
    const std::string& job_id, const std::vector<std::string>& hosts,
    const std::string& who) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  if (absl::Status s = CheckSchedulerName(who); !s.ok()) return s;
  // As SetPolicy: checked and stored first, then set, so a write the store
  // refuses (a deposed leader's) changes nothing here either; policy_mu_
  // keeps namings in one order and holds no agent batch across the store
  // write. The counts are read under mu_, let go without joining (no
  // completion may run under policy_mu_): what queued meanwhile is joined
  // when mu_ is let go at the end, on every path.
  policy_mu_.Lock();
  mu_.Lock();
  const EngineStats st = engine_->stats();
  const ScheduledCounts now{st.scheduled_jobs, st.scheduled_names,
                            engine_->JobHosts(job_id).size()};
  mu_.Unlock();
  absl::StatusOr<std::vector<std::string>> named =
      CheckJobHosts(job_id, hosts, now);
  v1::SetJobHostsRequest record;
  record.set_job_id(job_id);
  record.set_who(who);
  if (named.ok()) *record.mutable_hosts() = {named->begin(), named->end()};
  absl::Status s =
      named.ok() ? options_.store->SaveJobHosts(record) : named.status();
  mu_.Lock();
  // Refused here only when a new term's engine came meanwhile.
  if (s.ok()) s = engine_->SetJobHosts(job_id, *named);
  policy_mu_.Unlock();
  UnlockIngest();
  if (!s.ok()) return s;
  return named;
}

std::vector<std::string> IngestService::JobHosts(const std::string& job_id) {
  IngestLock lock(this);
  return engine_->JobHosts(job_id);
}

IngestService::Stats IngestService::stats() {
  IngestLock lock(this);
  DrainInbox();
  Stats s;
  s.batches_queued = batches_queued_;
  s.members_refused = members_refused_;
  s.comms_refused = comms_refused_;
  s.claims_refused = claims_refused_;
  s.deaths_refused = deaths_refused_;
  const EngineStats st = engine_->stats();
  s.communicators = st.communicators;
  s.collectives_joined = st.collectives_joined;
  s.last_cycle_ms = last_cycle_ms_;
  return s;
}

}  // namespace pitstop::controller
