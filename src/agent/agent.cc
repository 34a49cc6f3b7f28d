#include "src/agent/agent.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pitstop/bounded_file.h"
#include "pitstop/logging.h"
#include "pitstop/status_macros.h"
#include "pitstop/tls.h"
#include "src/agent/node_info.h"

namespace pitstop::agent {

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(
    const AgentOptions& options, Clock* clock) {
  RETURN_IF_ERROR(ValidateAgentOptions(options, ""));
  std::unique_ptr<Agent> a(new Agent());
  a->host_ = options.host.empty() ? LocalHostName() : options.host;
  a->metrics_ =
      std::make_unique<AgentMetrics>(options.metrics_communicator_labels);
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(a->metrics_->Serve(options.metrics_address));
    a->metrics_port_ = a->metrics_->port();
  }
  AgentCoreOptions core;
  core.host = a->host_;
  core.buffer_summaries = options.buffer_summaries;
  core.tenants.max_held_ranks = options.ingest_max_ranks_per_node;
  core.tenants.max_ranks_per_uid = options.ingest_max_ranks_per_uid;
  core.tenants.max_ranks_per_process = options.ingest_max_ranks_per_process;
  ASSIGN_OR_RETURN(core.tenants.job_uids, JobUids(options));
  core.join.max_open_ops = std::max<uint32_t>(options.join_max_open_ops, 1);
  core.join.incomplete_timeout_ns =
      static_cast<int64_t>(options.join_incomplete_timeout_s) * 1'000'000'000;
  a->core_ = std::make_unique<AgentCore>(clock, core, a->metrics_.get());
  // An earlier agent that stopped with data it could not deliver left the
  // count here; it is reported on (counters.undelivered stays cumulative).
  a->undelivered_file_ = options.ingest_socket + ".undelivered";
  {
    uint64_t before = 0;
    // A count: a few bytes; anything else (a FIFO, a huge file) is ignored.
    absl::StatusOr<std::string> text =
        ReadRegularFile(a->undelivered_file_, "ingest.socket", 64);
    if (text.ok() &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &before) &&
        before > 0) {
      a->core_->AddUndelivered(before);
      Logger("agent")->warn(
          "the previous agent on this socket stopped with {} summaries/events "
          "not delivered; reported in counters.undelivered",
          before);
    }
  }
  if (const std::string shm_path = EffectiveShmSocket(options);
      !shm_path.empty()) {
    // Before the gRPC socket: a caller that sees ingest.socket accept finds
    // the shared-memory socket ready too.
    a->shm_handler_ = std::make_unique<AgentCoreHandler>(a->core_.get());
    ShmIngestOptions shm;
    shm.socket_path = shm_path;
    shm.socket_group = options.ingest_socket_group;
    shm.max_connections =
        std::max<uint32_t>(options.ingest_shm_max_connections, 1);
    shm.idle_timeout_ms =
        std::max<uint32_t>(options.ingest_shm_idle_timeout_s, 1) * 1000;
    shm.verify_pid = options.ingest_verify_pid;
    ASSIGN_OR_RETURN(a->shm_ingest_,
                     ShmIngestServer::Create(shm, a->shm_handler_.get()));
  }
  a->trainer_hub_ = std::make_unique<TrainerHub>(!options.controller.empty());
  a->trainer_service_ = std::make_unique<TrainerServiceImpl>(
      a->trainer_hub_.get(), a->core_.get(), &a->creds_);
  ASSIGN_OR_RETURN(
      a->ingest_,
      IngestServer::Create(options.ingest_socket, options.ingest_socket_group,
                           a->core_.get(), options.ingest_max_connections,
                           {a->trainer_service_.get()},
                           options.ingest_verify_pid, &a->creds_));
  if (!options.controller.empty()) {
    UpstreamOptions up;
    up.address = options.controller;
    up.tls = TlsFiles{options.tls_ca, options.tls_cert, options.tls_key};
    if (!up.tls.enabled() && !IsLoopbackAddress(up.address)) {
      Logger("agent")->warn(
          "INSECURE: controller {} is reached without TLS: anyone on the "
          "path can read this node's telemetry or impersonate the "
          "controller (set tls.ca, tls.cert, tls.key)",
          up.address);
    }
    up.batch = absl::Milliseconds(options.batch_ms);
    up.backoff_max = absl::Milliseconds(
        std::max<uint32_t>(options.upstream_backoff_max_ms, 100));
    up.trainer = a->trainer_hub_.get();
    Agent* self = a.get();
    absl::StatusOr<std::unique_ptr<MigrationPlane>> plane =
        MigrationPlane::Create(options.migration_data_plane,
                               [self](const v1::MigrationAck& ack) {
                                 if (self->upstream_) self->upstream_->Ack(ack);
                               },
                               a->core_.get(),
                               {options.migration_joiners_file, a->host_,
                                EffectiveShmSocket(options), clock});
    if (!plane.ok()) return plane.status();
    a->migration_ = std::move(*plane);
    up.migration = a->migration_.get();
    a->paths_ = std::make_unique<PathSteering>(options.tuner_table);
    up.paths = a->paths_.get();
    v1::NodeRegistration& reg = up.registration;
    reg.set_host(a->host_);
    reg.set_agent_id(absl::StrCat(a->host_, "-", getpid(), "-",
                                  absl::ToUnixNanos(clock->Now())));
    reg.set_agent_version(PITSTOP_VERSION);
    reg.set_standby(options.standby);
    reg.set_migration_data_plane(a->migration_->name());
    reg.set_boot_unix_ns(absl::ToUnixNanos(clock->Now()));
    for (auto& n : ReadNics(options.sysfs_root)) *reg.add_nics() = n;
    for (auto& g : ReadGpus("/proc")) *reg.add_gpus() = g;
    a->upstream_ = std::make_unique<UpstreamClient>(up, a->core_.get());
    a->upstream_->Start();
  }
  a->core_->PublishMetrics(false, 0);
  const absl::Duration period =
      std::min(absl::Milliseconds(options.batch_ms), absl::Seconds(1));
  Agent* self = a.get();
  a->ticker_ = std::thread([self, period] { self->RunTicker(period); });
  return a;
}

void Agent::RunTicker(absl::Duration period) {
  while (true) {
    {
      MutexLock lock(&tick_mu_);
      if (!tick_stop_) tick_cv_.WaitWithTimeout(&tick_mu_, period);
      if (tick_stop_) return;
    }
    if (upstream_ == nullptr) core_->Poll();
    // Both sockets: the shared-memory one refuses over its own cap too.
    uint64_t refused =
        shm_ingest_ != nullptr ? shm_ingest_->stats().refused : 0;
    if (ingest_ != nullptr) {
      const IngestListener::Stats l = ingest_->listener_stats();
      refused += l.refused_cap + l.refused_fds;
    }
    core_->SetConnectionsRefused(refused);
    core_->SetPidRefused(
        (ingest_ != nullptr ? ingest_->pid_refusals() : 0) +
        (shm_ingest_ != nullptr ? shm_ingest_->stats().pid_refused : 0));
    core_->SetMessagesRefused(
        (ingest_ != nullptr ? ingest_->oversized_messages() : 0) +
        (shm_ingest_ != nullptr ? shm_ingest_->stats().oversized : 0));
    core_->PublishMetrics(upstream_ != nullptr && upstream_->connected(),
                          upstream_ != nullptr ? upstream_->connects() : 0);
  }
}

void Agent::Stop() {
  {
    MutexLock lock(&tick_mu_);
    tick_stop_ = true;
    tick_cv_.SignalAll();
  }
  if (ticker_.joinable()) ticker_.join();
  // Rank streams end first, and are not reported as dead ranks.
  if (core_ != nullptr) core_->SetStopping();
  if (shm_ingest_ != nullptr) shm_ingest_->Stop();
  if (ingest_ != nullptr) ingest_->Stop();
  if (upstream_ != nullptr) upstream_->Stop();  // then flush upstream
  // Whatever the last flush could not send is lost with this process: say
  // how much (docs/reliability.md, "Lost without a count").
  if (core_ != nullptr && !undelivered_counted_) {
    undelivered_counted_ = true;
    if (const uint64_t n = core_->CountUndelivered(); n > 0) {
      Logger("agent")->warn(
          "stopping with {} summaries/lifecycle events accepted from ranks and "
          "not delivered to the controller (undelivered)",
          n);
    }
    const uint64_t total = core_->Counters().undelivered();
    if (total > 0) {
      std::ofstream(undelivered_file_, std::ios::trunc) << total << "\n";
    } else {
      std::remove(undelivered_file_.c_str());
    }
  }
}

Agent::~Agent() { Stop(); }

}  // namespace pitstop::agent
