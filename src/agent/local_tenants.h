// The agent trusts the kernel, not the message (docs/reliability.md, "Trust
// model"): which job a local process belongs to and which ranks it holds.
//
// A connection's process is known by the kernel (SO_PEERCRED: pid, uid) and
// /proc (its cgroup; the job its scheduler started it in, read from its
// environment as the library reads it: PITSTOP_JOB_ID, SLURM_JOB_ID,
// TORCHELASTIC_RUN_ID). Its hello's claims are held against that:
//   - job: a process may claim a job only when what the kernel knows of it
//     names that job: its environment as exec'd (/proc/PID/environ: the
//     library's job variables, or none of them for the library's fallback
//     job "default") or its Slurm cgroup (job_N for job N). The first such
//     process fixes the job's identity on this node (its uid and, under
//     Slurm, the job_N of its cgroup) until the job's last process is gone;
//     a later process claiming the job must have that identity. A process
//     with no such evidence (an `env -i` one, or one whose environ the agent
//     may not read) reports as an anonymous tenant when the job has no
//     identity here: its hello's job and global rank are cleared (it fixes
//     nothing, holds no global rank, and its end is no death in the job);
//     with the job's identity (same uid and cgroup: the job's own trust
//     domain) it is one of the job's processes.
//     Evidence has a strength (Evidence below): a process's environment is
//     its own choice, a Slurm cgroup is the scheduler's. A job's identity
//     remembers the evidence that fixed it; a process with stronger
//     evidence for the job, from a scheduler's cgroup (its cgroup is the
//     job's, or it is in a Slurm job's cgroup at all where the job's
//     holders are in none) takes the job over: the earlier holders are
//     quarantined (their ranks are released, their later records dropped, their
//     end is no death in the job; counted). So an environment-only claimant
//     that came first can neither lock out nor forge deaths of a job whose
//     ranks the kernel proves on this node; among equal evidence the first
//     still holds.
//   - ranks: the first process that claims a global rank of a job, or a
//     rank of a communicator, holds it until its last stream ends; another
//     process's claim of it is refused. A communicator belongs to the job
//     of its first claim; a rank or communicator that only processes of no
//     job claimed is taken by the first process of a job that claims it
//     (an anonymous tenant locks no job's rank out). Shares
//     (LocalTenantsOptions): one process, the processes of one uid and the node
//     hold at most so many ranks; a claim beyond is refused.
//   - listed global ranks: a communicator record's global_ranks may name
//     the global rank of the record's own rank and of the other ranks of
//     the communicator its process holds; entries for any other rank are
//     claims about other processes' ranks (the library never makes them:
//     docs/plugin.md, RANK) and are cut from the record (round 21, R21-4:
//     each entry is a member upstream, and five processes of one user
//     listing 65,536 ranks each filled their host's member share at the
//     controller). Believed, as the hello is, for a process the kernel
//     does not vouch for (ingest.verify_pid off: `pitstop replay`).
//   - host: the agent writes its own host into what a process reports.
// Refused hellos end the stream (PermissionDenied); refused communicator
// and op records are dropped from the message; every refusal is counted
// (pitstop_agent_claims_refused_total{what}).
//
// Thread-safe (one mutex, a leaf: nothing is called under it).
#ifndef PITSTOP_AGENT_LOCAL_TENANTS_H_
#define PITSTOP_AGENT_LOCAL_TENANTS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pitstop/sync.h"
#include "pitstop/v1/telemetry.pb.h"
#include "src/agent/peer_cred.h"

namespace pitstop::agent {

// What the kernel says of a connected process.
struct ProcessIdentity {
  bool known = false;  // SO_PEERCRED was read
  pid_t pid = 0;
  uid_t uid = 0;
  // The Slurm job of its cgroup ("job_4711"), "" when not in one.
  std::string cgroup_job;
  // The jobs its environment names (the values of the library's job
  // variables that are set), none when unreadable.
  std::vector<std::string> env_jobs;
  // Whether /proc/PID/environ could be read (empty env_jobs then means the
  // library falls back to job "default").
  bool environ_read = false;
  // When the process started (/proc/PID/stat field 22, clock ticks since
  // boot); 0 when unreadable. With pid it names one process for good: a
  // later process that gets the same pid has another start (R18-2, R18-4).
  uint64_t start_ticks = 0;
};

// The start time (field 22, clock ticks since boot) of a /proc/PID/stat
// line, 0 when it cannot be parsed. The command name (field 2) may hold
// spaces and parentheses: fields are counted after its last ')'.
uint64_t StartTicksOfStat(absl::string_view stat);

// The job the library reports when its environment names none
// (plugin/config.cc).
inline constexpr char kLibraryDefaultJob[] = "default";

// Reads /proc/PID/cgroup and /proc/PID/environ under `proc_root` (bounded
// reads; what cannot be read stays unknown).
ProcessIdentity IdentifyProcess(const PeerCred& cred,
                                const std::string& proc_root = "/proc");

// Jobs with an identity on this node (a job's is forgotten when its last
// process is gone); beyond, a new job is refused.
inline constexpr size_t kMaxLocalJobs = 4096;
// Ranks (global ranks and communicator ranks) held on this node; beyond,
// new claims are refused. The default of LocalTenantsOptions.
inline constexpr size_t kMaxHeldRanks = size_t{1} << 20;
// Ranks (global ranks and communicator ranks) one process may hold, so that
// no process fills the node's table for the others (issue #33 N5). A real
// process drives at most the node's GPUs (8, 16 with ncclCommInitAll) in
// each of its communicators, and a large 5-D parallel job makes a few
// dozen communicators per rank: 4096 is over ten times that, and the
// agent's own cap on a stream's live communicators (kMaxCommsPerStream).
// Beyond it a claim is refused (counted {what="process"}).
inline constexpr size_t kMaxRanksPerProcess = 4096;
// Ranks the processes of one uid may hold together (R18-6): 257 processes
// of one uid at their cap filled the node's table and locked every other
// user out. An eighth of the table: 32 processes at their cap, and at least
// eight uids to fill the node. Beyond it a claim is refused (counted
// {what="uid"}).
inline constexpr size_t kMaxRanksPerUid = kMaxHeldRanks / 8;

// The shares of the node's rank table (agent config ingest.max_ranks_*,
// docs/agent.md).
struct LocalTenantsOptions {
  size_t max_held_ranks = kMaxHeldRanks;               // the node
  size_t max_ranks_per_uid = kMaxRanksPerUid;          // one uid
  size_t max_ranks_per_process = kMaxRanksPerProcess;  // one process
  // ingest.job_uids: the uids whose processes run jobs on this node (the
  // launcher's, the training accounts'). When set, a process of another
  // uid whose only evidence for a job is its environment (no Slurm cgroup)
  // cannot fix a job's identity: it reports as an anonymous tenant
  // (counted {what="job_uid"}), so it can neither lock a job's ranks out
  // nor report a death in it (R18-7). Empty: any uid (the first holds).
  std::vector<uid_t> job_uids;
};

class LocalTenants {
 public:
  explicit LocalTenants(LocalTenantsOptions options = {}) : options_(options) {}

  struct Stats {
    uint64_t jobs_refused = 0;   // a hello claiming another job
    uint64_t ranks_refused = 0;  // a rank another process holds
    uint64_t comms_refused = 0;  // a communicator of another job
    uint64_t tables_full = 0;    // kMaxLocalJobs / kMaxHeldRanks
    uint64_t unproven = 0;       // a job claim without evidence: made anonymous
    // A job claim the agent could not check: it may not read the process's
    // environ (another uid, no CAP_SYS_PTRACE) and no Slurm cgroup names a
    // job. Believed as when the pid is not visible (docs/reliability.md).
    uint64_t unverified = 0;
    // Processes of a job whose identity a process with stronger evidence
    // took over: their claims are dropped (see the file comment).
    uint64_t quarantined = 0;
    // A rank beyond one process's share (max_ranks_per_process).
    uint64_t process_over_cap = 0;
    // A rank beyond one uid's share (max_ranks_per_uid; R18-6).
    uint64_t uid_over_share = 0;
    // Ranks a process of no job held, taken by a process of a job.
    uint64_t jobless_superseded = 0;
    // A job claim by environment of a uid not in job_uids: made anonymous.
    uint64_t uid_not_for_jobs = 0;
    // A trainer's step report for a job or global rank its process may
    // not report for (CheckTrainer).
    uint64_t trainers_refused = 0;
    // Communicator records whose global_ranks listed ranks their process
    // does not hold: those entries were cut (R21-4).
    uint64_t listed_refused = 0;
  };

  // How strongly what the kernel knows ties a process to the job it
  // claims, weakest first.
  enum class Evidence {
    kUnverified,   // nothing the agent could read names the job
    kEnvironment,  // its environment (the process's own choice)
    kScheduler,    // its environment, from inside a Slurm job cgroup
    kCgroup,       // its Slurm cgroup is the job's (job_N for job N)
  };

  // How a stream that said hello reports.
  enum class Standing {
    kMember,     // for the job and global rank of its hello
    kAnonymous,  // for no job and no global rank (see the file comment)
  };

  // A stream of process `who` said hello for `job` with `global_rank` (-1:
  // none). PermissionDenied naming the claim when the process may not
  // (the caller ends the stream); `hello_pid` stands for the process when
  // the kernel's word is unknown (then its hello is believed: the operator
  // turned ingest.verify_pid off).
  absl::StatusOr<Standing> Hello(uint64_t stream, const ProcessIdentity& who,
                                 uint32_t hello_pid, const std::string& job,
                                 int32_t global_rank);
  // Whether process `who` may send TrainerService reports for `job` and
  // `global_rank` (attacker round 18, R18-8): the job as a hello of it
  // would be (its environment or cgroup names the job, or it has the
  // identity the job's first process fixed on this node: same uid and
  // cgroup), and a global rank no other process of this node holds.
  // PermissionDenied naming the claim (counted in trainers_refused). A
  // process the kernel does not know (ingest.verify_pid off) is believed.
  // Nothing is fixed or held by a trainer's report.
  absl::Status CheckTrainer(const ProcessIdentity& who, const std::string& job,
                            int32_t global_rank);
  // Drops from `req` the communicator events and op records for ranks the
  // stream's process may not report for, and cuts from its communicator
  // records the global_ranks entries of ranks the process does not hold
  // (counted). Returns whether it changed `req`. Streams without an accepted
  // hello: nothing is checked.
  bool Filter(uint64_t stream, v1::StreamTelemetryRequest* req);
  // Whether Filter would change `req` (cheap: the ranks this stream already
  // holds are checked without the lock's tables).
  bool NeedsFilter(uint64_t stream, const v1::StreamTelemetryRequest& req);
  // The stream ended: when it was its process's last, the process's ranks
  // are free.
  void Closed(uint64_t stream);
  // Whether the stream's process lost its job to a process with stronger
  // evidence (its end is then no death in the job).
  bool Quarantined(uint64_t stream) const;
  // Whether the stream reports for a job: an accepted hello naming one, and
  // not quarantined since. An anonymous tenant, a hello naming no job or a
  // refused one reports for none, and its end is no death (issue #33 N6:
  // 40 anonymous processes dropped without goodbye were 40 PROCESS_DIED
  // faults of job '').
  bool ReportsForAJob(uint64_t stream) const;

  Stats stats() const;

 private:
  using RankKey = std::pair<uint64_t, int32_t>;  // (comm_hash, rank)
  // A holder is one process: its pid and start time, so that a process
  // that gets the pid of an exited one whose stream another process keeps
  // open (a forked child's socket) is a new holder, not refused as the old
  // one (R18-4). Pids are below 2^22 (the kernel's PID_MAX_LIMIT); a
  // start of 0 (unknown) leaves the pid alone.
  static uint64_t HolderOf(uint32_t pid, uint64_t start_ticks) {
    return (start_ticks << 22) | pid;
  }
  // The pid of a holder, for messages.
  static uint32_t PidOf(uint64_t holder) {
    return static_cast<uint32_t>(holder >> 22 == 0 ? holder
                                                   : holder & ((1u << 22) - 1));
  }
  struct Job {
    uid_t uid = 0;
    std::string cgroup_job;
    uint32_t processes = 0;                     // holders with live streams
    Evidence evidence = Evidence::kUnverified;  // of the process that fixed it
  };
  struct Holder {  // one process
    uint32_t streams = 0;
    bool uid_known = false;  // the kernel's word (ingest.verify_pid on)
    uid_t uid = 0;
    std::string job;
    absl::flat_hash_set<int32_t> global_ranks;
    absl::flat_hash_set<RankKey> ranks;
  };
  struct Stream {
    uint64_t holder = 0;  // HolderOf(pid, start) (the hello's pid: unknown)
    std::string job;
    bool quarantined = false;           // every later record is dropped
    absl::flat_hash_set<RankKey> held;  // this stream's claims, no lock
  };
  // `take_over` (set): the job's identity is another's, fixed by weaker
  // evidence than `who` has; the caller quarantines its holders.
  absl::StatusOr<Standing> CheckJob(const ProcessIdentity& who,
                                    const std::string& job, bool* take_over)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Quarantines every process of `job` and forgets the job's identity.
  void Quarantine(const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees what `holder` holds (global ranks, communicator ranks).
  void Release(uint64_t holder) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The share a new rank of `holder` (a process of `uid`: the kernel's,
  // none when unknown) would exceed, counted; kNone when it fits.
  // `from_another` (set): the rank moves from another holder, the node's
  // table does not grow.
  enum class Share { kNone, kProcess, kUid, kNode };
  Share FullShare(uint64_t holder, std::optional<uid_t> uid,
                  bool from_another = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `h` holds `delta` more (or fewer) ranks: charged to its uid's share.
  void Charge(const Holder& h, int64_t delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PermissionDenied when `global_rank` of `job` is held by another
  // process than `holder`, or a share of the rank table is full.
  absl::Status CheckGlobalRank(uint64_t holder, std::optional<uid_t> uid,
                               const std::string& job, int32_t global_rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims (comm, rank) for the stream's process; false (counted) when
  // another process holds it or the communicator is another job's. A
  // process of a job takes a rank, and a communicator, that only processes
  // of no job claimed (Supersede).
  bool ClaimRank(Stream* s, const RankKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the entries of `info`'s global_ranks for ranks `h` does not hold
  // to -1 and drops the trailing ones (counted in listed_refused); a
  // process the kernel does not know keeps its list. Whether it cut.
  bool CutList(const Holder& h, v1::CommunicatorInfo* info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `holder`, a process of no job, loses `key` to a process of a job.
  void Supersede(uint64_t holder, const RankKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t held() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return global_holders_.size() + rank_holders_.size();
  }

  const LocalTenantsOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Holder> holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  // (job, global rank) -> holder; (comm, rank) -> holder; comm -> job.
  absl::flat_hash_map<std::pair<std::string, int32_t>, uint64_t> global_holders_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RankKey, uint64_t> rank_holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::pair<std::string, uint32_t>> comm_jobs_
      ABSL_GUARDED_BY(mu_);  // -> (job, ranks held)
  // uid -> ranks its processes hold (the kernel's uid only).
  absl::flat_hash_map<uid_t, size_t> uid_held_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_LOCAL_TENANTS_H_
