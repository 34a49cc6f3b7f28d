// Prometheus metrics of pitstop-agent (prometheus-cpp), served on /metrics.
//
//   pitstop_agent_ops_total{func}                 summaries joined
//   pitstop_agent_op_bytes_total{func}
//   pitstop_agent_op_duration_seconds{func}       histogram: kernel
//       duration (GPU clock), else proxy duration, else enqueue->completion
//   pitstop_agent_bus_bandwidth_bytes_per_second{func}  last op's busbw
//   (with `comm` too when constructed with per_communicator: /metrics has no
//   credential, and a communicator's hash lets a local process claim a
//   rank of it before the job's own process does: issue #33 N7)
//   pitstop_agent_records_ingested_total, _batches_lost_total,
//   pitstop_agent_plugin_dropped (sum of the ranks' cumulative drops),
//   pitstop_agent_summaries_aggregated_total, _summaries_dropped_total,
//   pitstop_agent_connected_ranks, pitstop_agent_rank_deaths_total,
//   pitstop_agent_upstream_connected (0/1), _upstream_reconnects_total,
//   pitstop_agent_upstream_queued_summaries
//
// Thread-safe.
#ifndef PITSTOP_AGENT_AGENT_METRICS_H_
#define PITSTOP_AGENT_AGENT_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace prometheus {
class Registry;
class Exposer;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace pitstop::agent {

class AgentMetrics {
 public:
  // `per_communicator` (metrics.communicator_labels): the per-operation
  // series carry the communicator's hash as label `comm`, else only `func`.
  explicit AgentMetrics(bool per_communicator = false);
  ~AgentMetrics();

  // Serves /metrics on `address` (host:port; port 0 picks one). Internal if
  // the port cannot be bound.
  absl::Status Serve(const std::string& address);
  // The port actually bound; 0 when not serving.
  int port() const { return port_; }

  // Accounts joined summaries (one lock per call).
  void RecordSummaries(const std::vector<v1::CollectiveSummary>& summaries);

  struct Totals {
    uint64_t records_ingested = 0;
    uint64_t batches_lost = 0;
    uint64_t plugin_dropped = 0;
    uint64_t summaries_aggregated = 0;
    uint64_t summaries_dropped = 0;
    uint64_t rank_deaths = 0;
    uint64_t upstream_reconnects = 0;
    uint64_t queued_summaries = 0;
    uint32_t connected_ranks = 0;
    bool upstream_connected = false;
    // Records refused by a limit (invalid sizes, beyond the per-message
    // cap), connections refused (cap, out of descriptors), and what was
    // accepted but not delivered upstream (docs/reliability.md).
    uint64_t records_refused = 0;
    uint64_t connections_refused = 0;
    uint64_t undelivered = 0;
    // Rank connections refused for claiming another process's pid
    // (ingest.verify_pid, docs/reliability.md "The agent's sockets").
    uint64_t pid_refused = 0;
    // Claims of local processes refused (LocalTenants, docs/reliability.md
    // "Trust model"): another job, a rank another process holds, a
    // communicator of another job, the agent's tables full.
    uint64_t job_claims_refused = 0;
    uint64_t rank_claims_refused = 0;
    uint64_t comm_claims_refused = 0;
    uint64_t claim_tables_full = 0;
    uint64_t job_claims_unproven = 0;
    uint64_t job_claims_unverified = 0;
    uint64_t job_claims_quarantined = 0;
    uint64_t process_claims_over_cap = 0;
    uint64_t uid_claims_over_share = 0;
    uint64_t job_claims_uid_not_for_jobs = 0;
    uint64_t trainer_claims_refused = 0;
    uint64_t listed_claims_refused = 0;
    // Rank messages refused before parsing for their size in records
    // (message_bound.h), on either socket.
    uint64_t messages_refused = 0;
  };
  // Publishes cumulative totals (counters advance by the difference).
  void SetTotals(const Totals& totals);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  struct PerOp {
    prometheus::Counter* ops;
    prometheus::Counter* bytes;
    prometheus::Histogram* duration;
    prometheus::Gauge* busbw;
  };
  PerOp* PerOpLocked(uint64_t comm, int func)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool per_communicator_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  Mutex mu_;
  // Label sets are never removed; past this many (comm, func) pairs new
  // ones are not exported (comm is 0 without per_communicator_).
  static constexpr size_t kMaxPerOpSeries = 4096;
  std::map<std::pair<uint64_t, int>, PerOp> per_op_ ABSL_GUARDED_BY(mu_);
  Totals last_ ABSL_GUARDED_BY(mu_);
  prometheus::Family<prometheus::Counter>* ops_family_;
  prometheus::Family<prometheus::Counter>* bytes_family_;
  prometheus::Family<prometheus::Histogram>* duration_family_;
  prometheus::Family<prometheus::Gauge>* busbw_family_;
  prometheus::Counter* records_;
  prometheus::Counter* batches_lost_;
  prometheus::Gauge* plugin_dropped_;
  prometheus::Counter* aggregated_;
  prometheus::Counter* dropped_;
  prometheus::Counter* deaths_;
  prometheus::Counter* reconnects_;
  prometheus::Gauge* queued_;
  prometheus::Gauge* connected_ranks_;
  prometheus::Gauge* upstream_connected_;
  prometheus::Counter* records_refused_;
  prometheus::Counter* connections_refused_;
  prometheus::Counter* pid_refused_;
  // pitstop_agent_claims_refused_total{what="job|rank|communicator|table|unproven|quarantined|process|uid|job_uid|trainer|listed"}
  prometheus::Counter* job_claims_refused_;
  prometheus::Counter* rank_claims_refused_;
  prometheus::Counter* comm_claims_refused_;
  prometheus::Counter* claim_tables_full_;
  // {what="unproven"}: a job claim no kernel evidence backs (reported as
  // an anonymous tenant).
  prometheus::Counter* job_claims_unproven_;
  // pitstop_agent_job_claims_unverified_total: job claims believed because
  // the agent may not read the process's environ.
  prometheus::Counter* job_claims_unverified_;
  // {what="quarantined"}: processes whose job a process with stronger
  // kernel evidence took over; {what="process"}: ranks beyond one
  // process's share (ingest.max_ranks_per_process); {what="uid"}: beyond
  // one uid's (ingest.max_ranks_per_uid).
  prometheus::Counter* job_claims_quarantined_;
  prometheus::Counter* process_claims_over_cap_;
  prometheus::Counter* uid_claims_over_share_;
  // {what="job_uid"}: a job claim by environment of a uid not in
  // ingest.job_uids (reported as an anonymous tenant).
  prometheus::Counter* job_claims_uid_not_for_jobs_;
  prometheus::Counter* trainer_claims_refused_;
  // {what="listed"}: communicator records whose global_ranks listed ranks
  // their process does not hold (the entries are cut; R21-4).
  prometheus::Counter* listed_claims_refused_;
  prometheus::Counter* undelivered_;
  prometheus::Counter* messages_refused_;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_AGENT_METRICS_H_
