// The detection engine: C4D-style fault detection and localisation over the
// per-rank telemetry of many agents, as a plain library (no threads, no gRPC,
// no I/O). pitstop-controller feeds it from AgentLink streams; `pitstop
// analyze` feeds it imported Flight Recorder / Kineto data with a FakeClock.
//
//   FakeClock clock;
//   ASSIGN_OR_RETURN(auto engine, DetectionEngine::Create(&clock, {}));
//   engine->AddCommunicator("node1", info);       // membership, any order
//   engine->AddProgress("node1", progress);       // hang detector input
//   engine->AddSummary("node1", summary);         // slow detectors input
//   clock.Advance(absl::Seconds(30));
//   CycleResult r = engine->RunCycle();           // new / changed faults
//
// Detection never compares clocks of two nodes: durations and sequence
// numbers only (design.md, "Detection without synchronised clocks"). Time
// that the engine measures itself (windows, hang timeouts) is read from the
// injected Clock when an input arrives or a cycle runs.
//
// Fault classes and how they are localised (C4, HPCA'25, §4):
//   NON_COMM_SLOW  per collective, wait_r = duration_r - min duration; the rank
//                  with a robustly low mean wait, window after window, is the
//                  straggler (suspect: GPU level; others are victims).
//   COMM_SLOW      durations grow on all ranks with no late rank; the
//                  connection / NIC / node pair common to slow connections
//                  (ConnectionSummary throughput) is the suspect. Without
//                  connection data the engine asks for deep profiling.
//   NON_COMM_HANG  from RankProgress: ranks that never enqueued the first
//                  sequence number not completed by all are suspects, the
//                  others victims; a member whose completions stopped below
//                  what others completed in an all-member collective is a
//                  GPU-level suspect. Works on enqueue/complete states alone
//                  (Flight Recorder data has no kernel timers).
//   COMM_HANG      every member enqueued it, none completes: the connection(s)
//                  whose proxy ops of the stuck op stayed open while others
//                  stopped, else the lowest proxy progress, are suspects.
//   PROCESS_DIED   RankLifecycle DIED; hangs of its peers are folded into it.
// Cascades are folded into their root fault: a NON_COMM_HANG waiting for
// ranks blocked in another comm's hang or death, a straggler whose
// lateness is what a slow comm it belongs to adds (docs/controller.md).
// Verdicts need warm-up, a minimum effect and persistence (N of M windows)
// for the slow classes, and an adaptive timeout (max(floor, k x p99)) for the
// hang classes, all from the job's JobPolicy.
#ifndef PITSTOP_CONTROLLER_DETECT_DETECTION_ENGINE_H_
#define PITSTOP_CONTROLLER_DETECT_DETECTION_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/common.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/scheduled_hosts.h"

namespace pitstop::controller {

// Activation mask bits of the profiler plugin (nccl-plugin-abi.md).
inline constexpr uint32_t kDefaultActivationMask = 0x4E;
inline constexpr uint32_t kDeepActivationMask = 0x4E | 0x10 | 0x80;

// Largest communicator the engine accepts: ranks must be in [0, kMaxRanks)
// and n_ranks at most kMaxRanks (inputs outside get InvalidArgument).
inline constexpr int32_t kMaxRanks = 1 << 20;
// Retired communicators (DetectionEngine::RetireComms) whose late records
// are still recognised and ignored; 8 bytes each.
inline constexpr size_t kMaxRetiredComms = 4096;

// The controller defaults for every JobPolicy field (observe mode, 1 s
// windows, 3 of 5 windows, 20% minimum effect, hang timeout max(5 s,
// 10 x p99), 20 warm-up collectives, robust z > 3.5).
v1::JobPolicy DefaultJobPolicy();

// Returns `policy` with every zero field replaced by `defaults`' (which
// are themselves resolved against DefaultJobPolicy() first).
v1::JobPolicy ResolvePolicy(const v1::JobPolicy& policy,
                            const v1::JobPolicy& defaults = {});

// Detection windows shorter or longer than this are refused.
inline constexpr double kMinWindowMs = 100;
inline constexpr double kMaxWindowMs = 3'600'000;

// InvalidArgument naming the field ("policy.persistence_n: ...") when a
// field is not finite or, resolved, out of range (persistence_n >
// persistence_m, window_ms outside [100 ms, 1 h], min_effect outside
// [0.01, 100], hang_timeout_multiplier outside [1, 1000],
// hang_timeout_floor_ms outside [100 ms, 1 day], hang_confirm_multiplier
// outside [1, 10], warmup_collectives above
// 10^6, z_threshold outside [0.5, 100]; docs/reliability.md).
absl::Status ValidatePolicy(const v1::JobPolicy& policy,
                            const v1::JobPolicy& defaults = {});

// A request to turn on deep profiling (proxy steps) on one agent; the
// controller turns it into AgentCommand.set_activation_mask.
struct ProfilingRequest {
  std::string host;
  uint64_t comm_hash = 0;  // 0 = all communicators on the node
  int32_t rank = -1;       // -1 = all local ranks of the communicator
  uint32_t event_mask = kDeepActivationMask;
  uint32_t duration_ms = 30'000;
};

struct CycleResult {
  // Faults opened or changed in this cycle (state, suspects, evidence),
  // including auto-resolved ones (state RESOLVED). Each carries its stable
  // fault_id; times are unix ns from the clock's Now().
  std::vector<v1::Fault> faults;
  std::vector<ProfilingRequest> profiling;
  // Wall time the cycle took on the real clock (for metrics).
  absl::Duration cycle_time;
};

struct EngineStats {
  uint64_t summaries = 0;           // AddSummary calls accepted
  uint64_t collectives_joined = 0;  // collectives with every member reported
  uint64_t late_summaries = 0;      // arrived after their collective was folded
  uint64_t incomplete_dropped = 0;  // joins evicted before all members came
  uint64_t pending_joins = 0;       // joins currently open
  uint32_t communicators = 0;
  uint32_t ranks = 0;  // distinct (comm, rank) members known
  uint64_t cycles = 0;
  // Records refused by a budget's share (Options: max_members*,
  // max_comms*, max_join_entries*), all shares together, and of them those
  // refused by a host's, a job's or a host's share of one job (the rest:
  // the cluster ceiling).
  uint64_t members_refused = 0;
  uint64_t members_refused_host = 0;
  uint64_t members_refused_job = 0;
  uint64_t members_refused_host_job = 0;
  uint64_t comms_refused = 0;
  uint64_t comms_refused_host = 0;
  uint64_t comms_refused_job = 0;
  uint64_t comms_refused_host_job = 0;
  uint64_t comms_expired = 0;  // forgotten after comm_expiry without input
  // Forgotten as an earlier generation of a job, or replaced by a committed
  // migration (generations.cc).
  uint64_t comms_retired = 0;
  // Records for a communicator RetireComms retired, ignored.
  uint64_t records_for_retired_comms = 0;
  uint64_t summaries_refused = 0;  // beyond a max_join_entries share
  uint64_t summaries_refused_host = 0;
  uint64_t summaries_refused_job = 0;
  uint64_t summaries_refused_host_job = 0;
  // Records a host sent for another host (docs/reliability.md, "Trust
  // model"): naming another host, a member another live host holds, or
  // another job for a communicator whose job is known; refused.
  uint64_t claims_refused = 0;
  // Of those, communicator records of a job from a host its scheduler did
  // not name (DetectionEngine::SetJobHosts).
  uint64_t unscheduled_refused = 0;
  // Jobs whose hosts a scheduler named now, and their (job, host) pairs.
  uint64_t scheduled_jobs = 0;
  uint64_t scheduled_names = 0;
  // Deaths refused (no forged PROCESS_DIED): the process was no live member
  // of a communicator of its job on the reporting host before its death
  // record, or its global rank is held by a live member of its job on
  // another host that may not be taken over yet (Options::handover_grace);
  // and communicator creation failures naming such a rank.
  uint64_t deaths_refused = 0;
  // Members a process of no job registered before the communicator's job
  // was known, taken by a communicator record of the job (round 20).
  uint64_t jobless_superseded = 0;
  // Failed communicator creations refused by a share of the CONFIG fault
  // table (config_fault.h: per host, per job and host, the ceiling).
  uint64_t config_failures_refused = 0;

  uint64_t join_entries = 0;  // summaries held in open joins now
  // Hang verdicts of a cycle dropped because the communicator's members
  // changed between BeginCycle and FinishCycle; judged again on the live
  // state (FinishCycle).
  uint64_t hang_verdicts_rejudged = 0;
  // Communicators a cycle copied in pieces (Options::cycle_copy_chunk),
  // and of those, copied again in one piece because their members changed
  // between two pieces.
  uint64_t copies_in_pieces = 0;
  uint64_t copies_redone = 0;
};

// One detection cycle's work between DetectionEngine::BeginCycle and
// FinishCycle: copies of what the detectors read, and their verdicts.
class CycleWork {
 public:
  virtual ~CycleWork() = default;
  // Runs the detectors on the copies BeginCycle took. Touches nothing of
  // the engine, so it may run while another thread feeds the engine
  // inputs (the controller runs it without its lock); once per work,
  // between BeginCycle and FinishCycle.
  virtual void Detect() = 0;
};

// Connections of one summary (or in-flight entries of one progress report)
// the engine looks at; the agent sends at most 256 per op.
inline constexpr int kMaxConnectionsPerRecord = 256;

// Not thread-safe: one caller at a time (pitstop-controller serialises calls
// with a mutex; the offline analyzer calls it from one thread). The one
// exception is CycleWork::Detect(), which may run beside any call but
// BeginCycle/FinishCycle.
class DetectionEngine {
 public:
  struct Options {
    // Policy for jobs without their own; zero fields take DefaultJobPolicy().
    v1::JobPolicy default_policy;
    // Fault ids are absl::StrCat(fault_id_prefix, n) with n counting from
    // first_fault_number (the controller passes its store's next number).
    std::string fault_id_prefix = "F";
    uint64_t first_fault_number = 1;
    // Open (incomplete) joins kept per communicator; the oldest is evicted
    // and counted in incomplete_dropped beyond it.
    uint32_t max_pending_joins_per_comm = 512;
    // An incomplete join older than this is evicted (late members lost).
    absl::Duration join_horizon = absl::Seconds(30);
    // How long deep profiling is requested for.
    absl::Duration deep_profiling_duration = absl::Seconds(30);
    // Budgets with owners (docs/reliability.md, "Trust model"): each is
    // shared per host and per job under a cluster ceiling
    // (tenant_budget.h). A member (communicator, rank) is charged to the
    // host whose report created it, a communicator to the host that
    // created it, a summary held in an open join to its member's host; all
    // to the communicator's job. A record that would take its host, its job
    // or the cluster past its share is refused (ResourceExhausted naming
    // the share) and counted in EngineStats; the others keep theirs.
    // A host's share of one job (*_per_host_job; 0: a 16th of the job's
    // share, at least 1): a job's share takes 16 hosts to fill, and with
    // the defaults a communicator of 65536 ranks still fits the share of
    // the host that reports it first. Records of no job are their host's
    // own (host, "") bucket.
    uint64_t max_members = uint64_t{1} << 21;
    uint64_t max_members_per_host = uint64_t{1} << 18;
    uint64_t max_members_per_job = uint64_t{1} << 20;
    uint64_t max_members_per_host_job = 0;
    uint32_t max_comms = 1 << 18;
    uint32_t max_comms_per_host = 16384;
    uint32_t max_comms_per_job = 65536;
    uint32_t max_comms_per_host_job = 0;
    uint64_t max_join_entries = uint64_t{1} << 22;
    uint64_t max_join_entries_per_host = uint64_t{1} << 20;
    uint64_t max_join_entries_per_job = uint64_t{1} << 21;
    uint64_t max_join_entries_per_host_job = 0;
    // A communicator no input named for this long is forgotten (ended jobs
    // must not hold budget forever). Zero keeps them.
    absl::Duration comm_expiry = absl::Hours(1);
    // A host whose agent session ended (NodeLost) keeps its members this
    // long: only then may another host report them (a rank restarted
    // elsewhere) or their deaths. A silent agent (NodeSilent) and an agent
    // that reconnects within the grace keep theirs (issue #33: another
    // host's death record for a live rank was accepted while its owner was
    // disconnected 0.5 s). ForgetNode gives them up at once.
    absl::Duration handover_grace = absl::Seconds(30);
    // Called by CycleWork::Detect() before the detectors run (tests hold a
    // cycle there to show what may happen meanwhile). Empty: nothing.
    std::function<void()> detect_hook;
    // A cycle with `between_comms` (BeginCycle, RunCycle) copies at most
    // this many members and progress reports of one communicator before it
    // calls `between_comms` again, so a caller that lets its lock go there
    // never holds it for a whole large communicator (docs/reliability.md,
    // "Round 8"). 0: every communicator in one piece.
    size_t cycle_copy_chunk = 256;
  };

  // InvalidArgument if `clock` is null or the default policy is invalid.
  static absl::StatusOr<std::unique_ptr<DetectionEngine>> Create(
      Clock* clock, Options options);
  virtual ~DetectionEngine() = default;

  // --- inputs; `host` is the reporting agent's registration host ----------
  // InvalidArgument (naming the field) when host is empty.
  virtual absl::Status AddNode(const v1::NodeRegistration& registration) = 0;
  // Membership. InvalidArgument for comm_hash 0, rank outside [0, kMaxRanks),
  // n_ranks outside [0, kMaxRanks], rank >= n_ranks, more global_ranks than
  // n_ranks; ResourceExhausted beyond the budgets of Options (nothing
  // stored); PermissionDenied (counted in claims_refused) when `info.host`
  // names another host than `host`, the rank is held by a live member on
  // another host, or info.job_id is not the communicator's known job.
  // Members are stored with `host`, the reporting agent's identity.
  // `info.finalized`: the member destroyed the communicator; it is judged
  // like a member that exited (no hang once every member left).
  virtual absl::Status AddCommunicator(absl::string_view host,
                                       const v1::CommunicatorInfo& info) = 0;
  // One rank's part of one collective; joined across members by (comm_hash,
  // func, seq_number) in any order. Durations used: kernel_duration_ns, else
  // proxy_duration_ns. InvalidArgument for comm_hash 0, rank outside
  // [0, kMaxRanks) or rank >= the communicator's n_ranks once known.
  virtual absl::Status AddSummary(absl::string_view host,
                                  const v1::CollectiveSummary& summary) = 0;
  // Where one rank is in one communicator (per func). Hang detector input.
  // A last_*_seq of 0 whose matching *_cpu_ns is also 0 means "none yet";
  // last_started_seq 0 means unknown. The latest report of a rank replaces
  // the previous one. Same errors as AddSummary.
  virtual absl::Status AddProgress(absl::string_view host,
                                   const v1::RankProgress& progress) = 0;
  // STREAM_OPENED / CLEAN_EXIT / DIED of one process, matched to members by
  // (host, pid); its `communicators` are added as membership. DIED raises a
  // PROCESS_DIED fault at once; CLEAN_EXIT removes the process from hang
  // detection; a DIED of a process already dead changes nothing.
  // InvalidArgument for an empty host. PermissionDenied, nothing raised
  // (deaths_refused), for a DIED of a process that was no live member of a
  // communicator of its job on `host` before this record (the record's own
  // `communicators` do not count: a host reports deaths of the processes it
  // is known to hold, or of those whose creation failed), or whose global
  // rank a live member of its job on another host holds;
  // and (also deaths_refused) for a COMM_INIT_FAILED naming such a rank.
  virtual absl::Status AddLifecycle(absl::string_view host,
                                    const v1::RankLifecycle& lifecycle) = 0;

  // The agent session of `host` ended (stream closed or shed): the hang
  // detectors treat the ranks on it as unreported (neither suspects nor
  // waited for) until NodeBack(host), and hang faults say that the node's
  // agent is unreachable. Once Options::handover_grace passed without
  // NodeBack, other hosts may report its members. Idempotent (the grace
  // counts from the first call).
  virtual void NodeLost(absl::string_view host) = 0;
  // The agent of `host` is connected but sent nothing for a while: its
  // ranks are unreachable as for NodeLost, but stay its own.
  virtual void NodeSilent(absl::string_view host) = 0;
  virtual void NodeBack(absl::string_view host) = 0;
  // The node is gone for good (expired by the controller): its
  // registration is dropped, its members may be reported by other hosts at
  // once, and at the next cycle's start the
  // communicators only it reported are forgotten (its budget shares given
  // back); the others expire on their own.
  virtual void ForgetNode(absl::string_view host) = 0;

  // --- policy -----------------------------------------------------------
  // Stores the job's policy; zero fields take the engine's default policy
  // (Options::default_policy, itself resolved against DefaultJobPolicy()).
  // InvalidArgument from ValidatePolicy. Returns the resolved policy.
  virtual absl::StatusOr<v1::JobPolicy> SetJobPolicy(
      absl::string_view job_id, const v1::JobPolicy& policy) = 0;
  // The resolved policy of a job (defaults for unknown jobs).
  virtual v1::JobPolicy GetJobPolicy(absl::string_view job_id) const = 0;

  // --- the scheduler's word ---------------------------------------------
  // The scheduler names the hosts `job_id` runs on (docs/reliability.md,
  // "Trust model"; issue #33 R21-4, R21-6). From then on a communicator
  // record of the job from another host is refused (PermissionDenied,
  // counted in claims_refused and unscheduled_refused), and the job's
  // members, communicators and summaries on a named host are charged to
  // the job's shares and the host's share of the job but not to the host's
  // own share: made-up jobs that fill a host's share do not starve a job
  // the scheduler placed there. Members registered before are kept. An
  // empty list forgets the naming. Errors from CheckJobHosts
  // (scheduled_hosts.h: the names and the limits).
  virtual absl::Status SetJobHosts(absl::string_view job_id,
                                   const std::vector<std::string>& hosts) = 0;
  // The hosts named for `job_id`, sorted; empty when none are.
  virtual std::vector<std::string> JobHosts(absl::string_view job_id) const = 0;

  // --- detection --------------------------------------------------------
  // Closes the windows whose time has come, runs every detector and returns
  // what changed. Call every 500 ms or so (any period works; windows are
  // measured on the clock).
  CycleResult RunCycle() { return RunCycle(nullptr); }
  // The same, calling `between_comms` (when set) before each communicator's
  // step (and, for a large one, between pieces of its copy:
  // Options::cycle_copy_chunk). The controller lets its lock go there, so agent
  // batches are joined while a long cycle runs instead of after it: the
  // callback may feed inputs (Add*, NodeLost/Back, SetJobPolicy, ForgetFault)
  // but must not destroy the engine or run another cycle. Each communicator's
  // step then reads the clock afresh; an input that arrives meanwhile counts in
  // this cycle for the communicators not yet stepped, in the next for the
  // others, as if it had come just before or just after the cycle.
  virtual CycleResult RunCycle(const std::function<void()>& between_comms) = 0;
  // The same cycle in three steps, so a caller that serialises the engine
  // with a lock can run the detectors without it (pitstop-controller: agent
  // batches are then joined while the detectors run):
  //   BeginCycle (serialised) expires communicators and incomplete joins,
  //     closes the windows whose time has come and copies what the
  //     detectors read of the communicators to judge (members, progress,
  //     the closed window, baselines; not the open joins);
  //   CycleWork::Detect() (not serialised) runs the detectors on the copies;
  //   FinishCycle (serialised) publishes their verdicts: faults, baselines,
  //     cascades, profiling requests. A communicator whose members changed
  //     meanwhile (a member added or moved, dead, exited, its node lost or
  //     back) has its hangs judged again on the live state, so no verdict
  //     blames a rank on what was stale (stats().hang_verdicts_rejudged).
  // Inputs between the steps count for the next window (the closed one was
  // taken) and the next cycle's hang check, as if they came just after the
  // cycle. `between_comms` as above, in BeginCycle and FinishCycle. One
  // cycle at a time; RunCycle(f) is exactly the three steps in a row.
  // FinishCycle leaves `work` to its caller, spent: freeing the copies
  // (milliseconds at 16,384 ranks) is then not part of the serialised
  // step (the controller frees it after letting its lock go).
  virtual std::unique_ptr<CycleWork> BeginCycle(
      const std::function<void()>& between_comms) = 0;
  virtual CycleResult FinishCycle(
      CycleWork* work, const std::function<void()>& between_comms) = 0;
  // Tells the engine an operator resolved `fault_id`: it stops updating it
  // and opens a new fault if the condition is still seen.
  virtual void ForgetFault(absl::string_view fault_id) = 0;
  // Faults open in the store when the controller (re)started: when the
  // engine sees the same condition again (class, job, comm, suspects), it
  // updates that fault instead of opening a second one.
  virtual void AdoptOpenFaults(const std::vector<v1::Fault>& faults) = 0;
  // The job replaced these communicators (a committed migration switched
  // every member to new ones and destroyed them): they are forgotten at the
  // start of the next cycle, their open hang faults resolved with `why`, and
  // records for them that arrive later are ignored (counted in
  // stats().records_for_retired_comms; the last kMaxRetiredComms hashes are
  // remembered). Without this their progress, frozen at the switch and
  // often not flushed alike by every member, reads as a hang.
  virtual void RetireComms(const std::vector<uint64_t>& comm_hashes,
                           absl::string_view why) = 0;

  // --- snapshots for the API ---------------------------------------------
  virtual std::vector<v1::Communicator> Communicators() const = 0;
  // One communicator (false when unknown): costs its own members only.
  virtual bool GetCommunicator(uint64_t comm_hash,
                               v1::Communicator* out) const = 0;
  // Jobs with n_ranks, hosts and comm_hashes filled (faults/policy not).
  virtual std::vector<v1::Job> Jobs() const = 0;
  virtual EngineStats stats() const = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_DETECTION_ENGINE_H_
