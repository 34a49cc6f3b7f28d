// pitstop-agent settings: YAML keys, the flags derived from them (see
// pitstop/config.h) and their defaults. docs/agent.md lists them all.
#ifndef PITSTOP_AGENT_AGENT_OPTIONS_H_
#define PITSTOP_AGENT_AGENT_OPTIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pitstop/config.h"

namespace pitstop::agent {

struct AgentOptions {
  // ingest.socket (--ingest-socket): Unix socket the ranks connect to.
  std::string ingest_socket = "/run/pitstop/agent.sock";
  // ingest.socket_group (--ingest-socket-group): group owning the socket
  // (mode 0660); empty = the agent's group.
  std::string ingest_socket_group;
  // ingest.shm_socket (--ingest-shm-socket): Unix socket of the in-process
  // library's shared-memory transport (its PITSTOP_AGENT_SOCKET). Empty =
  // next to ingest.socket (ShmSocketFor); "none" = off. ingest.socket above
  // stays the gRPC endpoint.
  std::string ingest_shm_socket;
  // ingest.shm_max_connections: processes served at once; more are refused.
  uint32_t ingest_shm_max_connections = 1024;
  // ingest.shm_idle_timeout_s: a process silent this long is disconnected
  // (the library sends a heartbeat every second and reconnects).
  uint32_t ingest_shm_idle_timeout_s = 30;
  // ingest.verify_pid (--ingest-verify-pid): refuse a stream whose hello
  // claims another pid than the connected process (SO_PEERCRED).
  bool ingest_verify_pid = true;
  // ingest.max_ranks_per_node / _per_uid / _per_process: shares of the
  // node's table of ranks local processes hold (LocalTenantsOptions,
  // docs/reliability.md "A process's share").
  uint32_t ingest_max_ranks_per_node = 1u << 20;
  uint32_t ingest_max_ranks_per_uid = 1u << 17;
  uint32_t ingest_max_ranks_per_process = 4096;
  // ingest.job_uids (--ingest-job-uids): uids (numbers or user names) whose
  // processes may claim a job by their environment alone
  // (LocalTenantsOptions::job_uids); empty = any uid.
  std::vector<std::string> ingest_job_uids;
  // ingest.max_connections: live rank connections at once; more are
  // closed at once (docs/reliability.md).
  uint32_t ingest_max_connections = 1024;
  // controller (--controller): host:port of pitstop-controller; empty = run
  // without upstream.
  std::string controller = "localhost:7070";
  // tls.ca / tls.cert / tls.key (--tls-ca ...): mutual TLS towards the
  // controller; the certificate must name `host` (CN or SAN DNS) and carry
  // the SAN URI pitstop://role/agent. Empty = plaintext.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  // host (--host): host name to register as; empty = gethostname().
  std::string host;
  // batch_ms (--batch-ms): upstream batch period.
  uint32_t batch_ms = 1000;
  // metrics.address (--metrics-address): Prometheus /metrics; empty = off.
  std::string metrics_address = "127.0.0.1:9471";  // loopback by default
  // metrics.communicator_labels (--metrics-communicator-labels): label the
  // per-operation series by communicator hash too. Off: /metrics has no
  // credential, and a hash lets a local process claim another job's rank
  // first (issue #33 N7).
  bool metrics_communicator_labels = false;
  // buffer.summaries (--buffer-summaries): summaries held while the
  // controller is unreachable; beyond that they are folded into aggregates.
  uint32_t buffer_summaries = 50'000;
  // upstream.backoff_max_ms (--upstream-backoff-max-ms): reconnect backoff cap.
  uint32_t upstream_backoff_max_ms = 5000;
  // join.max_open_ops / join.incomplete_timeout_s: RankJoinerOptions.
  uint32_t join_max_open_ops = 65536;
  uint32_t join_incomplete_timeout_s = 600;
  // node.sysfs_root (--node-sysfs-root): where /sys/class/{infiniband,net}
  // are read from (tests point it at a fake tree).
  std::string sysfs_root = "/sys";
  // standby (--standby) or node.standby (--node-standby): this node is a
  // standby spare for migrations (docs/migration.md).
  bool standby = false;
  // migration.data_plane: none (default) or emulated (tests and benchmarks:
  // the agent answers migration directives for its ranks itself).
  std::string migration_data_plane = "none";
  // migration.joiners_file (--migration-joiners-file): the operator's joiner
  // launchers by job (joiner_config.h); "" = this agent starts no joiners.
  std::string migration_joiners_file;
  // tuner.table (--tuner-table): the per-node tuner table the agent writes
  // from the controller's flow plans (docs/planning.md); "" =
  // $PITSTOP_TUNER_TABLE, else /run/pitstop/tuner-table.
  std::string tuner_table;
  // log.level / log.file.
  std::string log_level = "info";
  std::string log_file;
};

// The shared-memory socket used when ingest.shm_socket is empty: the gRPC
// socket's path with ".sock" replaced by "-shm.sock" (else "-shm"
// appended): /run/pitstop/agent.sock -> /run/pitstop/agent-shm.sock, the
// library's default.
std::string ShmSocketFor(const std::string& ingest_socket);
// The effective shared-memory socket of `options` ("" when off).
std::string EffectiveShmSocket(const AgentOptions& options);

// Binds every field of `options` to its key in `schema`.
void RegisterAgentOptions(ConfigSchema* schema, AgentOptions* options);

// ingest.job_uids as uids (a user name is looked up); InvalidArgument
// naming the key and the value that is neither.
absl::StatusOr<std::vector<uid_t>> JobUids(const AgentOptions& options);

// Checks values the schema cannot (ranges, address form). InvalidArgument
// "key 'batch_ms' (--batch-ms): must be >= 1, got 0", prefixed with
// `config_path` when one was given (the value may come from it).
absl::Status ValidateAgentOptions(const AgentOptions& options,
                                  const std::string& config_path);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_AGENT_OPTIONS_H_
