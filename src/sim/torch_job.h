// TorchJob: the demo PyTorch job (tools/torch-job/train_lm.py, DDP) as a
// user launches it on several nodes: one `torchrun` per emulated node
// (static rendezvous on 127.0.0.1: --nnodes N --node_rank i
// --nproc_per_node k, and --redirects 2 --tee 2, which Debian 12's torchrun
// needs on Python 3.11), with the pitstop library in LD_PRELOAD and the
// node's agent socket and host name in the environment of torchrun and so
// of its workers. Nothing of pitstop is in the job's code.
//
// Worker processes are found from outside, as an operator would: the
// children of each torchrun whose environment carries RANK (read from
// /proc). Progress is read from the job's own per-rank loss log
// (OUT/losses-rank<R>.jsonl).
//
// Thread-compatible: one owner thread calls the methods.
#ifndef PITSTOP_SRC_SIM_TORCH_JOB_H_
#define PITSTOP_SRC_SIM_TORCH_JOB_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/sim/subprocess.h"

namespace pitstop::sim {

struct TorchJobOptions {
  int nodes = 2;
  int ranks_per_node = 2;
  std::string torchrun = "/usr/bin/torchrun";
  std::string script;  // train_lm.py
  // The script's arguments (--out is added: out_dir).
  std::vector<std::string> args;
  // Per node: its agent's shared-memory socket and host name; empty
  // plugin: the job runs without pitstop.
  std::string plugin;
  std::vector<std::string> agent_sockets;
  std::vector<std::string> hosts;
  std::string job_id = "torch-job";
  // More environment for torchrun and its workers (the backend's library
  // path, PYTHONPATH); OMP_NUM_THREADS=1 is always set.
  std::vector<std::pair<std::string, std::string>> env;
  std::string out_dir;  // the job's --out (shared by its ranks)
  std::string log_dir;  // torchrun-node<i>.log and torchrun's --log_dir
};

class TorchJob {
 public:
  // Starts the torchrun processes (a free port for the rendezvous).
  // NotFound when torchrun or the script is missing.
  static absl::StatusOr<std::unique_ptr<TorchJob>> Start(
      const TorchJobOptions& options);
  // Kills what still runs (Kill()).
  ~TorchJob();
  TorchJob(const TorchJob&) = delete;
  TorchJob& operator=(const TorchJob&) = delete;

  int world() const { return options_.nodes * options_.ranks_per_node; }
  int NodeOf(int rank) const { return rank / options_.ranks_per_node; }
  int LocalRankOf(int rank) const { return rank % options_.ranks_per_node; }

  // Waits until every rank's worker process is there. DeadlineExceeded
  // naming the ranks not found (and the torchrun logs) after `timeout`, or
  // at once when a torchrun ended.
  absl::Status FindWorkers(absl::Duration timeout);
  // After FindWorkers: the pid of `rank`'s worker.
  pid_t worker_pid(int rank) const { return workers_[rank]; }

  // Training steps `rank` logged so far (lines with a loss), read
  // incrementally from its loss log.
  int StepsDone(int rank);

  // Torchrun processes still running.
  int Running();
  // Each torchrun's exit ("exit 0", "signal 9 ...", "running").
  std::vector<std::string> Exits();
  // True when every torchrun exited with status 0.
  bool AllExitedCleanly();

  // SIGKILL to every process of the job (workers first, then torchrun and
  // anything else they started), and reaps the torchruns. Idempotent.
  void Kill();

  // For a run that did not end: one line per torchrun still running and
  // per process under it ("torchrun node1: pid ..."; DescribeProcess).
  std::vector<std::string> DescribeRunning();

  std::string torchrun_log(int node) const;

 private:
  explicit TorchJob(const TorchJobOptions& options)
      : options_(options),
        workers_(options.nodes * options.ranks_per_node, 0),
        log_offsets_(workers_.size(), 0),
        steps_(workers_.size(), 0) {}
  std::vector<std::string> Argv(int node, int port) const;

  TorchJobOptions options_;
  int port_ = 0;  // torchrun's --master_port
  std::vector<std::unique_ptr<Subprocess>> torchruns_;
  std::vector<pid_t> workers_;  // by global rank; 0 = not found yet
  std::vector<uint64_t> log_offsets_;
  std::vector<int> steps_;
};

// Process ids whose parent is `parent` (from /proc/<pid>/stat).
std::vector<pid_t> ChildrenOf(pid_t parent);
// Every descendant of `root`, deepest first.
std::vector<pid_t> DescendantsOf(pid_t root);
// The value of `name` in /proc/<pid>/environ; empty when absent or
// unreadable.
std::string EnvironOf(pid_t pid, const std::string& name);
// Every NAME=VALUE of /proc/<pid>/environ, in order; empty when unreadable.
std::vector<std::pair<std::string, std::string>> EnvironmentOf(pid_t pid);
// The arguments of /proc/<pid>/cmdline; empty when unreadable.
std::vector<std::string> CommandLineOf(pid_t pid);
// What a live process is doing, from /proc: "pid 123 (python3.11) state S,
// 9 threads, waiting in: futex_do_wait x8, do_epoll_wait" (each thread's
// wchan; "running" for a thread on a CPU), or "pid 123: gone".
std::string DescribeProcess(pid_t pid);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TORCH_JOB_H_
