// pitstop-controller: joins the telemetry of all agents, detects and
// localises faults, keeps them in SQLite and serves the Controller API.
// See docs/controller.md.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "pitstop/config.h"
#include "pitstop/logging.h"
#include "pitstop/signals.h"
#include "pitstop/tls.h"
#include "pitstop/tls_reloader.h"
#include "prometheus/exposer.h"
#include "src/controller/actions/actions_config.h"
#include "src/controller/actions/daemon_actions.h"
#include "src/controller/api/authorizer.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/controller_options.h"
#include "src/controller/ha/ha_controller.h"
#include "src/controller/migration/migration_metrics.h"

namespace {

namespace pc = pitstop::controller;

int Fail(const std::string& what) {
  std::fprintf(stderr, "pitstop-controller: %s\n", what.c_str());
  return 1;
}

// Writes "<port>\n" atomically (temp file + rename): the readiness signal.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Everything the command line and --config say.
struct Config {
  pc::ControllerOptions options;
  pc::ActionsConfig actions;
  pc::ha::HaOptions ha;
  std::optional<pc::FaultActions::Options> actions_options;
};

// Parses and validates the flags; 0 to go on, else the exit status (errors
// printed naming the config file).
int ParseConfig(int argc, char** argv, Config* c) {
  pitstop::ConfigSchema schema(
      "pitstop-controller",
      "pitstop cluster controller: receives per-collective summaries from "
      "every pitstop-agent (AgentLink), detects and localises faults "
      "(straggler, comm-slow, hangs, dead processes), records them in "
      "SQLite and serves the Controller gRPC API on the same port. Every "
      "YAML key of --config has a flag (detection.window_ms -> "
      "--detection-window-ms); flags win.");
  pc::RegisterControllerOptions(&schema, &c->options);
  pc::RegisterActionsOptions(&schema, &c->actions);
  pc::ha::RegisterHaOptions(&schema, &c->ha);
  auto parsed = schema.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "pitstop-controller: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (*parsed == pitstop::ConfigParse::kExit) return -1;
  auto invalid = [&schema](const absl::Status& st) {
    const std::string& config = schema.config_path();
    std::fprintf(stderr, "pitstop-controller: %s%s\n",
                 config.empty() ? "" : (config + ": ").c_str(),
                 std::string(st.message()).c_str());
    return 2;
  };
  if (absl::Status st = c->options.Validate(); !st.ok()) return invalid(st);
  if (absl::Status st = c->ha.Validate(c->options.listen); !st.ok()) {
    return invalid(st);
  }
  auto actions = c->actions.ToOptions(c->options.db);
  if (!actions.ok()) return invalid(actions.status());
  if (c->actions.Enabled()) c->actions_options = std::move(*actions);
  return 0;
}

pc::Controller::Options ControllerOptionsOf(const pc::ControllerOptions& o,
                                            pc::ControllerMetrics* metrics) {
  pc::Controller::Options co;
  co.db_path = o.db;
  co.cycle_period = absl::Milliseconds(o.cycle_ms);
  co.node_grace = absl::Seconds(o.node_grace_s);
  co.agent_silence = absl::Milliseconds(o.agent_silence_ms);
  co.engine.default_policy = o.DefaultPolicy();
  co.sync.defaults = *o.DefaultSyncSettings();  // validated
  co.sync.straggler_min_effect = o.sync_straggler_min_effect;
  co.lora.defaults.set_policy(*o.DefaultLoraPolicy());
  co.lora.defaults.set_slow_signal(
      *o.ParseSlowSignal("lora.slow_signal", o.lora_slow_signal));  // validated
  co.profiles.steps = o.trainer_profile_steps;                      // validated
  co.profiles.capture_timeout = absl::Seconds(o.trainer_profile_timeout_s);
  co.migrate.prepare_timeout =
      absl::Seconds(std::max<uint32_t>(o.migrate_prepare_timeout_s, 1));
  co.migrate.switch_timeout =
      absl::Seconds(std::max<uint32_t>(o.migrate_switch_timeout_s, 1));
  co.migrate.switch_margin = o.migrate_switch_margin;
  co.migrate.resume = o.migrate_resume;
  co.planning.fabric = o.fabric;
  co.planning.suspect_share = o.planning_suspect_share;
  co.planning.measure_nics = o.planning_measure_nics;
  co.metrics = metrics;
  return co;
}

// The metrics endpoint; civetweb reports a bad or busy address as "null
// context when constructing CivetServer".
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartExposer(
    const std::string& address, pc::ControllerMetrics* metrics) {
  if (address.empty()) return nullptr;
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(address);
    exposer->RegisterCollectable(metrics->registry());
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "metrics_address ", address,
        ": cannot listen (bad address or port in use?): ", e.what()));
  }
}

// Trust (docs/reliability.md): mutual TLS and/or bearer tokens turn the role
// checks on; without either every caller may do everything, which
// Validate() allows on loopback only unless insecure is set. The TLS
// credentials outlive the server (gRPC asks them for the certificate at
// every handshake); SIGHUP reloads them and the tokens.
struct Trust {
  std::unique_ptr<pitstop::ReloadableServerTls> tls;
  std::unique_ptr<pc::Authorizer> authorizer;
  pc::ServerSecurity security;
};

absl::StatusOr<Trust> SetUpTrust(const pc::ControllerOptions& options) {
  Trust t;
  const pitstop::TlsFiles tls = options.Tls();
  if (tls.enabled()) {
    auto loaded = pitstop::ReloadableServerTls::Create(tls);
    if (!loaded.ok()) return loaded.status();
    t.tls = std::move(*loaded);
    t.security.credentials = t.tls->credentials();
  }
  pc::Authorizer::Options auth_options;
  auth_options.enforce = tls.enabled() || !options.tokens_file.empty();
  auth_options.tokens_file = options.tokens_file;
  auto authorizer = pc::Authorizer::Create(auth_options);
  if (!authorizer.ok()) return authorizer.status();
  t.authorizer = std::move(*authorizer);
  t.security.authorizer = t.authorizer.get();
  auto logger = pitstop::Logger("controller");
  if (tls.enabled()) return t;
  if (!pitstop::IsLoopbackAddress(options.listen)) {
    logger->critical(
        "INSECURE: listening on {} without TLS (--insecure): anyone who "
        "can reach this port can register as any host, resolve faults, "
        "drain nodes and change policies{}",
        options.listen,
        options.tokens_file.empty() ? ""
                                    : "; bearer tokens travel in clear text");
  } else if (options.tokens_file.empty()) {
    logger->info(
        "no TLS and no tokens: every local caller may do everything "
        "(loopback only)");
  }
  return t;
}

// SIGHUP: re-read the certificate, key and CA (new handshakes use them at
// once) and the tokens file; a bad file keeps the previous set.
void Reload(Trust* t) {
  auto logger = pitstop::Logger("controller");
  if (t->tls != nullptr) {
    const pitstop::CertificateSummary before = t->tls->current();
    if (absl::Status st = t->tls->Reload(); !st.ok()) {
      logger->error("SIGHUP: {}; keeping the certificate {} (serial {})",
                    std::string(st.message()), before.subject, before.serial);
    } else {
      const pitstop::CertificateSummary now = t->tls->current();
      logger->info(
          "SIGHUP: TLS reloaded: certificate {} (serial {}, valid until "
          "{}) for new connections",
          now.subject, now.serial, now.not_after);
    }
  }
  if (absl::Status st = t->authorizer->Reload(); !st.ok()) {
    logger->error("SIGHUP: {}; the previous tokens stay",
                  std::string(st.message()));
  } else {
    logger->info("SIGHUP: {} bearer tokens loaded", t->authorizer->tokens());
  }
}

// Until SIGTERM/SIGINT: counters kept by the authorizer and the etcd store
// published as metrics once a second; SIGHUP reloads the trust files.
// Returns the signal.
int Serve(pitstop::ShutdownSignals* signals, pc::ControllerMetrics* metrics,
          pc::ha::HaController* ha, Trust* trust) {
  int sig = 0;
  while ((sig = signals->Wait(absl::Seconds(1))) == 0 || sig == SIGHUP) {
    metrics->SetAuthRefused(trust->authorizer->denied());
    if (ha != nullptr) {
      metrics->SetFencedWritesRefused(ha->fenced_writes_refused());
    }
    if (sig == SIGHUP) Reload(trust);
  }
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (int exit = ParseConfig(argc, argv, &cfg); exit != 0) {
    return exit < 0 ? 0 : exit;
  }
  const pc::ControllerOptions& options = cfg.options;
  pitstop::LoggingOptions log;
  log.level = options.log_level;
  log.file = options.log_file;
  log.program = "pitstop-controller";
  if (auto st = pitstop::SetupLogging(log); !st.ok()) {
    std::fprintf(stderr, "pitstop-controller: log_level: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  auto signals = pitstop::ShutdownSignals::Create();
  if (!signals.ok()) return Fail(signals.status().ToString());
  auto metrics = std::make_unique<pc::ControllerMetrics>();
  auto exposer = StartExposer(options.metrics_address, metrics.get());
  if (!exposer.ok()) return Fail(std::string(exposer.status().message()));
  pc::Controller::Options co = ControllerOptionsOf(options, metrics.get());
  // Migrations and policy actions (docs/migration.md, "Metrics"); they
  // outlive the controller.
  pc::MigrationMetrics migration_metrics(metrics->registry().get());
  pc::PolicyActionMetrics policy_actions(metrics->registry().get());
  co.migrate.events = &migration_metrics;
  co.policy_actions = &policy_actions;
  // Several controllers on etcd (docs/ha.md): the store is etcd's and the
  // controller leads only while elected.
  std::unique_ptr<pc::ha::HaController> ha;
  if (cfg.ha.enabled()) {
    auto created = pc::ha::HaController::Create(cfg.ha, options.listen);
    if (!created.ok()) return Fail(std::string(created.status().message()));
    ha = std::move(*created);
    co.open_store = [&ha] { return ha->OpenStore(); };
    co.leadership = ha.get();
  }
  auto controller = pc::Controller::Create(co);
  if (!controller.ok()) return Fail(std::string(controller.status().message()));
  pc::Controller* c = controller->get();
  // Open-fault gauges, hooks and the Slurm integration (docs/deploy.md).
  auto actions = pc::DaemonActions::Start(
      &c->faults(),
      [c](const std::string& job) { return c->ingest().JobPolicy(job); },
      metrics->registry().get(), std::move(cfg.actions_options));
  if (!actions.ok()) return Fail(std::string(actions.status().message()));
  auto trust = SetUpTrust(options);
  if (!trust.ok()) return Fail(std::string(trust.status().message()));
  auto server = pc::ControllerServer::Start(c, options.listen, trust->security);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  c->Start();
  if (!options.port_file.empty() &&
      !WritePortFile(options.port_file, (*server)->port())) {
    return Fail(
        absl::StrCat("port_file ", options.port_file, ": cannot write"));
  }
  if (ha != nullptr) ha->Start(c);
  auto logger = pitstop::Logger("controller");
  logger->info(
      "ready: listening on port {} ({}, {}), store {}, metrics '{}'",
      (*server)->port(), options.listen,
      options.Tls().enabled()
          ? "mutual TLS"
          : (options.tokens_file.empty() ? "plaintext" : "plaintext + tokens"),
      c->Status().database_path(), options.metrics_address);
  const int sig = Serve(signals->get(), metrics.get(), ha.get(), &*trust);
  logger->info("signal {}: shutting down", sig);
  if (ha != nullptr) ha->Stop();  // resigns: a follower takes over at once
  (*server)->Shutdown(absl::Milliseconds(options.shutdown_grace_ms));
  c->Stop();
  actions->reset();  // unsubscribes; stops a running hook
  logger->info("stopped ({} agent batches found the lock busy and were queued)",
               c->input_stats().batches_queued);
  return 0;
}
