// IngestService: agent streams and batches joined off the lock. The cycle
// and the queries are in ingest_cycle.cc.
#include "src/controller/ingest/ingest_service.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

absl::StatusOr<std::unique_ptr<DetectionEngine>> IngestService::NewEngine(
    const Options& options, FaultStore* store,
    const std::vector<v1::Fault>* open) {
  DetectionEngine::Options engine_options = options.engine;
  engine_options.first_fault_number = store->NextFaultNumber();
  absl::StatusOr<std::unique_ptr<DetectionEngine>> engine =
      DetectionEngine::Create(options.clock, engine_options);
  if (!engine.ok()) return engine.status();
  for (const auto& [job, policy] : store->Policies()) {
    (void)(*engine)->SetJobPolicy(job, policy);
  }
  // The hosts a scheduler named for the jobs running: a failed read fails
  // the start (or the take-over), so no job is left open to any host.
  absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>> named =
      store->ScheduledHosts();
  if (!named.ok()) return named.status();
  if (!named->empty()) {
    Logger("controller")
        ->info("the hosts of {} jobs named by the scheduler loaded from {}",
               named->size(), store->path());
  }
  for (const auto& [job, n] : *named) {
    // One the engine refuses (an older controller's limits) is logged and
    // left out.
    if (absl::Status s =
            (*engine)->SetJobHosts(job, {n.hosts().begin(), n.hosts().end()});
        !s.ok()) {
      Logger("controller")
          ->error("job {}: stored hosts not loaded: {}", job.substr(0, 64),
                  s.ToString());
    }
  }
  // Faults open at the last stop: the same condition seen again updates
  // them instead of opening duplicates.
  if (open != nullptr) (*engine)->AdoptOpenFaults(*open);
  return engine;
}

IngestService::IngestService(Options options,
                             std::unique_ptr<DetectionEngine> engine)
    : options_(std::move(options)),
      inbox_(options_.inbox_bytes),
      engine_(std::move(engine)) {}

uint64_t IngestService::NowUnixNs() const {
  return static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()));
}

IngestService::IngestLock::IngestLock(IngestService* s) : s_(s) {
  s_->mu_.Lock();
}

IngestService::IngestLock::~IngestLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  s_->UnlockIngest();
}

void IngestService::Flush() {
  IngestLock lock(this);
  DrainInbox();
}

void IngestService::SessionOpened(uint64_t session,
                                  const v1::NodeRegistration& reg) {
  IngestLock lock(this);
  DrainInbox();
  const std::string& host = reg.host();
  if (absl::Status s = engine_->AddNode(reg); !s.ok()) {
    Logger("controller")->error("agent {}: {}", host, s.ToString());
  }
  Liveness& l = liveness_[host];
  sessions_.erase(l.session);  // superseded
  l.session = session;
  l.last_seen_unix_ns = NowUnixNs();
  sessions_[session] = host;
}

std::string IngestService::SessionClosed(uint64_t session) {
  IngestLock lock(this);
  DrainInbox();  // the stream's last batches before its end
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return "";
  const std::string host = it->second;
  sessions_.erase(it);
  Liveness& l = liveness_[host];
  l.session = 0;
  l.last_seen_unix_ns = NowUnixNs();
  l.lost = true;
  engine_->NodeLost(host);
  return host;
}

void IngestService::SessionsGone(
    const std::vector<std::pair<std::string, uint64_t>>& shed,
    const std::vector<std::string>& forgotten) {
  if (shed.empty() && forgotten.empty()) return;
  IngestLock lock(this);
  for (const auto& [host, session] : shed) {
    auto it = liveness_.find(host);
    if (it == liveness_.end() || it->second.session != session) continue;
    sessions_.erase(session);
    it->second.session = 0;
    NodeLost(host, &it->second);  // also when it was silent before
  }
  for (const std::string& host : forgotten) {
    engine_->ForgetNode(host);
    liveness_.erase(host);
  }
}

void IngestService::NodeLost(const std::string& host, Liveness* l) {
  l->lost = true;
  engine_->NodeLost(host);
}

void IngestService::SubmitAgentBatch(uint64_t session,
                                     const v1::ConnectRequest* batch,
                                     BatchDone done) {
  if (options_.ingest_off_lock) {
    if (!mu_.TryLock()) {
      // A cycle or a query holds the lock: do not wait for it.
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

void IngestService::DrainInbox() {
  if (inbox_.empty()) return;
  std::vector<IngestInbox::Entry> queued = inbox_.TakeAll();
  batches_queued_ += queued.size();
  if (options_.metrics) options_.metrics->AddBatchesQueued(queued.size());
  for (IngestInbox::Entry& e : queued) {
    finished_.push_back(ApplyBatch(e.session, e.batch, std::move(e.done)));
  }
}

void IngestService::UnlockIngest() {
  for (;;) {
    DrainInbox();
    std::vector<Joined> finished;
    finished.swap(finished_);
    mu_.Unlock();
    // Without the lock: a completion may start the stream's next read (or
    // end the stream), and the batch's parts for the other services take
    // their own locks.
    for (Joined& j : finished) Complete(std::move(j));
    ingest_handoff_.fetch_add(1, std::memory_order_acq_rel);
    if (inbox_.empty() || !mu_.TryLock()) return;
  }
}

void IngestService::YieldToIngest() {
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

IngestService::Joined IngestService::ApplyBatch(uint64_t session,
                                                const v1::ConnectRequest* batch,
                                                BatchDone done) {
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

void IngestService::Complete(Joined j) {
  if (j.host.empty()) {  // nothing joined (an ended session)
    j.done(std::move(j.status));
    return;
  }
  absl::Status s = options_.after_join->Joined(j.session, j.host, *j.batch,
                                               std::move(j.status));
  j.done(std::move(s));
}

}  // namespace pitstop::controller
