// The trainer policies (docs/policies.md): the local-SGD switch
// (sync_policy.h) and multi-LoRA rescheduling (lora/lora_policy.h), fed by
// the trainers' step reports that agents forward, with one directive-id
// sequence per job for both (directive_ids.h).
//
// Owns: both policy engines and the directive ids (soft state: trainers
// report again after a restart or a failover) and the operators' per-job
// settings, which it keeps in the store (SetSyncPolicy / SetLoraPolicy).
//
// Locks: write_mu_ keeps settings writes (held across the store write) and
// their effect in one order; mu_ guards the engines. Order: write_mu_, then
// mu_. Directives are sent after mu_ is released: no other service's lock
// is taken under either.
//
// Threads: OnReports from agent streams' threads, RunCycle from the
// controller's cycle (one at a time), the API calls from gRPC threads.
//
// Needs: the store (settings; thread-safe), the clock, Leadership (writes
// refused on a follower; null: always leads), and a DirectiveSender (the
// agents' streams: NodeService).
//
// A later trigger (a straggler the controller confirms from NCCL telemetry
// switching a job to local SGD) reaches this service through the fault
// event stream: FaultService::Subscribe, whose callback may only note the
// fault under a leaf lock for RunCycle to act on.
#ifndef PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_SERVICE_H_
#define PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_SERVICE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/policy_actions.h"
#include "src/controller/common/service_lock.h"
#include "src/controller/trainers/directive_ids.h"
#include "src/controller/trainers/lora/lora_policy.h"
#include "src/controller/trainers/sync_policy.h"

namespace pitstop::controller {

class FaultStore;
class Leadership;

// Where trainer directives go: a job's agents. False when `host`'s agent is
// not connected now (the policies repeat their verdicts every cycle). Must
// not call back into the trainer policies.
class DirectiveSender {
 public:
  virtual ~DirectiveSender() = default;
  virtual bool SendTrainerDirective(const std::string& host,
                                    const v1::TrainerDirective& d) = 0;
};

class TrainerPolicyService {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;        // required, not owned
    Leadership* leadership = nullptr;   // not owned; null: always leads
    DirectiveSender* sender = nullptr;  // required, not owned
    SyncPolicyEngine::Options sync;     // directive_ids: set here
    LoraPolicyEngine::Options lora;     // directive_ids: set here
    // Told of every directive sent (a switch, a placement); optional, not
    // owned.
    PolicyActions* policy_actions = nullptr;
  };
  // The settings operators gave, as stored.
  struct Settings {
    std::map<std::string, v1::SyncSettings> sync;
    std::map<std::string, v1::LoraSettings> lora;
  };

  // Empty policies; Reset() loads the stored settings.
  explicit TrainerPolicyService(Options options);
  TrainerPolicyService(const TrainerPolicyService&) = delete;
  TrainerPolicyService& operator=(const TrainerPolicyService&) = delete;

  // Reads the stored settings (a start, a new leader); an error when the
  // store cannot be read (a new leader then gives the leadership up).
  absl::StatusOr<Settings> ReadSettings() const;
  // Fresh policies (their state is soft) with `settings`; a setting the
  // policy refuses (an older controller's limits) is logged and skipped.
  void Reset(const Settings& settings);

  // --- agent input and the controller's cycle -------------------------------
  // The trainer reports of a batch of `host`'s agent; InvalidArgument names
  // the first bad one ("trainer_reports[i]: ..."; the others are used).
  absl::Status OnReports(const std::string& host,
                         const v1::ConnectRequest& batch);
  // Whether any job has reporting trainers (the cycle reads the open
  // faults only then).
  bool Active();
  // One policy cycle on the controller's open faults: the local-SGD switch,
  // then multi-LoRA, each directive sent to its job's agents.
  void RunCycle(const std::vector<v1::Fault>& open_faults);

  // --- the Controller API (errors as in controller.proto) -------------------
  absl::StatusOr<v1::JobSync> JobSync(const std::string& job_id);
  absl::StatusOr<v1::SyncSettings> SetSyncPolicy(
      const std::string& job_id, const v1::SyncSettings& settings);
  absl::StatusOr<v1::JobLora> JobLora(const std::string& job_id);
  absl::StatusOr<v1::LoraSettings> SetLoraPolicy(
      const std::string& job_id, const v1::LoraSettings& settings);
  // ListJobs: fills Job.lora and Job.sync of `jobs`, adds the jobs only
  // trainers report (their open_faults and policy are the caller's to
  // fill; their ids go to `added`) and sorts them by job id.
  void FillJobs(std::vector<v1::Job>* jobs, std::set<std::string>* added);

 private:
  void AddLoraJobs(std::vector<v1::Job>* jobs, std::set<std::string>* added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddSyncJobs(std::vector<v1::Job>* jobs, std::set<std::string>* added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends a trainer directive to each of its job's agents; logs the ones
  // not connected (`what` names the directive in the log).
  void Send(const OutgoingDirective& o, const char* what);
  void Count(PolicyAction a);

  const Options options_;
  ServiceMutex write_mu_{"trainers", "write_mu_"};
  ServiceMutex mu_{"trainers", "mu_"};
  // One directive-id sequence per job for both policies.
  DirectiveIds directive_ids_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SyncPolicyEngine> sync_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<LoraPolicyEngine> lora_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_SERVICE_H_
