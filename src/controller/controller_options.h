// Options of pitstop-controller (YAML keys and flags via ConfigSchema).
#ifndef PITSTOP_CONTROLLER_CONTROLLER_OPTIONS_H_
#define PITSTOP_CONTROLLER_CONTROLLER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "pitstop/config.h"
#include "pitstop/tls.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

struct ControllerOptions {
  // Loopback by default: agents on other nodes need an address chosen by
  // the operator (docs/reliability.md).
  std::string listen = "127.0.0.1:7070";
  std::string port_file;
  // Trust (docs/reliability.md): mutual TLS from PEM files (re-read while
  // running), bearer tokens ("TOKEN ROLE NAME" lines, re-read on SIGHUP).
  // Without TLS, listen must be a loopback address unless insecure is set.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tokens_file;
  bool insecure = false;
  std::string db = "/var/lib/pitstop/controller.db";
  std::string metrics_address = "127.0.0.1:9470";
  std::string log_level = "info";
  std::string log_file;
  uint32_t cycle_ms = 500;
  uint32_t node_grace_s = 30;
  uint32_t shutdown_grace_ms = 2000;
  uint32_t agent_silence_ms = 3000;
  // Default JobPolicy (0 = built-in default).
  uint32_t window_ms = 0;
  uint32_t persistence_n = 0;
  uint32_t persistence_m = 0;
  double min_effect = 0;
  double hang_timeout_multiplier = 0;
  uint32_t hang_timeout_floor_ms = 0;
  double hang_confirm_multiplier = 0;
  uint32_t warmup_collectives = 0;
  double z_threshold = 0;
  // Default policy mode: "observe" (record and notify) or "act" (actions
  // such as the Slurm drain may run).
  std::string mode = "observe";
  // Default sync policy (local-SGD switch, src/controller/trainers/).
  std::string sync_policy = "advise";
  uint32_t sync_slow_persist_s = 20;
  uint32_t sync_healthy_s = 60;
  std::string sync_local_mode = "timed";
  uint32_t sync_period_ms = 2000;
  uint32_t sync_period_steps = 8;
  uint32_t sync_timed_period_steps = 0;  // 0: sync_period_ms
  double sync_straggler_min_effect = 0.3;
  // What the trainer policies take as slow: "steps_or_faults" (step
  // reports or open slow faults) or "confirmed_faults" (only faults the
  // detection engine confirmed from NCCL telemetry).
  std::string sync_slow_signal = "steps_or_faults";
  // Default multi-LoRA rescheduling policy (src/controller/trainers/lora/).
  std::string lora_policy = "advise";
  std::string lora_slow_signal = "steps_or_faults";
  // torch.profiler diffs of slow ranks (src/controller/profiling/): steps
  // per capture (0 = off) and how long a trainer may capture.
  uint32_t trainer_profile_steps = 5;
  uint32_t trainer_profile_timeout_s = 20;
  // Standby migration (docs/migration.md): phase timeouts, the switch
  // point's margin and what a restart does with unfinished migrations.
  uint32_t migrate_prepare_timeout_s = 120;
  uint32_t migrate_switch_timeout_s = 60;
  uint32_t migrate_switch_margin = 4;
  bool migrate_resume = true;
  // C4P flow planning (docs/planning.md): the fabric ("gen:...", a SimAI
  // file or a host CSV, as `pitstop plan --topology`); empty = off.
  std::string fabric;
  double planning_suspect_share = 0.25;
  bool planning_measure_nics = true;

  // The default SyncSettings; InvalidArgument naming the key.
  absl::StatusOr<v1::SyncSettings> DefaultSyncSettings() const;
  absl::StatusOr<v1::LoraPolicy> DefaultLoraPolicy() const;
  // sync.slow_signal / lora.slow_signal (`key`) as the enum.
  static absl::StatusOr<v1::SlowSignal> ParseSlowSignal(const char* key,
                                                        const std::string& v);

  v1::JobPolicy DefaultPolicy() const;
  // Checks values the schema's types cannot: detection.cycle_ms > 0, the
  // default policy valid (persistence_n <= persistence_m, min_effect >= 0,
  // finite numbers), db not empty, the TLS files readable and a
  // non-loopback listen address only with TLS or insecure. InvalidArgument
  // naming the YAML key and its flag.
  absl::Status Validate() const;
  // The TLS / loopback part of Validate().
  absl::Status ValidateTrust() const;
  TlsFiles Tls() const;
};

// Binds every option: "listen" <-> --listen, "detection.window_ms" <->
// --detection-window-ms, ...
void RegisterControllerOptions(ConfigSchema* schema, ControllerOptions* o);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_OPTIONS_H_
