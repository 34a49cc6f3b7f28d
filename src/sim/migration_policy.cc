// degraded-node-migration (migration_scenario.h): a GPU of the leaver node
// degrades, detection finds it, policy ACT moves the node to the standby,
// and the run plays the scheduler that starts the joiner processes. Also
// what every migration scenario is judged on about the job's faults.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "src/sim/migration_run.h"

namespace pitstop::sim::migration_internal {
namespace {

// The job's migrations as a scheduler integration follows them: one
// WatchMigrations stream, read on its own thread. First() is the first
// migration the stream announced (existing or created).
//
// Thread safety: First() and ended() from any thread; the reader thread is
// internal. The destructor cancels the stream and joins.
class MigrationWatch {
 public:
  MigrationWatch(v1::Controller::Stub* stub, const std::string& job) {
    v1::WatchMigrationsRequest req;
    req.set_job_id(job);
    req.set_include_existing(true);
    // A deadline past the whole run: the stream ends with it at the latest.
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoSeconds(kRunDeadline + absl::Minutes(1)));
    reader_ = stub->WatchMigrations(&ctx_, req);
    thread_ = std::thread([this] { Read(); });
  }
  ~MigrationWatch() {
    ctx_.TryCancel();
    thread_.join();
  }

  std::optional<v1::Migration> First() {
    absl::MutexLock lock(&mu_);
    return first_;
  }
  // Why the stream ended early ("" while it runs).
  std::string ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  void Read() {
    v1::WatchMigrationsResponse r;
    while (reader_->Read(&r)) {
      if (r.change() != v1::WatchMigrationsResponse::CHANGE_CREATED &&
          r.change() != v1::WatchMigrationsResponse::CHANGE_EXISTING) {
        continue;
      }
      absl::MutexLock lock(&mu_);
      if (!first_.has_value()) first_ = r.migration();
    }
    const grpc::Status st = reader_->Finish();
    absl::MutexLock lock(&mu_);
    ended_ = absl::StrCat("WatchMigrations ended: ", st.error_message(),
                          " (code ", st.error_code(), ")");
  }

  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::WatchMigrationsResponse>> reader_;
  absl::Mutex mu_;
  std::optional<v1::Migration> first_ ABSL_GUARDED_BY(mu_);
  std::string ended_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The first GPU/NIC/node-level suspect: the hardware policy ACT acts on.
const v1::Suspect* HardwareSuspect(const v1::Fault& f) {
  for (const v1::Suspect& s : f.suspects()) {
    if (s.level() == v1::SUSPECT_LEVEL_GPU ||
        s.level() == v1::SUSPECT_LEVEL_NIC ||
        s.level() == v1::SUSPECT_LEVEL_NODE) {
      return &s;
    }
  }
  return nullptr;
}

std::string DescribeSuspect(const v1::Suspect& s) {
  std::string out = s.host();
  if (s.gpu_index() >= 0) absl::StrAppend(&out, " gpu ", s.gpu_index());
  if (!s.nic().empty()) absl::StrAppend(&out, " nic ", s.nic());
  if (s.global_rank() >= 0)
    absl::StrAppend(&out, " (rank ", s.global_rank(), ")");
  return out;
}

std::string SecondsAfter(uint64_t from_ns, uint64_t to_ns) {
  if (from_ns == 0 || to_ns == 0) return "-";
  return absl::StrFormat(
      "%+.1f s",
      (static_cast<double>(to_ns) - static_cast<double>(from_ns)) / 1e9);
}

}  // namespace

grpc::Status ScenarioRun::ListJobFaults(v1::ListFaultsResponse* resp) {
  v1::ListFaultsRequest req;
  req.set_job_id(kJob);
  req.set_include_resolved(true);
  return CallController([&](grpc::ClientContext* ctx) {
    return stub_->ListFaults(ctx, req, resp);
  });
}

void ScenarioRun::SayFaults(std::map<std::string, int>* seen) {
  v1::ListFaultsResponse resp;
  if (!ListJobFaults(&resp).ok()) return;  // asked again later
  for (const v1::Fault& f : resp.faults()) {
    auto [it, added] = seen->emplace(f.fault_id(), f.state());
    if (!added && it->second == f.state()) continue;
    it->second = f.state();
    const v1::Suspect* s = HardwareSuspect(f);
    Say(absl::StrCat(
        "[sim] pitstop: fault ", f.fault_id(), " ",
        v1::FaultState_Name(f.state()).substr(12), ": ", f.summary(),
        s != nullptr ? absl::StrCat(" [suspect ", DescribeSuspect(*s), "]")
                     : ""));
  }
}

absl::StatusOr<v1::Migration> ScenarioRun::AwaitPolicyMigration() {
  MigrationWatch watch(stub_.get(), kJob);
  const std::string r0_log = Path("mig", "r0", "steps");
  const absl::Time deadline = absl::Now() + kRunDeadline;
  absl::Time next_faults = absl::InfinitePast();
  std::map<std::string, int> seen;
  int done = 0;
  while (absl::Now() < deadline) {
    if (std::optional<v1::Migration> m = watch.First(); m.has_value()) {
      SayFaults(&seen);
      Say(absl::StrCat("[sim] policy ACT: migration ", m->migration_id(),
                       " moves ", m->leaver_host(), " -> ", m->joiner_host(),
                       " (", m->reason(),
                       "); the sim, as a scheduler "
                       "watching WatchMigrations, starts the joiners"));
      return *m;
    }
    done = static_cast<int>(StepLog(r0_log).size());
    if (r_->degrade_unix_ns == 0 && done >= o_.migrate_after_step) {
      r_->degrade_unix_ns =
          static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
      Say(absl::StrCat(
          "[sim] step ", o_.migrate_after_step, ": GPU ", o_.slow_local_rank,
          " of ", cluster_->host(o_.leaver_node), " (rank ", SlowRank(),
          ") degrades: its compute takes ", o_.slow_factor,
          "x as long; every rank now waits for it at each all-reduce"));
    }
    if (absl::Now() >= next_faults) {
      SayFaults(&seen);
      next_faults = absl::Now() + absl::Milliseconds(250);
    }
    if (const std::string why = watch.ended(); !why.empty()) {
      return absl::UnavailableError(why);
    }
    if (!procs_[0].process->Running()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job ended (rank 0 ran ", done, " of ", o_.steps,
          " steps) before policy ACT started a migration: detection needs a "
          "few windows (detection.window_ms x persistence), so give the job "
          "more steps (--steps), and a slowdown it can tell from noise "
          "(--slow-factor ",
          o_.slow_factor, " adds ", (o_.slow_factor - 1) * o_.compute_ms,
          " ms per step)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no migration after ", absl::FormatDuration(kRunDeadline),
                   " (rank 0 at step ", done, ")"));
}

void ScenarioRun::JudgePolicy(const StepLogLines& r0) {
  const v1::Migration& m = r_->migration;
  if (m.requested_by() != "policy" || m.fault_id().empty()) {
    Fail(absl::StrCat("migration ", m.migration_id(), " was requested by '",
                      m.requested_by(), "', not by policy ACT for a fault"));
  } else {
    v1::GetFaultRequest req;
    req.set_fault_id(m.fault_id());
    v1::GetFaultResponse resp;
    const grpc::Status st = CallController([&](grpc::ClientContext* ctx) {
      return stub_->GetFault(ctx, req, &resp);
    });
    r_->fault = resp.fault();
    const v1::Suspect* s = HardwareSuspect(r_->fault);
    if (!st.ok()) {
      Fail(absl::StrCat("GetFault ", m.fault_id(), ": ", st.error_message()));
    } else if (s == nullptr || s->host() != cluster_->host(o_.leaver_node)) {
      Fail(absl::StrCat("fault ", m.fault_id(), " does not name ",
                        cluster_->host(o_.leaver_node),
                        " as the hardware at "
                        "fault: ",
                        r_->fault.summary()));
    }
  }
  // Rank 0's steps: a few after the start (warm-up) to the fault, from two
  // after the fault (it has set in) to the one before the switch, and from
  // ten after the switch (the joiners' first steps fill caches) to the end.
  const int fault = o_.migrate_after_step;
  const int sw = r_->switch_step;
  r_->before_fault_ms = MedianStepMs(r0, std::min(10, fault / 2), fault);
  r_->degraded_ms = MedianStepMs(r0, fault + 2, sw - 1);
  r_->after_switch_ms = MedianStepMs(r0, sw + 10, o_.steps);
  if (r_->degraded_ms > 0) {
    r_->median_step_ms = r_->degraded_ms;
    r_->downtime_ms = std::max(0.0, r_->longest_step_ms - r_->degraded_ms);
  }
  // Full speed: near the speed before the fault, and clearly nearer to it
  // than to the degraded speed (the tolerance alone can be as wide as the
  // slowdown: 1.5x at 16 ranks on 2 cores).
  const double midpoint = (r_->before_fault_ms + r_->degraded_ms) / 2;
  r_->full_speed =
      r_->after_switch_ms > 0 &&
      r_->after_switch_ms <= o_.full_speed_tolerance * r_->before_fault_ms &&
      r_->after_switch_ms < midpoint;
  if (!r_->full_speed) {
    Fail(absl::StrFormat(
        "not at full speed after the switch: median step %.2f ms, %.2f ms "
        "before the fault and %.2f ms degraded (must be at most %.2fx of "
        "before and below %.2f ms, halfway to degraded)",
        r_->after_switch_ms, r_->before_fault_ms, r_->degraded_ms,
        o_.full_speed_tolerance, midpoint));
  }
}

void ScenarioRun::JudgeFaults() {
  v1::ListFaultsResponse resp;
  if (const grpc::Status st = ListJobFaults(&resp); !st.ok()) {
    Fail(absl::StrCat("ListFaults: ", st.error_message()));
    return;
  }
  r_->faults.assign(resp.faults().begin(), resp.faults().end());
  for (const v1::Fault& f : r_->faults) {
    // The job ran every step: nothing hung and every rank issued the same
    // collectives. A node-failure's death (PROCESS_DIED) and the degraded
    // GPU's straggler are the scenarios' own faults.
    if (f.fault_class() == v1::FAULT_CLASS_NON_COMM_HANG ||
        f.fault_class() == v1::FAULT_CLASS_COMM_HANG ||
        f.fault_class() == v1::FAULT_CLASS_MISMATCH) {
      Fail(absl::StrCat("false fault ", f.fault_id(), " (",
                        v1::FaultClass_Name(f.fault_class()), ", ",
                        v1::FaultState_Name(f.state()),
                        ") while the job ran on: ", f.summary()));
    }
  }
}

std::string DescribeFaults(const std::vector<v1::Fault>& faults) {
  if (faults.empty()) return "none";
  std::string out;
  for (const v1::Fault& f : faults) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", f.fault_id(), " ",
                    v1::FaultClass_Name(f.fault_class()).substr(12), " ",
                    v1::FaultState_Name(f.state()).substr(12));
  }
  return out;
}

void PrintPolicyReport(const MigrationScenarioResult& r, std::ostream& out) {
  const v1::Fault& f = r.fault;
  const v1::Migration& m = r.migration;
  const v1::Suspect* s = HardwareSuspect(f);
  out << "  fault                       " << f.fault_id() << " "
      << v1::FaultClass_Name(f.fault_class()) << ": " << f.summary() << "\n";
  if (s != nullptr) {
    out << "  suspect                     " << v1::SuspectLevel_Name(s->level())
        << " " << DescribeSuspect(*s) << "\n";
  }
  out << "  after the GPU degraded      first seen "
      << SecondsAfter(r.degrade_unix_ns, f.first_seen_unix_ns())
      << ", confirmed "
      << SecondsAfter(r.degrade_unix_ns, f.confirmed_unix_ns())
      << ", migration created (policy ACT) "
      << SecondsAfter(r.degrade_unix_ns, m.created_unix_ns()) << ", committed "
      << SecondsAfter(r.degrade_unix_ns, m.finished_unix_ns()) << "\n";
  out << absl::StrFormat(
      "  step time (rank 0, median)  %.2f ms before the fault, %.2f ms "
      "degraded, %.2f ms after the switch (%.2fx of before, %.2fx of "
      "degraded: %s)\n",
      r.before_fault_ms, r.degraded_ms, r.after_switch_ms,
      r.before_fault_ms > 0 ? r.after_switch_ms / r.before_fault_ms : 0.0,
      r.degraded_ms > 0 ? r.after_switch_ms / r.degraded_ms : 0.0,
      r.full_speed ? "full speed" : "NOT full speed");
  if (r.compute_ms > 0 && r.before_fault_ms > 0) {
    // The step slows far less than the GPU: the emulated compute is only
    // part of a step, the rest (the all-reduce, the host) is unchanged.
    out << absl::StrFormat(
        "  slowdown                    the degraded GPU's compute went %.1f "
        "-> %.1f ms (%.3gx, +%.1f ms); the rest of its %.2f ms step (the "
        "all-reduce) does not grow with it, so the step slows far less\n",
        r.compute_ms, r.compute_ms * r.slow_factor, r.slow_factor,
        r.compute_ms * (r.slow_factor - 1), r.before_fault_ms);
  }
}

}  // namespace pitstop::sim::migration_internal
