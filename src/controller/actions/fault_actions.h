// Actions on fault state changes: operator hooks (a command run with the
// fault as JSON on stdin, for schedulers pitstop does not integrate with,
// e.g. `kubectl cordon`) and the Slurm integration (drain the nodes of a
// CONFIRMED hardware fault, resume them when it is resolved).
//
//   FaultActions::Options o;
//   o.hooks.on_confirmed = "/usr/local/bin/cordon.sh";
//   o.may_act = [&](const std::string& job) { return ...policy is ACT...; };
//   auto actions = FaultActions::Create(std::move(o)).value();
//   faults->Subscribe("", true, [&](auto& c) { actions->OnFaultChange(c); });
//
// Events: "confirmed" (the fault reached CONFIRMED), "resolved" (RESOLVED,
// by the detector or an operator) and "migrated" (MITIGATING: the job was
// moved off the suspects). Each fires at most once per fault. Faults that
// exist when the controller starts (CHANGE_EXISTING) fire nothing for the
// states they already have: a restart does not run hooks twice.
#ifndef PITSTOP_CONTROLLER_ACTIONS_FAULT_ACTIONS_H_
#define PITSTOP_CONTROLLER_ACTIONS_FAULT_ACTIONS_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.pb.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "src/controller/actions/action_record.h"
#include "src/controller/actions/slurm_nodes.h"

namespace pitstop::controller {

struct HookOptions {
  // Shell command lines (/bin/sh -c); empty = no hook for that event.
  std::string on_confirmed;
  std::string on_resolved;
  std::string on_migrated;
  absl::Duration timeout = absl::Seconds(30);
  // Run hooks only for jobs whose policy mode is ACT (observe = record and
  // notify, never act). Off: hooks run for every job (e.g. paging).
  bool require_act = true;
};

// Thread-safe: OnFaultChange from any thread (it never blocks); the
// commands run one at a time on the object's own thread.
class FaultActions {
 public:
  struct Options {
    HookOptions hooks;
    SlurmOptions slurm;
    // JSON lines, one per ActionRecord, appended; empty = none.
    std::string journal_path;
    // Whether the job's policy allows acting (mode ACT). Called from the
    // actions thread, never with a lock of the caller of OnFaultChange.
    std::function<bool(const std::string& job_id)> may_act;
    // Counters pitstop_controller_actions_total{action,event,result} and
    // pitstop_controller_actions_dropped_total go here when set.
    prometheus::Registry* registry = nullptr;
    // Changes queued beyond this are dropped and counted.
    size_t queue_limit = 1024;
  };

  // InvalidArgument when nothing would ever run is not an error; fails when
  // the journal cannot be opened for appending (naming the path).
  static absl::StatusOr<std::unique_ptr<FaultActions>> Create(Options options);
  ~FaultActions();

  // Queues one change (from FaultService::Subscribe's callback).
  void OnFaultChange(const v1::WatchFaultsResponse& change);
  // Ends a running command as if it timed out, drops what is queued, joins.
  void Stop();

  // For tests and status: the last 256 records, oldest first.
  std::vector<ActionRecord> Records() const;
  // For tests: waits until the queue is empty and nothing runs.
  bool WaitIdle(absl::Duration timeout);
  uint64_t dropped() const;

 private:
  explicit FaultActions(Options options);
  void Loop();
  void Handle(const v1::WatchFaultsResponse& change);
  void Fire(FaultEvent e, const v1::Fault& fault);
  void RunHook(FaultEvent e, const std::string& command, const v1::Fault& f,
               bool may_act);
  void Record(ActionRecord r, FaultEvent e, const v1::Fault& f);

  const Options options_;
  SlurmNodes slurm_;
  prometheus::Family<prometheus::Counter>* runs_ = nullptr;
  prometheus::Counter* dropped_counter_ = nullptr;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<v1::WatchFaultsResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<ActionRecord> records_ ABSL_GUARDED_BY(mu_);

  // Actions thread only: events already fired per fault (bit per event).
  std::map<std::string, unsigned> fired_;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_FAULT_ACTIONS_H_
