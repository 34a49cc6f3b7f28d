#include "src/agent/agent_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "pitstop/v1/common.pb.h"

namespace pitstop::agent {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

AgentMetrics::AgentMetrics(bool per_communicator)
    : per_communicator_(per_communicator),
      registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  ops_family_ = &BuildCounter()
                     .Name("pitstop_agent_ops_total")
                     .Help(
                         "Operations joined, per function (and communicator "
                         "with metrics.communicator_labels)")
                     .Register(r);
  bytes_family_ = &BuildCounter()
                       .Name("pitstop_agent_op_bytes_total")
                       .Help("Bytes of joined operations")
                       .Register(r);
  duration_family_ =
      &BuildHistogram()
           .Name("pitstop_agent_op_duration_seconds")
           .Help(
               "Operation duration: GPU kernel, else proxy, else "
               "enqueue to completion")
           .Register(r);
  busbw_family_ = &BuildGauge()
                       .Name("pitstop_agent_bus_bandwidth_bytes_per_second")
                       .Help(
                           "Bus bandwidth of the last operation (NCCL's "
                           "definition)")
                       .Register(r);
  auto counter = [&](const char* name, const char* help) {
    return &BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  auto gauge = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  records_ = counter("pitstop_agent_records_ingested_total",
                     "Telemetry records received from ranks");
  batches_lost_ = counter("pitstop_agent_batches_lost_total",
                          "Gaps in the ranks' batch sequence numbers");
  plugin_dropped_ = gauge("pitstop_agent_plugin_dropped",
                          "Events the in-process libraries dropped "
                          "(cumulative, as they report)");
  aggregated_ = counter("pitstop_agent_summaries_aggregated_total",
                        "Summaries folded into aggregates (buffer full)");
  dropped_ = counter("pitstop_agent_summaries_dropped_total",
                     "Summaries discarded by the agent");
  deaths_ = counter("pitstop_agent_rank_deaths_total",
                    "Rank streams that ended without goodbye");
  reconnects_ = counter("pitstop_agent_upstream_reconnects_total",
                        "Connections made to the controller");
  queued_ = gauge("pitstop_agent_upstream_queued_summaries",
                  "Summaries waiting to be sent upstream");
  connected_ranks_ =
      gauge("pitstop_agent_connected_ranks", "Rank streams connected now");
  upstream_connected_ = gauge("pitstop_agent_upstream_connected",
                              "1 while the controller stream is up");
  records_refused_ =
      counter("pitstop_agent_records_refused_total",
              "Rank records dropped by a limit (invalid sizes, more than "
              "65536 records in one message)");
  connections_refused_ =
      counter("pitstop_agent_connections_refused_total",
              "Rank connections closed at once on either socket "
              "(ingest.max_connections or ingest.shm_max_connections "
              "reached, or out of file descriptors)");
  pid_refused_ = counter(
      "pitstop_agent_pid_refused_total",
      "Rank connections refused: their hello claimed another process's pid "
      "than the connected one (SO_PEERCRED, ingest.verify_pid)");
  auto& claims =
      prometheus::BuildCounter()
          .Name("pitstop_agent_claims_refused_total")
          .Help(
              "Local processes' claims refused (the agent trusts the "
              "kernel, not the message): a job the process does not "
              "belong to, a rank another process holds, a communicator "
              "of another job, the agent's tables full or a process's or "
              "uid's share of them, a trainer's "
              "step report for a job or global rank its process may not "
              "report for, or a communicator listing global ranks of "
              "ranks its process does not hold")
          .Register(*registry_);
  job_claims_refused_ = &claims.Add({{"what", "job"}});
  rank_claims_refused_ = &claims.Add({{"what", "rank"}});
  comm_claims_refused_ = &claims.Add({{"what", "communicator"}});
  claim_tables_full_ = &claims.Add({{"what", "table"}});
  job_claims_unproven_ = &claims.Add({{"what", "unproven"}});
  job_claims_quarantined_ = &claims.Add({{"what", "quarantined"}});
  process_claims_over_cap_ = &claims.Add({{"what", "process"}});
  uid_claims_over_share_ = &claims.Add({{"what", "uid"}});
  job_claims_uid_not_for_jobs_ = &claims.Add({{"what", "job_uid"}});
  trainer_claims_refused_ = &claims.Add({{"what", "trainer"}});
  listed_claims_refused_ = &claims.Add({{"what", "listed"}});
  job_claims_unverified_ = counter(
      "pitstop_agent_job_claims_unverified_total",
      "Job claims of local processes believed unchecked: the agent may not "
      "read their environ (another uid; give the agent CAP_SYS_PTRACE) and "
      "no Slurm cgroup names their job");
  messages_refused_ = counter(
      "pitstop_agent_messages_refused_total",
      "Rank messages refused before parsing: more records and communicator "
      "events than a batch of the library holds (the stream or connection "
      "is ended)");
  undelivered_ = counter("pitstop_agent_undelivered_total",
                         "Summaries and lifecycle events accepted and not "
                         "delivered to the controller");
}

AgentMetrics::~AgentMetrics() = default;

absl::Status AgentMetrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? 0 : ports[0];
  return absl::OkStatus();
}

AgentMetrics::PerOp* AgentMetrics::PerOpLocked(uint64_t comm, int func) {
  // Without communicator labels every communicator's operations of one
  // function are one series: nothing on /metrics names a communicator.
  if (!per_communicator_) comm = 0;
  auto it = per_op_.find({comm, func});
  if (it != per_op_.end()) return &it->second;
  if (per_op_.size() >= kMaxPerOpSeries) return nullptr;
  std::map<std::string, std::string> labels = {
      {"func", v1::CollFunc_Name(static_cast<v1::CollFunc>(func))}};
  if (per_communicator_) labels["comm"] = absl::StrCat("0x", absl::Hex(comm));
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
  PerOp p{&ops_family_->Add(labels), &bytes_family_->Add(labels),
          &duration_family_->Add(labels, kBuckets),
          &busbw_family_->Add(labels)};
  return &per_op_.emplace(std::make_pair(comm, func), p).first->second;
}

void AgentMetrics::RecordSummaries(
    const std::vector<v1::CollectiveSummary>& summaries) {
  MutexLock lock(&mu_);
  for (const v1::CollectiveSummary& s : summaries) {
    PerOp* pp = PerOpLocked(s.comm_hash(), s.func());
    if (pp == nullptr) continue;  // series cap reached
    PerOp& p = *pp;
    p.ops->Increment();
    p.bytes->Increment(static_cast<double>(s.bytes()));
    uint64_t ns = s.kernel_duration_ns();
    if (ns == 0) ns = s.proxy_duration_ns();
    if (ns == 0 && s.completion_cpu_ns() > s.enqueue_cpu_ns() &&
        s.enqueue_cpu_ns() != 0) {
      ns = s.completion_cpu_ns() - s.enqueue_cpu_ns();
    }
    if (ns != 0) p.duration->Observe(ns * 1e-9);
    if (s.bus_bandwidth_bps() > 0) p.busbw->Set(s.bus_bandwidth_bps());
  }
}

void AgentMetrics::SetTotals(const Totals& t) {
  MutexLock lock(&mu_);
  auto advance = [](prometheus::Counter* c, uint64_t now, uint64_t before) {
    if (now > before) c->Increment(static_cast<double>(now - before));
  };
  advance(records_, t.records_ingested, last_.records_ingested);
  advance(batches_lost_, t.batches_lost, last_.batches_lost);
  advance(aggregated_, t.summaries_aggregated, last_.summaries_aggregated);
  advance(dropped_, t.summaries_dropped, last_.summaries_dropped);
  advance(deaths_, t.rank_deaths, last_.rank_deaths);
  advance(reconnects_, t.upstream_reconnects, last_.upstream_reconnects);
  advance(records_refused_, t.records_refused, last_.records_refused);
  advance(connections_refused_, t.connections_refused,
          last_.connections_refused);
  advance(undelivered_, t.undelivered, last_.undelivered);
  advance(pid_refused_, t.pid_refused, last_.pid_refused);
  advance(job_claims_refused_, t.job_claims_refused, last_.job_claims_refused);
  advance(rank_claims_refused_, t.rank_claims_refused,
          last_.rank_claims_refused);
  advance(comm_claims_refused_, t.comm_claims_refused,
          last_.comm_claims_refused);
  advance(claim_tables_full_, t.claim_tables_full, last_.claim_tables_full);
  advance(job_claims_unproven_, t.job_claims_unproven,
          last_.job_claims_unproven);
  advance(job_claims_unverified_, t.job_claims_unverified,
          last_.job_claims_unverified);
  advance(job_claims_quarantined_, t.job_claims_quarantined,
          last_.job_claims_quarantined);
  advance(process_claims_over_cap_, t.process_claims_over_cap,
          last_.process_claims_over_cap);
  advance(uid_claims_over_share_, t.uid_claims_over_share,
          last_.uid_claims_over_share);
  advance(job_claims_uid_not_for_jobs_, t.job_claims_uid_not_for_jobs,
          last_.job_claims_uid_not_for_jobs);
  advance(trainer_claims_refused_, t.trainer_claims_refused,
          last_.trainer_claims_refused);
  advance(listed_claims_refused_, t.listed_claims_refused,
          last_.listed_claims_refused);
  advance(messages_refused_, t.messages_refused, last_.messages_refused);
  plugin_dropped_->Set(static_cast<double>(t.plugin_dropped));
  queued_->Set(static_cast<double>(t.queued_summaries));
  connected_ranks_->Set(t.connected_ranks);
  upstream_connected_->Set(t.upstream_connected ? 1 : 0);
  last_ = t;
}

}  // namespace pitstop::agent
