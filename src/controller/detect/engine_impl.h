// The DetectionEngine implementation (internal to pitstop_detect).
#ifndef PITSTOP_CONTROLLER_DETECT_ENGINE_IMPL_H_
#define PITSTOP_CONTROLLER_DETECT_ENGINE_IMPL_H_

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "src/controller/detect/comm_state.h"
#include "src/controller/detect/config_fault.h"
#include "src/controller/detect/cycle_work.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/detect/fault_tracker.h"
#include "src/controller/detect/straggler_detector.h"
#include "src/controller/detect/tenant_budget.h"

namespace pitstop::controller {

class EngineImpl final : public DetectionEngine {
 public:
  EngineImpl(Clock* clock, Options options);

  absl::Status AddNode(const v1::NodeRegistration& registration) override;
  absl::Status AddCommunicator(absl::string_view host,
                               const v1::CommunicatorInfo& info) override;
  absl::Status AddSummary(absl::string_view host,
                          const v1::CollectiveSummary& summary) override;
  absl::Status AddProgress(absl::string_view host,
                           const v1::RankProgress& progress) override;
  absl::Status AddLifecycle(absl::string_view host,
                            const v1::RankLifecycle& lifecycle) override;
  absl::StatusOr<v1::JobPolicy> SetJobPolicy(
      absl::string_view job_id, const v1::JobPolicy& policy) override;
  v1::JobPolicy GetJobPolicy(absl::string_view job_id) const override;
  absl::Status SetJobHosts(absl::string_view job_id,
                           const std::vector<std::string>& hosts) override;
  std::vector<std::string> JobHosts(absl::string_view job_id) const override;
  using DetectionEngine::RunCycle;
  CycleResult RunCycle(const std::function<void()>& between_comms) override;
  std::unique_ptr<CycleWork> BeginCycle(
      const std::function<void()>& between_comms) override;
  CycleResult FinishCycle(CycleWork* work,
                          const std::function<void()>& between_comms) override;
  void ForgetFault(absl::string_view fault_id) override;
  void AdoptOpenFaults(const std::vector<v1::Fault>& faults) override;
  void RetireComms(const std::vector<uint64_t>& comm_hashes,
                   absl::string_view why) override;
  void NodeLost(absl::string_view host) override;
  void NodeSilent(absl::string_view host) override;
  void NodeBack(absl::string_view host) override;
  void ForgetNode(absl::string_view host) override;
  std::vector<v1::Communicator> Communicators() const override;
  bool GetCommunicator(uint64_t comm_hash,
                       v1::Communicator* out) const override;
  std::vector<v1::Job> Jobs() const override;
  EngineStats stats() const override;

 private:
  // Updates member `rank` of `c` from a report by `host`. ResourceExhausted
  // (nothing stored) when a new member would pass a members share;
  // PermissionDenied when a live member on another host holds the rank
  // (ForeignHolder).
  absl::Status NoteMember(CommState* c, int32_t rank, int32_t global_rank,
                          absl::string_view host, uint32_t pid,
                          int32_t cuda_device, uint64_t process_start = 0);
  // PermissionDenied (counted) when `m` is held by a live process on
  // another host than `host` that may not be taken over yet (MayTakeOver):
  // an agent reports for its own host only.
  absl::Status ForeignHolder(const CommState& c, int32_t rank, const Member& m,
                             absl::string_view host);
  // PermissionDenied (counted in claims_refused) when `host`, holding no
  // live member of `c` while another host does, reports a size other than
  // its known one.
  absl::Status ForeignResize(const CommState& c, int32_t n_ranks,
                             absl::string_view host);
  // PermissionDenied (counted) when the scheduler named `job`'s hosts and
  // `host` is not one of them (scheduled_hosts.cc).
  absl::Status ScheduledHost(absl::string_view job, absl::string_view host);
  // The communicator `hash`, created (charged to `host` and `job`) if new;
  // nullptr with *status set when a communicators share is used up.
  CommState* GetOrCreateComm(uint64_t hash, absl::string_view host,
                             absl::string_view job, absl::Status* status);
  // `c` learns its job: its units move from the "" job to `job`.
  // PermissionDenied (counted) when it has another job already, or `job`
  // is "" (a process of no job, e.g. an anonymous tenant) and `c` has one:
  // such a process is no member of another job's communicator (R18-5).
  absl::Status SetCommJob(CommState* c, const std::string& job);
  // A communicator record of `c`'s job from `host` (pid `pid`) for `rank`,
  // held by a jobless member of another process: the member is the job's
  // rank now. What the jobless process reported for it (summaries in open
  // joins, progress) is dropped and its members share moves to `host`.
  absl::Status SupersedeJobless(CommState* c, int32_t rank,
                                absl::string_view host, uint32_t pid);
  // PermissionDenied (counted) when a record that names no job (a summary,
  // a progress report) would add member `rank` to `c`, a communicator of a
  // job: only the job's communicator records register its members, so a
  // process of no job on another host cannot hold a rank of a job's
  // communicator that has not been reported yet (R18-5).
  absl::Status JoblessFoothold(const CommState& c, int32_t rank,
                               absl::string_view host, const char* field);
  // AddCommunicator's global_ranks: the members it names, charged to
  // `host` all at once (a list its share cannot hold is refused whole).
  absl::Status NoteGlobalRanks(CommState* c, const v1::CommunicatorInfo& info,
                               absl::string_view host);
  // Budget refusals into stats_ (after a Charge).
  void CountRefusals();
  // A summary of `rank` left an open join of `c`: its share is given back.
  void ReleaseJoinEntries(const CommState& c, const Join& join);
  // Forgets communicators without input for options_.comm_expiry.
  void ExpireComms(int64_t now_ns);
  // Forgets the communicators only a host ForgetNode named reported (a
  // cycle's start): their shares are given back.
  void ForgetHosts();
  // GPU i <-> NIC i when the node has as many NICs as GPUs, else the only
  // NIC, else unknown.
  void AssignNic(Member* m) const;
  void Fold(CommState* c, std::pair<int32_t, uint64_t> key);
  void EvictJoins(CommState* c, int64_t now_ns);
  // BeginCycle's step of one communicator: evicts old joins, closes its
  // window when due and, when there is something to judge, appends a copy
  // to `work`.
  void CaptureComm(CommState* c, int64_t now_ns, EngineCycleWork* work,
                   const std::function<void()>& between_comms);
  // The detectors' copy of `c`: everything but the open joins and, unless
  // `take_window`, the window (which then stays in `c`; with it the window
  // moves to the copy and `c` starts a fresh one). Members and progress
  // reports beyond Options::cycle_copy_chunk are copied in pieces with
  // `between_comms` called between them (engine_cycle.cc).
  CommState CopyForDetection(CommState* c, bool take_window,
                             const std::function<void()>& between_comms);
  // FinishCycle's step of one communicator: the closed window's verdicts
  // (cascade, persistence, baselines, profiling) and its hang clears and
  // verdicts (judged again on `c` when its members changed).
  void PublishComm(CommState* c, CommWork* w, CycleResult* result,
                   std::vector<HangVerdict>* hangs);
  // Whether `v` (a straggler of `c`) is a victim of a comm-slow condition
  // of another comm it belongs to (engine_cascade.cc); if so, adds it to
  // that comm's open COMM_SLOW fault, if any, and names its key in
  // `folded_key` (untouched when none is open).
  bool FoldStraggler(const CommState& c, const StragglerVerdict& v,
                     const v1::JobPolicy& policy, int64_t now_ns,
                     std::string* folded_key);
  // Whether `v` (a straggler of `c`) is a victim of a straggler of another
  // comm it belongs to: it arrives late in `c` because it waited, in that
  // comm, for the rank that comm names (a slow GPU's node-mates are late to
  // every DP all-reduce because they wait for it in their TP all-reduce).
  // If so, adds it to that straggler's open fault as a victim and sets
  // `root_key` to that fault's key (chains: a victim's own victims fold
  // into the same root).
  bool FoldStragglerVictim(const CommState& c, const StragglerVerdict& v,
                           const v1::JobPolicy& policy, int64_t now_ns,
                           std::string* root_key);
  void RequestProfiling(CommState* c, int64_t now_ns, CycleResult* result);
  // ownership.cc. Whether another host may report the members of `host`:
  // its session ended (NodeLost) handover_grace ago, or it was forgotten.
  // A silent or briefly disconnected agent keeps its own.
  bool MayTakeOver(absl::string_view host) const;
  // Whether `m` is held by a live process on its host that no other host
  // may take over yet (the test ForeignHolder, ForeignResize and
  // ForeignRank share).
  bool HeldLive(const Member& m) const;
  // Whether `m` of `c` is a member the process of lifecycle `l` on `host`
  // registered: the same host and pid, the same start where both are
  // known, and a communicator of the lifecycle's job. A death or exit
  // applies to those only, never to another job's members whose process
  // had an equal pid (a pid namespace, another container: R18-2).
  static bool OfProcess(const CommState& c, const Member& m,
                        absl::string_view host, const v1::RankLifecycle& l);
  // The communicators in which the process of `l` is a live member.
  std::vector<uint64_t> HeldComms(absl::string_view host,
                                  const v1::RankLifecycle& l) const;
  // Whether the process of `l` is a dead member of some communicator.
  bool DiedBefore(absl::string_view host, const v1::RankLifecycle& l) const;
  // EraseComm: the live members of `c` into departed_.
  void NoteDeparted(const CommState& c);
  // PermissionDenied (deaths_refused) unless `lifecycle`, a DIED, is of a
  // process of its job on `host`: a live member of one of `held` (the
  // communicators it held before the record) of that job, of a
  // communicator of that job erased since (departed_), or a process whose
  // communicator creation failed; and its global rank is no live
  // member of its job on another host (ForeignRank).
  absl::Status CheckDeath(absl::string_view host,
                          const v1::RankLifecycle& lifecycle,
                          const std::vector<uint64_t>& held);
  // PermissionDenied (counted in *refused) when the global rank
  // `lifecycle` names is a live member of its job on another host that may
  // not be taken over.
  absl::Status ForeignRank(absl::string_view host,
                           const v1::RankLifecycle& lifecycle,
                           uint64_t* refused);
  void RaiseProcessDied(absl::string_view host,
                        const v1::RankLifecycle& lifecycle);
  // generations.cc: a death of a job whose PROCESS_DIED fault (first death
  // within kDeathFoldWindow) is open joins it as a later suspect instead of
  // a fault of its own. Returns false when no such fault is open.
  bool FoldDeath(absl::string_view host, const v1::RankLifecycle& lifecycle,
                 int64_t now_ns);
  // The death episode a death belongs to: its job's, or for a process of
  // no job its host's (issue #33 N6: deaths of no job were a fault each,
  // 40 anonymous processes 40 faults).
  static std::string DeathEpisodeOf(absl::string_view host,
                                    absl::string_view job);
  // generations.cc: forgets communicators of an earlier generation: every
  // member dead or exited and one dead (the job was restarted or killed),
  // or a dead member while every live member is in a communicator of the
  // job created after that death that has no dead member (the survivors
  // re-formed without it, torchft-style). Their dead stop holding anyone.
  void RetireOldGenerations();
  // generations.cc: erases the communicators RetireComms named (only a
  // cycle's start erases from comms_) and resolves their hang faults.
  void RetireReplacedComms();
  void EraseComm(std::map<uint64_t, CommState>::iterator it);
  // Marks the members of `host` unreachable (or reachable again).
  void SetUnreachable(absl::string_view host, bool lost);

  Clock* const clock_;
  const Options options_;
  v1::JobPolicy default_policy_;
  std::map<std::string, v1::JobPolicy> policies_;
  // Job -> the hosts its scheduler named (SetJobHosts).
  std::map<std::string, std::set<std::string, std::less<>>, std::less<>>
      scheduled_hosts_;
  std::map<uint64_t, CommState> comms_;
  absl::flat_hash_map<std::string, v1::NodeRegistration> nodes_;
  // Hosts NodeLost, NodeSilent or ForgetNode named since their last
  // NodeBack: unreachable. `ended`: the session ended at `since_ns` (engine
  // clock); forgotten hosts have since_ns = INT64_MIN.
  struct LostHost {
    bool ended = false;
    int64_t since_ns = 0;
  };
  std::map<std::string, LostHost> lost_hosts_;
  // (host, pid) -> job of the live members of erased communicators
  // (retired by a migration or a new generation, expired, forgotten): a
  // death reported after its communicator went is still its host's own.
  // At most kMaxDeparted, the oldest forgotten first.
  static constexpr size_t kMaxDeparted = 65536;
  std::map<std::pair<std::string, uint32_t>, std::string> departed_;
  std::deque<std::pair<std::string, uint32_t>> departed_order_;
  // Budgets with owners (tenant_budget.h): members, communicators and
  // summaries in open joins, per host and per job.
  HostIds host_ids_;
  TenantBudget member_budget_;
  TenantBudget comm_budget_;
  TenantBudget join_budget_;
  // Host ids ForgetNode named since the last cycle's start.
  absl::flat_hash_set<uint32_t> forgotten_hosts_;
  // Hang faults open at the last stop: comm -> func -> (seq, hang start in
  // unix ns), handed to the comm's state when it appears.
  std::map<uint64_t, std::map<int32_t, std::pair<int64_t, int64_t>>>
      adopted_hangs_;
  FaultTracker tracker_;
  EngineStats stats_;
  ConfigFaults config_;
  // Per job (per host for processes of no job: DeathEpisodeOf): the
  // PROCESS_DIED fault of its latest death episode and when (engine clock)
  // its first death was reported.
  struct DeathEpisode {
    std::string key;
    int64_t first_ns = 0;
    int deaths = 0;
  };
  std::map<std::string, DeathEpisode> job_deaths_;
  // RetireComms: hashes to erase at the next cycle (-> why), and every
  // retired hash (oldest first in retired_order_, at most kMaxRetiredComms)
  // whose records are ignored from then on.
  std::map<uint64_t, std::string> retire_pending_;
  absl::flat_hash_set<uint64_t> retired_;
  std::deque<uint64_t> retired_order_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_ENGINE_IMPL_H_
