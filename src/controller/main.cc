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
#include "src/controller/controller_core.h"
#include "src/controller/controller_options.h"
#include "src/controller/ha/ha_controller.h"

namespace {

using pitstop::controller::ControllerOptions;

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

}  // namespace

int main(int argc, char** argv) {
  ControllerOptions options;
  pitstop::ConfigSchema schema(
      "pitstop-controller",
      "pitstop cluster controller: receives per-collective summaries from "
      "every pitstop-agent (AgentLink), detects and localises faults "
      "(straggler, comm-slow, hangs, dead processes), records them in "
      "SQLite and serves the Controller gRPC API on the same port. Every "
      "YAML key of --config has a flag (detection.window_ms -> "
      "--detection-window-ms); flags win.");
  pitstop::controller::RegisterControllerOptions(&schema, &options);
  pitstop::controller::ActionsConfig actions_config;
  pitstop::controller::RegisterActionsOptions(&schema, &actions_config);
  pitstop::controller::ha::HaOptions ha_options;
  pitstop::controller::ha::RegisterHaOptions(&schema, &ha_options);
  auto parsed = schema.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "pitstop-controller: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (*parsed == pitstop::ConfigParse::kExit) return 0;
  if (absl::Status st = options.Validate(); !st.ok()) {
    const std::string& config = schema.config_path();
    std::fprintf(stderr, "pitstop-controller: %s%s\n",
                 config.empty() ? "" : (config + ": ").c_str(),
                 std::string(st.message()).c_str());
    return 2;
  }
  if (absl::Status st = ha_options.Validate(options.listen); !st.ok()) {
    const std::string& config = schema.config_path();
    std::fprintf(stderr, "pitstop-controller: %s%s\n",
                 config.empty() ? "" : (config + ": ").c_str(),
                 std::string(st.message()).c_str());
    return 2;
  }
  auto actions_options = actions_config.ToOptions(options.db);
  if (!actions_options.ok()) {
    const std::string& config = schema.config_path();
    std::fprintf(stderr, "pitstop-controller: %s%s\n",
                 config.empty() ? "" : (config + ": ").c_str(),
                 std::string(actions_options.status().message()).c_str());
    return 2;
  }
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

  auto metrics = std::make_unique<pitstop::controller::ControllerMetrics>();
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!options.metrics_address.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(options.metrics_address);
      exposer->RegisterCollectable(metrics->registry());
    } catch (const std::exception& e) {
      // civetweb reports a bad or busy address as "null context when
      // constructing CivetServer".
      return Fail(absl::StrCat("metrics_address ", options.metrics_address,
                               ": cannot listen (bad address or port in "
                               "use?): ",
                               e.what()));
    }
  }
  pitstop::controller::ControllerCore::Options core_options;
  core_options.db_path = options.db;
  core_options.cycle_period = absl::Milliseconds(options.cycle_ms);
  core_options.node_grace = absl::Seconds(options.node_grace_s);
  core_options.agent_silence = absl::Milliseconds(options.agent_silence_ms);
  core_options.engine.default_policy = options.DefaultPolicy();
  core_options.sync.defaults = *options.DefaultSyncSettings();  // validated
  core_options.sync.straggler_min_effect = options.sync_straggler_min_effect;
  core_options.lora.defaults.set_policy(*options.DefaultLoraPolicy());
  core_options.lora.defaults.set_slow_signal(*options.ParseSlowSignal(
      "lora.slow_signal", options.lora_slow_signal));           // validated
  core_options.profiles.steps = options.trainer_profile_steps;  // validated
  core_options.profiles.capture_timeout =
      absl::Seconds(options.trainer_profile_timeout_s);
  core_options.migrate.prepare_timeout =
      absl::Seconds(std::max<uint32_t>(options.migrate_prepare_timeout_s, 1));
  core_options.migrate.switch_timeout =
      absl::Seconds(std::max<uint32_t>(options.migrate_switch_timeout_s, 1));
  core_options.migrate.switch_margin = options.migrate_switch_margin;
  core_options.migrate.resume = options.migrate_resume;
  core_options.planning.fabric = options.fabric;
  core_options.planning.suspect_share = options.planning_suspect_share;
  core_options.planning.measure_nics = options.planning_measure_nics;
  core_options.metrics = metrics.get();
  // Several controllers on etcd (docs/ha.md): the store is etcd's and the
  // core leads only while elected.
  std::unique_ptr<pitstop::controller::ha::HaController> ha;
  if (ha_options.enabled()) {
    auto created = pitstop::controller::ha::HaController::Create(
        ha_options, options.listen);
    if (!created.ok()) return Fail(std::string(created.status().message()));
    ha = std::move(*created);
    core_options.open_store = [&ha] { return ha->OpenStore(); };
    core_options.leadership = ha.get();
  }
  auto core = pitstop::controller::ControllerCore::Create(core_options);
  if (!core.ok()) return Fail(std::string(core.status().message()));
  // Open-fault gauges, hooks and the Slurm integration (docs/deploy.md).
  auto actions = pitstop::controller::DaemonActions::Start(
      core->get(), metrics->registry().get(),
      actions_config.Enabled() ? std::make_optional(std::move(*actions_options))
                               : std::nullopt);
  if (!actions.ok()) return Fail(std::string(actions.status().message()));
  auto logger = pitstop::Logger("controller");
  // Trust (docs/reliability.md): mutual TLS and/or bearer tokens turn the
  // role checks on; without either every caller may do everything, which
  // Validate() allows on loopback only unless insecure is set.
  pitstop::controller::ServerSecurity security;
  const pitstop::TlsFiles tls = options.Tls();
  // Outlives the server (gRPC asks it for the certificate at every
  // handshake); SIGHUP reloads it.
  std::unique_ptr<pitstop::ReloadableServerTls> server_tls;
  if (tls.enabled()) {
    auto loaded = pitstop::ReloadableServerTls::Create(tls);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
    server_tls = std::move(*loaded);
    security.credentials = server_tls->credentials();
  }
  pitstop::controller::Authorizer::Options auth_options;
  auth_options.enforce = tls.enabled() || !options.tokens_file.empty();
  auth_options.tokens_file = options.tokens_file;
  auto authorizer = pitstop::controller::Authorizer::Create(auth_options);
  if (!authorizer.ok()) return Fail(std::string(authorizer.status().message()));
  security.authorizer = authorizer->get();
  if (!tls.enabled()) {
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
  }
  auto server = pitstop::controller::ControllerServer::Start(
      core->get(), options.listen, security);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  (*core)->Start();
  if (!options.port_file.empty() &&
      !WritePortFile(options.port_file, (*server)->port())) {
    return Fail(
        absl::StrCat("port_file ", options.port_file, ": cannot write"));
  }
  if (ha != nullptr) ha->Start(core->get());
  logger->info(
      "ready: listening on port {} ({}, {}), store {}, metrics '{}'",
      (*server)->port(), options.listen,
      tls.enabled()
          ? "mutual TLS"
          : (options.tokens_file.empty() ? "plaintext" : "plaintext + tokens"),
      (*core)->Status().database_path(), options.metrics_address);
  int sig = 0;
  while ((sig = (*signals)->Wait(absl::Seconds(1))) == 0 || sig == SIGHUP) {
    // Counters kept by the authorizer and the etcd store, as metrics.
    metrics->SetAuthRefused((*authorizer)->denied());
    if (ha != nullptr)
      metrics->SetFencedWritesRefused(ha->fenced_writes_refused());
    if (sig != SIGHUP) continue;
    // SIGHUP: re-read the certificate, key and CA (new handshakes use them
    // at once) and the tokens file; a bad file keeps the previous set.
    if (server_tls != nullptr) {
      const pitstop::CertificateSummary before = server_tls->current();
      if (absl::Status st = server_tls->Reload(); !st.ok()) {
        logger->error("SIGHUP: {}; keeping the certificate {} (serial {})",
                      std::string(st.message()), before.subject, before.serial);
      } else {
        const pitstop::CertificateSummary now = server_tls->current();
        logger->info(
            "SIGHUP: TLS reloaded: certificate {} (serial {}, valid until "
            "{}) for new connections",
            now.subject, now.serial, now.not_after);
      }
    }
    if (absl::Status st = (*authorizer)->Reload(); !st.ok()) {
      logger->error("SIGHUP: {}; the previous tokens stay",
                    std::string(st.message()));
    } else {
      logger->info("SIGHUP: {} bearer tokens loaded", (*authorizer)->tokens());
    }
  }
  logger->info("signal {}: shutting down", sig);
  if (ha != nullptr) ha->Stop();  // resigns: a follower takes over at once
  (*server)->Shutdown(absl::Milliseconds(options.shutdown_grace_ms));
  (*core)->Stop();
  actions->reset();  // unsubscribes; stops a running hook
  logger->info("stopped ({} agent batches found the lock busy and were queued)",
               (*core)->input_stats().batches_queued);
  return 0;
}
