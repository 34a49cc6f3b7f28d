// FaultWatcher: the controller's WatchFaults stream as a simulator run sees
// it, read on its own thread, each fault stamped with when it first
// appeared and when it first appeared confirmed (ns after the run's start
// on CLOCK_MONOTONIC). Shared by the
// emulated-rank runs (runner.cc) and the torch job runs (torch_scenario.cc).
//
// Thread safety: TakeNew(), Merge() and Stop() from any thread; the reader
// thread is internal. The destructor stops it.
#ifndef PITSTOP_SRC_SIM_FAULT_WATCHER_H_
#define PITSTOP_SRC_SIM_FAULT_WATCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/score.h"

namespace pitstop::sim {

class FaultWatcher {
 public:
  // Watches (include_existing) from now on; a stream that ends (controller
  // restarting) is opened again every 200 ms until Stop().
  FaultWatcher(std::shared_ptr<grpc::Channel> channel, int64_t start_ns);
  ~FaultWatcher() { Stop(); }
  FaultWatcher(const FaultWatcher&) = delete;
  FaultWatcher& operator=(const FaultWatcher&) = delete;

  void Stop();

  // Faults opened since the last call (for progress lines).
  std::vector<ObservedFault> TakeNew();

  // Every fault seen so far, in order of appearance, latest versions.
  std::vector<ObservedFault> Snapshot();

  // Adds faults the stream did not show (e.g. resolved quickly), with the
  // time of their record, and returns all in order of appearance.
  std::vector<ObservedFault> Merge(const std::vector<v1::Fault>& listed,
                                   int64_t now_plan_ns);

 private:
  void Loop();
  void Record(const v1::Fault& f);

  std::unique_ptr<v1::Controller::Stub> stub_;
  const int64_t start_ns_;
  std::thread thread_;
  Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<ObservedFault> faults_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> index_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> new_ids_ ABSL_GUARDED_BY(mu_);
};

// "[sim   12.4s] FAULT COMM_SLOW F1: NIC node2 GPU 1 (rank 9) ..."
std::string FaultLine(const ObservedFault& o);

// Collectives the controller joined so far (GetStatus; 0 when it does not
// answer within 500 ms).
uint64_t JoinedCollectives(v1::Controller::Stub* stub);

// Every fault the controller holds, resolved ones too (ListFaults).
absl::StatusOr<std::vector<v1::Fault>> ListAllFaults(
    v1::Controller::Stub* stub);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_FAULT_WATCHER_H_
