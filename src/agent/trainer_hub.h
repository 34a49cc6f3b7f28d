// The agent's side of pitstop.v1.TrainerService: step reports of the local
// trainers (python/pitstop) wait here for the upstream batch, and the
// controller's directives and profile requests (a torch.profiler window of
// one trainer, src/controller/profiling/) wait here for the trainers' next
// poll.
//
// Plain C++ (no gRPC): TrainerServiceImpl adapts it, tests drive it
// directly. Thread-safe: Report() from gRPC threads, FillBatch() and
// OnDirective() from the upstream client's threads.
#ifndef PITSTOP_AGENT_TRAINER_HUB_H_
#define PITSTOP_AGENT_TRAINER_HUB_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/trainer.pb.h"

namespace pitstop::agent {

class TrainerHub {
 public:
  // Bounds on what one trainer may send (INVALID_ARGUMENT beyond them).
  static constexpr int kMaxStepsPerReport = 4096;
  static constexpr int kMaxPhasesPerStep = 16;
  static constexpr size_t kMaxJobIdBytes = 256;
  static constexpr int32_t kMaxRanks = 1 << 20;
  // Step reports held for the controller; the oldest are dropped beyond.
  static constexpr size_t kMaxQueuedSteps = 65536;
  // Profile requests waiting for their trainer (one per trainer), and the
  // limits of a request and of the answers one report may carry.
  static constexpr size_t kMaxProfileRequests = 4096;
  static constexpr uint32_t kMaxProfileSteps = 64;
  static constexpr uint32_t kMaxProfileOps = 256;
  static constexpr size_t kMaxProfileOpNameBytes = 256;
  static constexpr int kMaxProfilesPerReport = 4;

  struct Counters {
    uint64_t reports = 0;           // ReportSteps calls accepted
    uint64_t steps = 0;             // step reports accepted
    uint64_t steps_dropped = 0;     // dropped: queue full or no upstream
    uint64_t directives = 0;        // directives received from the controller
    uint64_t profile_requests = 0;  // profile requests handed to trainers
    uint64_t profile_requests_dropped = 0;  // invalid, or beyond the bound
  };

  // `forward` = false: no controller configured; reports are counted and
  // dropped instead of queued.
  explicit TrainerHub(bool forward) : forward_(forward) {}

  // Validates and queues one report; returns the job's latest directive if
  // the trainer has not seen it, and a profile request waiting for this
  // trainer (handed out once). INVALID_ARGUMENT names the field.
  absl::StatusOr<v1::ReportStepsResponse> Report(
      const v1::ReportStepsRequest& request);

  // Moves queued reports into `batch.trainer_reports`.
  void FillBatch(v1::ConnectRequest* batch);
  // A directive from the controller; kept if newer than the job's last.
  void OnDirective(const v1::TrainerDirective& directive);
  // A profile request from the controller for the trainer of
  // (request.job_id, request.global_rank); replaces one still waiting for
  // it. An invalid one (no job, bad rank, steps or max_ops out of range) or
  // one beyond kMaxProfileRequests is dropped and counted.
  void OnProfileRequest(const v1::ProfileRequest& request);
  void SetControllerConnected(bool connected);

  Counters counters() const;

 private:
  const bool forward_;
  mutable Mutex mu_;
  std::deque<v1::ReportStepsRequest> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, v1::TrainerDirective> directives_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int32_t>, v1::ProfileRequest> profiles_
      ABSL_GUARDED_BY(mu_);
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

// INVALID_ARGUMENT naming the first bad field of `request`, else OK.
absl::Status ValidateReport(const v1::ReportStepsRequest& request);
// The part of ValidateReport about request.profiles (the answers to profile
// requests).
absl::Status ValidateProfiles(const v1::ReportStepsRequest& request);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_TRAINER_HUB_H_
