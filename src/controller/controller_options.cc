#include "src/controller/controller_options.h"

#include <sys/stat.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "pitstop/address.h"
#include "pitstop/tls.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/trainers/sync_policy.h"

namespace pitstop::controller {
namespace {

absl::Status KeyError(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "key '", key, "' (",
      ConfigSchema::FlagForKey(std::string_view(key.data(), key.size())),
      "): ", what));
}

// Why an existing `path` cannot be the database, or "" (absent: SQLite
// creates it). A FIFO, device or directory made SQLite fail with an I/O
// error that named no flag.
std::string NotADatabaseFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a special file";
  return absl::StrCat(path, ": not a regular file (", kind, ")");
}

// Ranges of the daemon's own timings (issue #33); the policy defaults are
// held to JobPolicy's ranges by Validate().
void BoundControllerOptions(ConfigSchema* s) {
  s->Bound({{"detection.cycle_ms", 1, 600'000},
            {"node_grace_s", 1, 86'400},
            {"shutdown_grace_ms", 0, 600'000},
            {"agent_silence_ms", 0, 3'600'000},
            {"migrate.prepare_timeout_s", 1, 86'400},
            {"migrate.switch_timeout_s", 1, 86'400}});
}

}  // namespace

TlsFiles ControllerOptions::Tls() const {
  return TlsFiles{tls_ca, tls_cert, tls_key};
}

absl::Status ControllerOptions::ValidateTrust() const {
  const TlsFiles tls = Tls();
  if (tls.enabled()) {
    // Names the key: "tls.cert: cannot read ...".
    if (absl::Status s = ValidateTlsFiles(tls, "tls"); !s.ok()) {
      const std::string msg(s.message());
      const size_t colon = msg.find(": ");
      return KeyError(msg.substr(0, colon), msg.substr(colon + 2));
    }
  } else if (!insecure && !IsLoopbackAddress(listen)) {
    return KeyError(
        "listen",
        absl::StrCat(listen,
                     " is not a loopback address: without TLS anyone who "
                     "can reach it could speak for any agent or operator. "
                     "Configure tls.ca, tls.cert and tls.key (mutual TLS, "
                     "tools/gen-dev-certs.sh makes a test set), or pass "
                     "--insecure to accept that"));
  }
  return absl::OkStatus();
}

absl::Status ControllerOptions::Validate() const {
  // SQLite opens "" as a private temporary database: faults, drains and
  // policies would silently vanish at the next restart.
  if (db.empty()) {
    return KeyError("db",
                    "must name the database file (an empty path would be a "
                    "temporary database, lost at restart)");
  }
  if (std::string why = NotADatabaseFile(db); !why.empty()) {
    return KeyError("db", why);
  }
  if (listen.empty()) return KeyError("listen", "must be host:port");
  // gRPC would bind port 99999 as 34463, civetweb 999.1.1.1 as 231.1.1.1.
  if (absl::Status s =
          ValidateAddress(listen, "key 'listen' (--listen)",
                          {.allow_port_zero = true, .allow_unix = true})
              .status();
      !s.ok()) {
    return s;
  }
  if (!metrics_address.empty()) {
    if (absl::Status s =
            ValidateAddress(metrics_address,
                            "key 'metrics_address' (--metrics-address)",
                            {.allow_port_zero = true})
                .status();
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ValidateTrust(); !s.ok()) return s;
  if (cycle_ms == 0) return KeyError("detection.cycle_ms", "must be > 0");
  if (!(planning_suspect_share > 0 && planning_suspect_share < 1)) {
    return KeyError("planning.suspect_share", "must be in (0, 1)");
  }
  if (mode != "observe" && mode != "act") {
    return KeyError("detection.mode",
                    absl::StrCat("expected observe or act, got '", mode, "'"));
  }
  const std::pair<const char*, double> doubles[] = {
      {"detection.min_effect", min_effect},
      {"detection.hang_timeout_multiplier", hang_timeout_multiplier},
      {"detection.hang_confirm_multiplier", hang_confirm_multiplier},
      {"detection.z_threshold", z_threshold}};
  for (const auto& [key, v] : doubles) {
    if (!std::isfinite(v) || v < 0) {
      return KeyError(key,
                      absl::StrCat("must be a finite number >= 0, got ", v));
    }
  }
  if (!std::isfinite(sync_straggler_min_effect) ||
      sync_straggler_min_effect <= 0) {
    return KeyError("sync.straggler_min_effect",
                    absl::StrCat("must be a finite number > 0, got ",
                                 sync_straggler_min_effect));
  }
  if (trainer_profile_steps > 64) {
    return KeyError("trainer_profile.steps",
                    absl::StrCat("at most 64, got ", trainer_profile_steps));
  }
  if (trainer_profile_timeout_s < 1 || trainer_profile_timeout_s > 600) {
    return KeyError(
        "trainer_profile.timeout_s",
        absl::StrCat("must be in [1, 600], got ", trainer_profile_timeout_s));
  }
  if (absl::StatusOr<v1::SyncSettings> s = DefaultSyncSettings(); !s.ok()) {
    return s.status();
  }
  if (absl::StatusOr<v1::LoraPolicy> p = DefaultLoraPolicy(); !p.ok()) {
    return p.status();
  }
  // ValidatePolicy names the JobPolicy field ("policy.persistence_n: ...");
  // the YAML key is "detection.<field>".
  if (absl::Status s = ValidatePolicy(DefaultPolicy()); !s.ok()) {
    const std::string msg =
        absl::StrReplaceAll(s.message(), {{"policy.", "detection."}});
    const size_t colon = msg.find(": ");
    if (colon == std::string::npos) return KeyError("detection", msg);
    return KeyError(msg.substr(0, colon), msg.substr(colon + 2));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::SlowSignal> ControllerOptions::ParseSlowSignal(
    const char* key, const std::string& v) {
  if (v == "steps_or_faults") return v1::SLOW_SIGNAL_STEPS_OR_FAULTS;
  if (v == "confirmed_faults") return v1::SLOW_SIGNAL_CONFIRMED_FAULTS;
  return KeyError(key, absl::StrCat("expected steps_or_faults or "
                                    "confirmed_faults, got '",
                                    v, "'"));
}

absl::StatusOr<v1::LoraPolicy> ControllerOptions::DefaultLoraPolicy() const {
  if (absl::StatusOr<v1::SlowSignal> s =
          ParseSlowSignal("lora.slow_signal", lora_slow_signal);
      !s.ok()) {
    return s.status();
  }
  if (lora_policy == "off") return v1::LORA_POLICY_OFF;
  if (lora_policy == "advise") return v1::LORA_POLICY_ADVISE;
  if (lora_policy == "auto") return v1::LORA_POLICY_AUTO;
  return KeyError("lora.policy", absl::StrCat("expected off, advise or auto, "
                                              "got '",
                                              lora_policy, "'"));
}

absl::StatusOr<v1::SyncSettings> ControllerOptions::DefaultSyncSettings()
    const {
  v1::SyncSettings s;
  if (sync_policy == "off") {
    s.set_policy(v1::SYNC_POLICY_OFF);
  } else if (sync_policy == "advise") {
    s.set_policy(v1::SYNC_POLICY_ADVISE);
  } else if (sync_policy == "auto") {
    s.set_policy(v1::SYNC_POLICY_AUTO);
  } else {
    return KeyError("sync.policy", absl::StrCat("expected off, advise or "
                                                "auto, got '",
                                                sync_policy, "'"));
  }
  if (sync_local_mode == "timed") {
    s.set_local_mode(v1::SYNC_MODE_TIMED);
  } else if (sync_local_mode == "local_sgd") {
    s.set_local_mode(v1::SYNC_MODE_LOCAL_SGD);
  } else {
    return KeyError("sync.local_mode",
                    absl::StrCat("expected timed or local_sgd, got '",
                                 sync_local_mode, "'"));
  }
  const std::pair<const char*, uint32_t> positive[] = {
      {"sync.slow_persist_s", sync_slow_persist_s},
      {"sync.healthy_s", sync_healthy_s},
      {"sync.period_ms", sync_period_ms},
      {"sync.period_steps", sync_period_steps}};
  for (const auto& [key, v] : positive) {
    if (v == 0) return KeyError(key, "must be > 0");
  }
  s.set_slow_persist_s(sync_slow_persist_s);
  s.set_healthy_s(sync_healthy_s);
  s.set_period_ms(sync_period_ms);
  s.set_period_steps(sync_period_steps);
  s.set_timed_period_steps(sync_timed_period_steps);
  s.set_apply_lead_steps(5);
  absl::StatusOr<v1::SlowSignal> signal =
      ParseSlowSignal("sync.slow_signal", sync_slow_signal);
  if (!signal.ok()) return signal.status();
  s.set_slow_signal(*signal);
  if (absl::Status st = ValidateSyncSettings(s); !st.ok()) {
    const std::string msg =
        absl::StrReplaceAll(st.message(), {{"settings.", "sync."}});
    const size_t colon = msg.find(": ");
    if (colon == std::string::npos) return KeyError("sync", msg);
    return KeyError(msg.substr(0, colon), msg.substr(colon + 2));
  }
  return s;
}

v1::JobPolicy ControllerOptions::DefaultPolicy() const {
  v1::JobPolicy p;
  p.set_mode(mode == "act" ? v1::POLICY_MODE_ACT : v1::POLICY_MODE_OBSERVE);
  p.set_window_ms(window_ms);
  p.set_persistence_n(persistence_n);
  p.set_persistence_m(persistence_m);
  p.set_min_effect(min_effect);
  p.set_hang_timeout_multiplier(hang_timeout_multiplier);
  p.set_hang_timeout_floor_ms(hang_timeout_floor_ms);
  p.set_hang_confirm_multiplier(hang_confirm_multiplier);
  p.set_warmup_collectives(warmup_collectives);
  p.set_z_threshold(z_threshold);
  return p;
}

void RegisterControllerOptions(ConfigSchema* s, ControllerOptions* o) {
  s->Add("listen", &o->listen,
         "gRPC address for AgentLink and Controller (127.0.0.1:0 picks a "
         "free port; use the cluster interface so agents can connect)");
  s->Add("tls.ca", &o->tls_ca,
         "PEM file of the CA that signs agent, operator and scheduler "
         "certificates (mutual TLS; re-read every 10 s)");
  s->Add("tls.cert", &o->tls_cert,
         "PEM certificate (chain) of this controller; its SANs must name "
         "the address agents and pitstopctl dial");
  s->Add("tls.key", &o->tls_key, "PEM private key of tls.cert");
  s->Add("auth.tokens_file", &o->tokens_file,
         "bearer tokens, one 'TOKEN ROLE NAME' per line (roles: viewer, "
         "operator, scheduler, agent); re-read on SIGHUP");
  s->Add("insecure", &o->insecure,
         "allow a non-loopback listen address without TLS (anyone who can "
         "reach the port may then act as any agent or operator)");
  s->Add("port_file", &o->port_file,
         "write the bound port and a newline here once listening");
  s->Add("db", &o->db, "SQLite database of faults, drains and policies");
  s->Add("metrics_address", &o->metrics_address,
         "Prometheus /metrics address; empty disables");
  s->Add("log_level", &o->log_level,
         "trace, debug, info, warn, error, critical or off");
  s->Add("log_file", &o->log_file, "log file; empty = stderr");
  s->Add("detection.cycle_ms", &o->cycle_ms, "detection cycle period (ms)");
  s->Add("node_grace_s", &o->node_grace_s,
         "seconds without an agent stream before a node is UNREACHABLE");
  s->Add("agent_silence_ms", &o->agent_silence_ms,
         "an agent stream silent this long (ms) counts as lost for "
         "detection: its ranks are not judged; 0 disables");
  s->Add("shutdown_grace_ms", &o->shutdown_grace_ms,
         "on SIGTERM, time given to open calls before they are cancelled");
  s->Add("detection.mode", &o->mode,
         "default policy mode: observe (record and notify) or act (actions "
         "such as the Slurm drain may run)");
  s->Add("detection.window_ms", &o->window_ms,
         "default policy: detection window (ms); 0 = 1000");
  s->Add("detection.persistence_n", &o->persistence_n,
         "default policy: windows that must hit (N of M); 0 = 3");
  s->Add("detection.persistence_m", &o->persistence_m,
         "default policy: windows considered (N of M); 0 = 5");
  s->Add("detection.min_effect", &o->min_effect,
         "default policy: minimum effect (0.2 = 20%); 0 = 0.2");
  s->Add("detection.hang_timeout_multiplier", &o->hang_timeout_multiplier,
         "default policy: hang timeout = k x recent p99; 0 = 10");
  s->Add("detection.hang_timeout_floor_ms", &o->hang_timeout_floor_ms,
         "default policy: hang timeout floor (ms); 0 = 5000");
  s->Add("detection.hang_confirm_multiplier", &o->hang_confirm_multiplier,
         "default policy: a hang is CONFIRMED once stuck this many hang "
         "timeouts (SUSPECTED after one); 0 = 1.5");
  s->Add("detection.warmup_collectives", &o->warmup_collectives,
         "default policy: collectives per communicator before verdicts; "
         "0 = 20");
  s->Add("migrate.prepare_timeout_s", &o->migrate_prepare_timeout_s,
         "a migration's PREPARE phase (new communicators, state transfer, "
         "joiner warm-up) aborts after this long without every READY (s)");
  s->Add("migrate.switch_timeout_s", &o->migrate_switch_timeout_s,
         "SWITCH_AT aborts after this long without every SWITCHED (s)");
  s->Add("migrate.switch_margin", &o->migrate_switch_margin,
         "switch point = highest sequence number reported with READY + this");
  s->Add("migrate.resume", &o->migrate_resume,
         "after a restart, resume unfinished migrations (false: abort them)");
  s->Add("fabric", &o->fabric,
         "flow path planning (docs/planning.md): the fabric the jobs run on, "
         "as `pitstop plan --topology`: gen:leafspine,... / gen:3tier,..., a "
         "SimAI topology file or a host CSV (ip,DSW,PSW,ASW). Hosts match "
         "the fabric's by name, else by trailing number (node7 = host7). "
         "Empty: planning off");
  s->Add("planning.suspect_share", &o->planning_suspect_share,
         "capacity share the planner assumes for links a COMM_SLOW verdict "
         "names (re-plans move flows off them)");
  s->Add("planning.measure_nics", &o->planning_measure_nics,
         "estimate NIC capacities from proxy-op throughput (Cora) and "
         "re-plan when one moves by more than 5% of nominal");
  s->Add("sync.policy", &o->sync_policy,
         "default local-SGD switch policy: off, advise (record and publish "
         "what it would do) or auto (send directives to the trainers)");
  s->Add("sync.slow_persist_s", &o->sync_slow_persist_s,
         "switch to local SGD after a straggler / slow fault persisted this "
         "long (s)");
  s->Add("sync.healthy_s", &o->sync_healthy_s,
         "switch back to synchronous after this long healthy (s)");
  s->Add("sync.local_mode", &o->sync_local_mode,
         "local mode to switch to: timed (A-EDiT) or local_sgd (EDiT)");
  s->Add("sync.period_ms", &o->sync_period_ms,
         "A-EDiT: wall time between synchronisations (ms)");
  s->Add("sync.period_steps", &o->sync_period_steps,
         "EDiT: local steps between synchronisations");
  s->Add("sync.timed_period_steps", &o->sync_timed_period_steps,
         "A-EDiT: period in local steps of a fast rank, converted to ms with "
         "the job's measured step time at the switch; 0 = sync.period_ms");
  s->Add("sync.straggler_min_effect", &o->sync_straggler_min_effect,
         "step-time straggler: compute >= (1 + this) x the other ranks'");
  s->Add("sync.slow_signal", &o->sync_slow_signal,
         "what makes a job slow for the local-SGD switch: steps_or_faults "
         "(step-time stragglers or open slow faults) or confirmed_faults "
         "(only slow faults confirmed from the job's NCCL telemetry)");
  s->Add("lora.policy", &o->lora_policy,
         "default multi-LoRA rescheduling policy: off, advise (record and "
         "publish the placement it would move to) or auto (move when the "
         "gain beats the cost)");
  s->Add("trainer_profile.steps", &o->trainer_profile_steps,
         "a confirmed slow-rank fault of a job whose trainers run the "
         "pitstop trainer library gets a torch.profiler diff of the suspect "
         "against a healthy peer over this many steps (at most 64); 0 = off");
  s->Add("trainer_profile.timeout_s", &o->trainer_profile_timeout_s,
         "longest a trainer captures for it (s); the answer may take 15 s "
         "more before the fault says it has none");
  s->Add("lora.slow_signal", &o->lora_slow_signal,
         "what makes a stage slow for multi-LoRA rescheduling: "
         "steps_or_faults (measured speed or an open NON_COMM_SLOW fault) "
         "or confirmed_faults (only a confirmed NON_COMM_SLOW fault)");
  s->Add("detection.z_threshold", &o->z_threshold,
         "default policy: robust z-score threshold; 0 = 3.5");
  BoundControllerOptions(s);
}

}  // namespace pitstop::controller
