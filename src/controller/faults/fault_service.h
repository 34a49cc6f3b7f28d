// The fault records and who watches them (docs/architecture.md, "Services").
//
// Owns: every write of a fault record to the store — a detection cycle's
// verdicts, an operator's acknowledgement or resolution, a migration's
// mitigation — and the watchers of fault changes: WatchFaults streams, the
// fault actions and open-fault gauges (src/controller/actions/), the live
// planner. The watchers are the controller's fault event stream: a service
// that must learn that a fault was confirmed or resolved subscribes here.
// The FaultStore object is shared (other services keep their own records in
// it: drains, policies, migrations, plans); only this class writes faults.
//
// Locks: write_mu_ keeps fault writes and their notifications in one order
// (held across the store write: an fsync in SQLite, a round trip in etcd);
// mu_ guards the watchers and is held while they are called. Order:
// write_mu_, then mu_. No other service's lock is taken under either; a
// watcher may take only a leaf lock of its own (common/service_lock.h).
//
// Threads: any method from any thread.
//
// Needs: the store (thread-safe), the clock, Leadership (writes are refused
// on a follower; null: always leads), metrics (optional).
#ifndef PITSTOP_CONTROLLER_FAULTS_FAULT_SERVICE_H_
#define PITSTOP_CONTROLLER_FAULTS_FAULT_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/service_lock.h"
#include "src/controller/common/watch_hub.h"

namespace pitstop::controller {

class ControllerMetrics;
class FaultStore;
class Leadership;

class FaultService {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;           // required, not owned
    Leadership* leadership = nullptr;      // not owned; null: always leads
    ControllerMetrics* metrics = nullptr;  // optional, not owned
  };
  explicit FaultService(Options options);
  FaultService(const FaultService&) = delete;
  FaultService& operator=(const FaultService&) = delete;

  // --- reads (the store's; no lock of this class) -------------------------
  absl::StatusOr<std::vector<v1::Fault>> Faults(const std::string& job_id,
                                                bool include_resolved,
                                                uint32_t limit) const;
  // InvalidArgument for an empty id, NotFound for an unknown one.
  absl::StatusOr<v1::Fault> Fault(const std::string& fault_id) const;
  // Every open fault, newest first.
  absl::StatusOr<std::vector<v1::Fault>> OpenFaults() const;
  uint32_t OpenCount() const;

  // --- operators (errors as in controller.proto) ---------------------------
  absl::StatusOr<v1::Fault> Acknowledge(const std::string& fault_id,
                                        const std::string& who,
                                        const std::string& note);
  absl::StatusOr<v1::Fault> Resolve(const std::string& fault_id,
                                    const std::string& who,
                                    const std::string& note);

  // --- detection and migration ---------------------------------------------
  // Stores a detection cycle's faults in order and tells the watchers.
  // Returns the ids the detection engine must forget: those the store
  // ignored (an operator resolved them; the engine opens a new fault if
  // the condition is still seen).
  std::vector<std::string> StoreCycleFaults(
      const std::vector<v1::Fault>& faults);
  // Faults an operator resolved since the last call, for the engine to
  // forget (the controller's cycle hands them over before it detects).
  std::vector<std::string> TakeResolved();
  // SUSPECTED/CONFIRMED/ACKNOWLEDGED -> MITIGATING with `why` (a committed
  // migration moved the job off the fault's host); stored and watchers
  // told. Other states are left.
  void MarkMitigating(v1::Fault fault, const std::string& why);
  // A trainer profile (src/controller/profiling/) stored on its fault
  // (StoreTrainerProfile, in order with the other fault writes) and the
  // watchers told. False, logged, when the fault did not take it (unknown,
  // resolved, or a store error).
  bool AttachTrainerProfile(const std::string& fault_id,
                            const v1::TrainerProfile& profile);

  // --- the fault event stream ----------------------------------------------
  using WatchFn = std::function<void(const v1::WatchFaultsResponse&)>;
  // Calls `fn` (with mu_ held: it must not block or call a service) for
  // every fault change of `job_id` ("" = all); with include_existing,
  // first for every open fault (CHANGE_EXISTING). Returns an id for
  // Unsubscribe.
  uint64_t Subscribe(const std::string& job_id, bool include_existing,
                     WatchFn fn);
  // As Subscribe, for a client's WatchFaults stream: Unavailable naming the
  // leader on a follower; ended with `end` (Unavailable naming the new
  // leader) when this controller steps down (DetachClientWatches).
  absl::StatusOr<uint64_t> SubscribeClient(const std::string& job_id,
                                           bool include_existing, WatchFn fn,
                                           WatchEndFn end);
  void Unsubscribe(uint64_t id);

  // --- leadership ----------------------------------------------------------
  // Elected: tells every watcher the open faults as CHANGE_EXISTING (the
  // previous leader acted on them; a failover never runs a hook twice) and
  // ends the client watches of an earlier term.
  void AnnounceExisting(const std::vector<v1::Fault>& open);
  // Stepping down: client watches stop and wait to be ended naming the new
  // leader (at most kWatchEndWait later).
  void DetachClientWatches(const std::string& why);
  // Ends them once the leader is known (or `now`, or past the wait).
  void EndFormerWatches(bool now);

 private:
  uint64_t AddWatcher(const std::string& job_id, bool include_existing,
                      WatchFn fn, WatchEndFn end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify(v1::WatchFaultsResponse::Change change, const v1::Fault& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndFormerLocked(bool now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acknowledge (resolve = false) or Resolve, then notify watchers.
  absl::StatusOr<v1::Fault> MoveFault(const std::string& fault_id,
                                      const std::string& who,
                                      const std::string& note, bool resolve);
  uint64_t NowUnixNs() const;

  const Options options_;
  ServiceMutex write_mu_{"faults", "write_mu_"};
  ServiceMutex mu_{"faults", "mu_"};
  WatchHub<v1::WatchFaultsResponse> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watcher_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::string> resolved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_FAULTS_FAULT_SERVICE_H_
