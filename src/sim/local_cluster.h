// LocalCluster: a real pitstop deployment on loopback, for the simulator,
// `pitstop replay` and end-to-end tests.
//
// Start() launches one pitstop-controller (gRPC on 127.0.0.1, port chosen by
// the kernel, SQLite database in the work directory) and one pitstop-agent
// per emulated node (each with its own Unix ingest socket), and returns once
// all of them are ready: the controller has written its port file and every
// agent socket accepts connections. Each daemon logs to
// <work_dir>/<name>.log. Destroying the cluster stops everything (SIGTERM,
// then SIGKILL after a grace period) and removes the work directory unless
// keep_work_dir is set.
//
// Binaries are found by FindPitstopBinary(): $PITSTOP_BIN_DIR first, then the
// build tree the running executable belongs to.
//
// Thread-compatible: one owner thread calls the methods; the accessors of
// addresses may be read from any thread once Start() returned.
#ifndef PITSTOP_SRC_SIM_LOCAL_CLUSTER_H_
#define PITSTOP_SRC_SIM_LOCAL_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/sim/subprocess.h"

namespace pitstop::sim {

// Returns the path of a pitstop executable `name` ("pitstop-agent",
// "pitstop-controller", "pitstopctl", "pitstop-sim-rank", or a library file
// such as "libnccl-profiler-pitstop.so"). Looks in, in order:
//   1. $PITSTOP_BIN_DIR/<name> and $PITSTOP_BIN_DIR/<build-tree subdir>/<name>;
//   2. each ancestor directory D of the running executable:
//      D/<build-tree subdir>/<name>, then D/<name>.
// Build-tree subdirs: src/agent, src/controller, src/trainer, src/sim,
// tools/pitstopctl, tools/pitstop, plugin, src/nccl/cpu/lib (the CPU NCCL
// backend's libnccl.so.2). NotFound names every place tried.
absl::StatusOr<std::string> FindPitstopBinary(const std::string& name);

struct LocalClusterOptions {
  // Emulated nodes; one agent each. Host names default to node0..node{N-1}.
  int nodes = 1;
  std::vector<std::string> host_names;
  // Where sockets, logs, the port file and the database go. Empty = a fresh
  // directory under /tmp (short, so Unix socket paths stay < 108 bytes).
  std::string work_dir;
  bool keep_work_dir = false;
  // Optional controller YAML config (--config).
  std::string controller_config;
  // Daemon log level (--log-level).
  std::string log_level = "info";
  // Agent batch period (--batch-ms).
  int agent_batch_ms = 200;
  // Extra flags appended to each daemon's command line.
  std::vector<std::string> controller_extra_args;
  std::vector<std::string> agent_extra_args;
  // More flags for one node's agent (after agent_extra_args), by index.
  std::map<int, std::vector<std::string>> agent_args_by_node;
  // How long to wait for readiness of each daemon.
  absl::Duration ready_timeout = absl::Seconds(30);
  // Overrides of the executables (default: FindPitstopBinary).
  std::string controller_path;
  std::string agent_path;
};

class LocalCluster {
 public:
  // Starts the controller and all agents and waits for readiness.
  // NotFound if a binary is missing; DeadlineExceeded / Internal (with the
  // tail of the daemon's log) if one does not become ready.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      const LocalClusterOptions& options);

  // Shutdown() if not done yet.
  ~LocalCluster();

  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // "127.0.0.1:PORT" of the controller (AgentLink and Controller services).
  std::string controller_address() const;
  int controller_port() const { return controller_port_; }
  int nodes() const { return static_cast<int>(agents_.size()); }
  // Emulated host name of node `i` (what ranks put in PITSTOP_HOST).
  const std::string& host(int i) const { return agents_[i].host; }
  // Unix socket path of node `i`'s agent (gRPC: Telemetry and the other
  // services on ingest.socket).
  const std::string& agent_socket(int i) const { return agents_[i].socket; }
  // The in-process library's shared-memory transport socket of node `i`'s
  // agent (ingest.shm_socket; what ranks put in PITSTOP_AGENT_SOCKET).
  const std::string& shm_socket(int i) const { return agents_[i].shm_socket; }
  const std::string& work_dir() const { return work_dir_; }
  // Leaves the work dir in place when the cluster stops (a failed run's
  // logs, which its error messages name).
  void KeepWorkDir() { owns_work_dir_ = false; }
  std::string database_path() const { return work_dir_ + "/controller.db"; }
  std::string controller_log() const { return work_dir_ + "/controller.log"; }
  std::string agent_log(int i) const;
  // The tuner table node i's agent writes flow plans to (--tuner-table;
  // created at its first plan).
  std::string tuner_table(int i) const;

  bool ControllerRunning();
  bool AgentRunning(int i);
  // Sends `signal` to node i's agent and reaps it if it was fatal
  // (SIGKILL / SIGTERM). InvalidArgument for a bad index.
  absl::Status KillAgent(int i, int signal = 9);
  // Starts node i's agent again (same host, socket and controller) and waits
  // for readiness. Kills the old one first if still running.
  absl::Status RestartAgent(int i);
  // Kills the controller (default SIGKILL).
  absl::Status KillController(int signal = 9);
  // Starts the controller again on the same port and database.
  absl::Status RestartController();

  // Stops agents, then the controller (SIGTERM, `grace`, SIGKILL). Returns
  // an error naming any daemon that did not exit cleanly (after SIGTERM with
  // status 0). Idempotent.
  absl::Status Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  struct Agent {
    std::string host;
    std::string socket;
    std::string shm_socket;
    std::unique_ptr<Subprocess> process;
  };

  explicit LocalCluster(const LocalClusterOptions& options)
      : options_(options) {}
  absl::Status StartController(int port);
  absl::Status StartAgent(int i);

  LocalClusterOptions options_;
  std::string work_dir_;
  bool owns_work_dir_ = false;
  std::string controller_path_;
  std::string agent_path_;
  int controller_port_ = 0;
  std::unique_ptr<Subprocess> controller_;
  std::vector<Agent> agents_;
  bool shut_down_ = false;
};

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_LOCAL_CLUSTER_H_
