// pitstop-agent as a library: metrics endpoint, ingest server, upstream
// client around one AgentCore. main.cc adds config, signals and sd_notify;
// tests and benchmarks run it in-process.
//
// Create/Stop from one owner thread.
#ifndef PITSTOP_AGENT_AGENT_H_
#define PITSTOP_AGENT_AGENT_H_

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "src/agent/agent_core.h"
#include "src/agent/agent_metrics.h"
#include "src/agent/agent_options.h"
#include "src/agent/ingest_server.h"
#include "src/agent/shm_ingest_server.h"
#include "src/agent/trainer_hub.h"
#include "src/agent/trainer_service.h"
#include "src/agent/upstream_client.h"

namespace pitstop::agent {

class Agent {
 public:
  // Starts serving. Errors: InvalidArgument (bad option), FailedPrecondition
  // (socket held by a live agent / not a socket), Internal (metrics port).
  static absl::StatusOr<std::unique_ptr<Agent>> Create(
      const AgentOptions& options, Clock* clock);
  ~Agent();

  // Graceful stop: ends rank streams, flushes upstream, closes everything.
  void Stop();

  int metrics_port() const { return metrics_port_; }
  const std::string& host() const { return host_; }
  AgentCore* core() { return core_.get(); }
  UpstreamClient* upstream() { return upstream_.get(); }
  ShmIngestServer* shm_ingest() { return shm_ingest_.get(); }
  TrainerHub* trainer_hub() { return trainer_hub_.get(); }

 private:
  Agent() = default;
  // Every metrics period: polls the joiners when there is no upstream and
  // publishes the metrics (whatever the upstream does).
  void RunTicker(absl::Duration period);
  std::string host_;
  int metrics_port_ = 0;
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<AgentCore> core_;
  // The ingest socket's SO_PEERCRED record, which trainer_service_ checks
  // its callers against (before both: they use it).
  PeerCredRegistry creds_;
  std::unique_ptr<TrainerHub> trainer_hub_;  // before ingest_: it serves it
  std::unique_ptr<TrainerServiceImpl> trainer_service_;
  std::unique_ptr<IngestServer> ingest_;
  std::unique_ptr<AgentCoreHandler> shm_handler_;
  std::unique_ptr<ShmIngestServer> shm_ingest_;
  // Before upstream_, which hands it directives.
  std::unique_ptr<MigrationPlane> migration_;
  std::unique_ptr<PathSteering> paths_;
  std::unique_ptr<UpstreamClient> upstream_;
  Mutex tick_mu_;
  CondVar tick_cv_;
  bool tick_stop_ ABSL_GUARDED_BY(tick_mu_) = false;
  bool undelivered_counted_ = false;  // Stop() thread only
  // <socket>.undelivered: what a stopped agent could not deliver, for the
  // next agent on this socket to report (counters.undelivered).
  std::string undelivered_file_;
  std::thread ticker_;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_AGENT_H_
