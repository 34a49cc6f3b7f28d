#include "src/agent/agent_options.h"

#include <pwd.h>

#include <array>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pitstop/address.h"
#include "pitstop/tls.h"
#include "src/agent/upstream_client.h"

namespace pitstop::agent {

std::string ShmSocketFor(const std::string& ingest_socket) {
  constexpr std::string_view kSuffix = ".sock";
  if (ingest_socket.size() > kSuffix.size() &&
      ingest_socket.compare(ingest_socket.size() - kSuffix.size(),
                            kSuffix.size(), kSuffix) == 0) {
    return ingest_socket.substr(0, ingest_socket.size() - kSuffix.size()) +
           "-shm.sock";
  }
  return ingest_socket + "-shm";
}

std::string EffectiveShmSocket(const AgentOptions& o) {
  if (o.ingest_shm_socket == "none") return "";
  if (!o.ingest_shm_socket.empty()) return o.ingest_shm_socket;
  return ShmSocketFor(o.ingest_socket);
}

void RegisterAgentOptions(ConfigSchema* s, AgentOptions* o) {
  s->Add("ingest.socket", &o->ingest_socket,
         "Unix socket the training processes stream telemetry to");
  s->Add("ingest.socket_group", &o->ingest_socket_group,
         "Group that owns the socket (mode 0660); empty = the agent's group");
  s->Add("ingest.shm_socket", &o->ingest_shm_socket,
         "Unix socket of the in-process library's shared-memory transport "
         "(the ranks' PITSTOP_AGENT_SOCKET); empty = ingest.socket with "
         "'.sock' replaced by '-shm.sock'; 'none' = off");
  s->Add("ingest.shm_max_connections", &o->ingest_shm_max_connections,
         "Training processes served at once on ingest.shm_socket");
  s->Add("ingest.shm_idle_timeout_s", &o->ingest_shm_idle_timeout_s,
         "Disconnect a process that sent nothing for this long (s)");
  s->Add("ingest.verify_pid", &o->ingest_verify_pid,
         "Refuse a rank stream whose hello claims another pid than the "
         "connected process (SO_PEERCRED); pid namespaces are understood");
  s->Add("ingest.max_ranks_per_node", &o->ingest_max_ranks_per_node,
         "Ranks (global ranks and communicator ranks) the local processes "
         "may hold together; beyond, new claims are refused");
  s->Add("ingest.max_ranks_per_uid", &o->ingest_max_ranks_per_uid,
         "Ranks the processes of one uid may hold together, so that no user "
         "fills the node's table for the others");
  s->Add("ingest.max_ranks_per_process", &o->ingest_max_ranks_per_process,
         "Ranks one process may hold");
  s->Add("ingest.job_uids", &o->ingest_job_uids,
         "Uids (numbers or user names) whose processes may claim a job by "
         "their environment alone: the launcher's, the training accounts'. "
         "Another uid's process outside a Slurm job cgroup reports as an "
         "anonymous tenant (no job, no death). Empty = any uid (the first "
         "process to claim a job holds it)");
  s->Add("ingest.max_connections", &o->ingest_max_connections,
         "Live rank connections at once; beyond, new ones are closed at "
         "once (the libraries retry)");
  s->Add("controller", &o->controller,
         "pitstop-controller address host:port; empty = no upstream; "
         "several controllers comma-separated (the agent follows the "
         "leader)");
  s->Add("tls.ca", &o->tls_ca,
         "PEM CA file that signed the controller's certificate (mutual TLS; "
         "empty = plaintext)");
  s->Add("tls.cert", &o->tls_cert,
         "PEM client certificate of this agent: CN or SAN DNS = host, SAN "
         "URI pitstop://role/agent");
  s->Add("tls.key", &o->tls_key, "PEM private key of tls.cert");
  s->Add("host", &o->host,
         "Host name this agent registers as (default: gethostname)");
  s->Add("batch_ms", &o->batch_ms, "Upstream batch period (ms)");
  s->Add("metrics.address", &o->metrics_address,
         "Prometheus /metrics listen address host:port; empty = off; port 0 "
         "picks a free port (printed at start)");
  s->Add("metrics.communicator_labels", &o->metrics_communicator_labels,
         "Label the per-operation series (pitstop_agent_ops_total ...) by "
         "communicator hash as well as function; only where /metrics is not "
         "reachable by the node's users (a hash lets a local process claim "
         "a rank of another job's communicator first)");
  s->Add("buffer.summaries", &o->buffer_summaries,
         "Summaries held while the controller is unreachable; more are "
         "folded into per-communicator aggregates");
  s->Add("upstream.backoff_max_ms", &o->upstream_backoff_max_ms,
         "Longest wait between reconnect attempts (ms)");
  s->Add("join.max_open_ops", &o->join_max_open_ops,
         "Incomplete operations kept per rank stream");
  s->Add("join.incomplete_timeout_s", &o->join_incomplete_timeout_s,
         "Incomplete operations older than this are reported as they are (s)");
  s->Add("node.sysfs_root", &o->sysfs_root,
         "Root of the sysfs tree NICs are read from");
  s->Add("standby", &o->standby,
         "Register this node as standby capacity: a spare that migrations "
         "move ranks to (pitstopctl standby lists them)");
  s->Add("node.standby", &o->standby, "Same as standby (older key)");
  s->Add("migration.data_plane", &o->migration_data_plane,
         "How this agent takes part in migrations: none (refuse them), "
         "library (relay them to the ranks' pitstop library, which rebuilds "
         "their communicators; the ranks need PITSTOP_VIRTUALIZE_COMMS=1 and "
         "RANK) or emulated (answer for the ranks without moving anything; "
         "tests and benchmarks only)");
  s->Add("migration.joiners_file", &o->migration_joiners_file,
         "YAML file of the commands this agent may start as a migration's "
         "joiners, by job (user, command, env; never root). Empty: joiners "
         "are started by the job's scheduler (docs/migration.md)");
  s->Add("tuner.table", &o->tuner_table,
         "Shared-memory table libnccl-tuner-pitstop.so reads: the agent "
         "writes the controller's flow-plan steering there (created at the "
         "first plan; empty: $PITSTOP_TUNER_TABLE, else "
         "/run/pitstop/tuner-table)");
  s->Add("log.level", &o->log_level,
         "trace, debug, info, warn, error, critical, off");
  s->Add("log.file", &o->log_file, "Log file; empty = stderr");
  // Ranges (issue #33): 0 or huge values silently became something else
  // (an idle timeout of 0 s shed live ranks after 1 s; seconds x 1000
  // overflowed). The library heartbeats every second, so an idle timeout
  // under 3 s would shed healthy ranks.
  s->Bound({{"ingest.shm_idle_timeout_s", 3, 86'400},
            {"ingest.shm_max_connections", 1, 65'536},
            {"ingest.max_connections", 1, 65'536},
            {"ingest.max_ranks_per_node", 1, 1 << 22},
            {"ingest.max_ranks_per_uid", 1, 1 << 22},
            {"ingest.max_ranks_per_process", 1, 1 << 22},
            {"batch_ms", 1, 600'000},
            {"buffer.summaries", 1, 10'000'000},
            {"upstream.backoff_max_ms", 1, 3'600'000},
            {"join.max_open_ops", 1, 16'777'216},
            {"join.incomplete_timeout_s", 1, 86'400}});
}

}  // namespace pitstop::agent

namespace pitstop::agent {

absl::StatusOr<std::vector<uid_t>> JobUids(const AgentOptions& o) {
  std::vector<uid_t> uids;
  for (const std::string& name : o.ingest_job_uids) {
    uint32_t uid = 0;
    if (absl::SimpleAtoi(name, &uid)) {
      uids.push_back(static_cast<uid_t>(uid));
      continue;
    }
    passwd pw{};
    passwd* found = nullptr;
    std::array<char, 4096> buf;
    if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 ||
        found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key 'ingest.job_uids' (--ingest-job-uids): '", name.substr(0, 64),
          "' is neither a uid nor a user name of this node"));
    }
    uids.push_back(found->pw_uid);
  }
  return uids;
}

absl::Status ValidateAgentOptions(const AgentOptions& o,
                                  const std::string& config_path) {
  const std::string where = config_path.empty() ? "" : config_path + ": ";
  // Options built in code (tests, embedders) skip the schema's ranges.
  auto at_least_one = [&](const char* key, uint64_t v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(where, "key '", key, "' (", ConfigSchema::FlagForKey(key),
                     "): must be >= 1, got ", v));
  };
  if (auto st = at_least_one("batch_ms", o.batch_ms); !st.ok()) return st;
  if (auto st = at_least_one("buffer.summaries", o.buffer_summaries);
      !st.ok()) {
    return st;
  }
  if (auto st = at_least_one("join.max_open_ops", o.join_max_open_ops);
      !st.ok()) {
    return st;
  }
  if (auto st =
          at_least_one("ingest.max_connections", o.ingest_max_connections);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = JobUids(o).status(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, st.message()));
  }
  if (!o.host.empty()) {
    if (absl::Status st = ValidateHostName(o.host, "key 'host' (--host)");
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, st.message()));
    }
  }
  if (!o.metrics_address.empty()) {
    if (absl::Status st =
            ValidateAddress(o.metrics_address,
                            "key 'metrics.address' (--metrics-address)",
                            {.allow_port_zero = true})
                .status();
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, st.message()));
    }
  }
  if (absl::Status st = ValidateControllerAddress(o.controller); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "key 'controller' (--controller): ", st.message()));
  }
  if (!o.migration_data_plane.empty() && o.migration_data_plane != "none" &&
      o.migration_data_plane != "emulated" &&
      o.migration_data_plane != "library") {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        "key 'migration.data_plane' (--migration-data-plane): expected none, "
        "library or emulated, got '",
        o.migration_data_plane, "'"));
  }
  const TlsFiles tls{o.tls_ca, o.tls_cert, o.tls_key};
  if (tls.enabled()) {
    if (absl::Status st = ValidateTlsFiles(tls, "tls"); !st.ok()) {
      // "tls.ca: /dev/zero: ..." -> "key 'tls.ca' (--tls-ca): /dev/zero: ...".
      const std::string msg(st.message());
      const size_t colon = msg.find(": ");
      const std::string key = msg.substr(0, colon);
      return absl::InvalidArgumentError(absl::StrCat(
          where, "key '", key, "' (", ConfigSchema::FlagForKey(key),
          "): ", msg.substr(colon + 2)));
    }
  }
  return absl::OkStatus();
}

}  // namespace pitstop::agent
