// On-demand torch.profiler comparison of a slow rank against a healthy peer
// (docs/pytorch.md, "A slow rank's torch.profiler diff").
//
// When the detection engine has confirmed a slow-rank fault (NON_COMM_SLOW:
// a straggler whose first suspect names a global rank) of a job whose
// trainers run the pitstop trainer library (they send step reports), the
// service asks the suspect's trainer and one healthy peer's trainer for a
// torch.profiler window of `steps` steps, through their agents
// (AgentCommand.trainer_profile -> the agent's TrainerHub -> the trainer's
// next ReportSteps answer, as trainer directives travel). Each trainer
// answers once (ReportStepsRequest.profiles, forwarded by its agent). With
// both answers the service compares them per step: the ops where the
// suspect spends notably more (its slow part) and those where the peer does
// (typically waiting for the suspect in a collective), both numbers each,
// and hands the result to the caller to attach to the fault
// (Fault.trainer_profile; StoreTrainerProfile).
//
// Bounded: one capture per fault (a fault that carries a profile is never
// asked again) and per suspect within suspect_interval (a later fault
// naming the same rank is left without one), one capture per job and at
// most max_in_flight at once; at most max_trainers trainers noted, and
// max_trainers_per_host of one host's reports;
// steps, ops and capture time capped. A trainer that has not answered by
// the deadline leaves the fault with a NO_ANSWER profile naming it.
//
// Authorised like the other trainer paths: the trainers reach their agent
// over its Unix socket (file permissions), and an answer counts only when it
// is for a request this service sent, arrives from the agent it was sent to
// and names the job and rank it was sent to; anything else is dropped and
// counted (Stats::answers_refused).
//
// Thread-safe: one mutex of its own guards everything; nothing is called
// under it (a leaf lock). OnReport from agent batches, RunCycle from the
// controller's cycle, stats() from anywhere. Times from the injected Clock.
#ifndef PITSTOP_CONTROLLER_PROFILING_TRAINER_PROFILES_H_
#define PITSTOP_CONTROLLER_PROFILING_TRAINER_PROFILES_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.pb.h"
#include "pitstop/v1/trainer.pb.h"

namespace pitstop::controller {

class FaultStore;

// Limits of what a trainer is asked for and may answer (the agent checks
// the same, src/agent/trainer_hub.cc).
inline constexpr uint32_t kMaxProfileSteps = 64;
inline constexpr uint32_t kMaxProfileOps = 256;
inline constexpr size_t kMaxProfileOpNameBytes = 256;

class TrainerProfileService {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    uint32_t steps = 5;     // steps per capture; 0 turns the service off
    uint32_t max_ops = 64;  // ops each trainer reports (by self CPU time)
    // How long a trainer may capture (its max_duration_ms), and how much
    // longer the answer may take to arrive (the request's and the answer's
    // ways through the agents, the trainer's next step boundary).
    absl::Duration capture_timeout = absl::Seconds(20);
    absl::Duration answer_slack = absl::Seconds(15);
    size_t max_in_flight = 16;
    // A trainer counts as present when it reported within this.
    absl::Duration trainer_max_age = absl::Seconds(30);
    size_t max_trainers = 1 << 16;
    // Trainers one host's reports may keep in the table (its share, under
    // max_trainers): a node runs a few dozen trainers, and one host's
    // made-up (job, rank) pairs never lock out another host's trainers
    // (issue #33, like the sync policy's max_jobs_per_host). 0: no share.
    size_t max_trainers_per_host = 1024;
    size_t max_remembered_faults = 4096;
    // A suspect profiled for one fault is not profiled again for a later
    // fault of its job within this. Each capture costs both trainers steps
    // under the profiler, and the peer's profiler overhead can itself hide
    // the straggler long enough for its fault to resolve and be raised
    // anew: without this, every such flap would ask again.
    absl::Duration suspect_interval = absl::Minutes(10);
    // An op is in the diff when one side spends at least this much more per
    // step than the other, and at least min_ratio times as much.
    double min_excess_ms = 0.5;
    double min_ratio = 1.25;
    size_t max_diff_ops = 8;  // per side
  };

  struct Stats {
    uint64_t requested = 0;         // captures started (two requests each)
    uint64_t done = 0;              // diffs attached
    uint64_t no_answer = 0;         // captures a trainer did not answer
    uint64_t failed = 0;            // captures a trainer could not make
    uint64_t answers_refused = 0;   // answers not matching a request sent
    uint64_t trainers_refused = 0;  // trainers beyond max_trainers
    // Trainers beyond their host's share (max_trainers_per_host).
    uint64_t trainers_refused_host = 0;
    // Reports for a trainer another host reported within trainer_max_age.
    uint64_t trainers_refused_foreign = 0;
  };

  // What a cycle asks the caller to do: send each request to its host's
  // agent (an AgentCommand.trainer_profile), and store each profile on its
  // fault (StoreTrainerProfile), then tell the fault's watchers.
  struct Request {
    std::string host;
    v1::ProfileRequest request;
  };
  struct Attach {
    std::string fault_id;
    v1::TrainerProfile profile;
  };
  struct CycleOut {
    std::vector<Request> requests;
    std::vector<Attach> profiles;
  };

  explicit TrainerProfileService(Options options);

  // One trainer report as the agent of `host` forwarded it: where the
  // trainer runs, and its answers. InvalidArgument names the first bad
  // answer (the others are taken); an answer to no request of ours is
  // dropped and counted, not an error (a controller restarted since).
  absl::Status OnReport(const std::string& host,
                        const v1::ReportStepsRequest& report);
  // One cycle on the controller's open faults: captures for newly
  // confirmed slow-rank faults, diffs of finished ones, expired deadlines.
  CycleOut RunCycle(const std::vector<v1::Fault>& open_faults);
  Stats stats() const;
  bool enabled() const { return options_.steps > 0; }

 private:
  struct Trainer {
    std::string host;
    int64_t seen_ns = 0;
  };
  struct Side {
    int32_t rank = -1;
    std::string host;
    uint64_t request_id = 0;
    bool answered = false;
    v1::ProfileResult result;
  };
  struct Capture {
    std::string fault_id;
    std::string job_id;
    Side suspect;
    Side peer;
    int64_t deadline_ns = 0;
    uint64_t requested_unix_ns = 0;
  };

  // The peer for `fault`'s suspect: a present trainer of the job that is
  // no suspect, on another host when there is one; -1 when none.
  int32_t PickPeer(const v1::Fault& fault, int32_t suspect, int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The suspect rank to profile for `fault`, or -1 when it does not
  // qualify (class, state, already profiled, busy, or its suspect profiled
  // within suspect_interval).
  int32_t SuspectToProfile(const v1::Fault& fault, int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a capture for `fault` when it qualifies.
  void MaybeStart(const v1::Fault& fault, int64_t now, CycleOut* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::ProfileRequest MakeRequest(const Capture& c, const Side& side,
                                 int32_t other_rank) const;
  // The profile of a finished capture (both answered, or the deadline).
  v1::TrainerProfile Finish(const Capture& c, bool expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes one answer of `host`'s trainer `t`; false when it answers no
  // request sent there.
  bool TakeAnswer(const std::string& host, const v1::TrainerIdentity& t,
                  const v1::ProfileResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes where a trainer runs (bounded by max_trainers and its host's
  // share).
  void NoteTrainer(const std::string& host, const v1::TrainerIdentity& t,
                   int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `host` may note one more trainer; forgets the quiet ones first
  // when a limit is reached. Counts a refusal.
  bool RoomFor(const std::string& host, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t TrainersOf(const std::string& host) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remember(const std::string& fault_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Trainer* FindTrainer(const std::string& job, int32_t rank,
                             int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  std::map<std::pair<std::string, int32_t>, Trainer> trainers_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> trainers_per_host_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Capture> in_flight_ ABSL_GUARDED_BY(mu_);  // by fault
  // request id -> fault id of the capture it belongs to.
  std::map<uint64_t, std::string> by_request_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> busy_jobs_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> done_faults_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> done_order_ ABSL_GUARDED_BY(mu_);
  // (job, suspect rank) -> when its last capture started; entries older
  // than suspect_interval are dropped as captures start.
  std::map<std::pair<std::string, int32_t>, int64_t> profiled_at_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// The diff of two captures, per step (each side's sums / its steps): ops
// where `suspect` spends at least min_excess_ms and min_ratio x more than
// `peer` (into ops), and the reverse (into peer_ops), the largest excess
// first, at most max_diff_ops each; the step times and a one-line text.
// Fills profile->ops, peer_ops, steps, *_step_ms and text.
void DiffProfiles(const v1::ProfileResult& suspect,
                  const v1::ProfileResult& peer,
                  const TrainerProfileService::Options& options,
                  v1::TrainerProfile* profile);

// Stores `profile` on fault `fault_id` (its other fields as stored) and
// returns the stored fault; a RESOLVED fault is left as it is (returned
// unchanged). NotFound for an unknown fault. The caller serialises it with
// its other writes of faults.
absl::StatusOr<v1::Fault> StoreTrainerProfile(
    FaultStore* store, const std::string& fault_id,
    const v1::TrainerProfile& profile);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_PROFILING_TRAINER_PROFILES_H_
