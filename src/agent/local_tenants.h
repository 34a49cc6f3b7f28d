// The agent trusts the kernel, not the message (docs/reliability.md, "Trust
// model"): which job a local process belongs to and which ranks it holds.
//
// A connection's process is known by the kernel (SO_PEERCRED: pid, uid) and
// /proc (its cgroup; the job its scheduler started it in, read from its
// environment as the library reads it: PITSTOP_JOB_ID, SLURM_JOB_ID,
// TORCHELASTIC_RUN_ID). Its hello's claims are held against that:
//   - job: a job's identity on this node is fixed when its first process
//     says hello (its uid and, under Slurm, the job_N of its cgroup); a
//     process may claim a job only with that identity, and only a job its
//     environment (as exec'd: /proc/PID/environ) names when it names any.
//   - ranks: the first process that claims a global rank of a job, or a
//     rank of a communicator, holds it until its last stream ends; another
//     process's claim of it is refused. A communicator belongs to the job
//     of its first claim.
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
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
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
};

// Reads /proc/PID/cgroup and /proc/PID/environ under `proc_root` (bounded
// reads; what cannot be read stays unknown).
ProcessIdentity IdentifyProcess(const PeerCred& cred,
                                const std::string& proc_root = "/proc");

// Jobs whose identity is remembered on this node; beyond, the one unused
// longest is forgotten, or a new job is refused when all have processes.
inline constexpr size_t kMaxLocalJobs = 4096;
// Ranks (global ranks and communicator ranks) held on this node; beyond,
// new claims are refused.
inline constexpr size_t kMaxHeldRanks = size_t{1} << 20;

class LocalTenants {
 public:
  struct Stats {
    uint64_t jobs_refused = 0;   // a hello claiming another job
    uint64_t ranks_refused = 0;  // a rank another process holds
    uint64_t comms_refused = 0;  // a communicator of another job
    uint64_t tables_full = 0;    // kMaxLocalJobs / kMaxHeldRanks
  };

  // A stream of process `who` said hello for `job` with `global_rank` (-1:
  // none). PermissionDenied naming the claim when the process may not
  // (the caller ends the stream); `hello_pid` stands for the process when
  // the kernel's word is unknown.
  absl::Status Hello(uint64_t stream, const ProcessIdentity& who,
                     uint32_t hello_pid, const std::string& job,
                     int32_t global_rank);
  // Drops from `req` the communicator events and op records for ranks the
  // stream's process may not report for (counted). Returns whether it
  // changed `req`. Streams without an accepted hello: nothing is checked.
  bool Filter(uint64_t stream, v1::StreamTelemetryRequest* req);
  // Whether Filter would change `req` (cheap: the ranks this stream already
  // holds are checked without the lock's tables).
  bool NeedsFilter(uint64_t stream, const v1::StreamTelemetryRequest& req);
  // The stream ended: when it was its process's last, the process's ranks
  // are free.
  void Closed(uint64_t stream);

  Stats stats() const;

 private:
  using RankKey = std::pair<uint64_t, int32_t>;  // (comm_hash, rank)
  struct Job {
    uid_t uid = 0;
    std::string cgroup_job;
    uint32_t processes = 0;  // holders with live streams
    uint64_t last_used = 0;  // tick of the last hello
  };
  struct Holder {  // one process
    uint32_t streams = 0;
    std::string job;
    absl::flat_hash_set<int32_t> global_ranks;
    absl::flat_hash_set<RankKey> ranks;
  };
  struct Stream {
    uint64_t holder = 0;  // pid (or the hello's when unknown)
    std::string job;
    absl::flat_hash_set<RankKey> held;  // this stream's claims, no lock
  };
  absl::Status CheckJob(const ProcessIdentity& who, const std::string& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MakeRoomForJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims (comm, rank) for the stream's process; false (counted) when
  // another process holds it or the communicator is another job's.
  bool ClaimRank(Stream* s, const RankKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t held() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return global_holders_.size() + rank_holders_.size();
  }

  mutable Mutex mu_;
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Holder> holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  // (job, global rank) -> holder; (comm, rank) -> holder; comm -> job.
  absl::flat_hash_map<std::pair<std::string, int32_t>, uint64_t> global_holders_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RankKey, uint64_t> rank_holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::pair<std::string, uint32_t>> comm_jobs_
      ABSL_GUARDED_BY(mu_);  // -> (job, ranks held)
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_LOCAL_TENANTS_H_
