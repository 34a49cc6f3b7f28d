// `pitstop replay`: an imported job through the live pipeline. A real
// pitstop-controller and one real pitstop-agent per node found in the data
// run on loopback (src/sim/local_cluster.h); each rank's records enter
// through the in-process library's export path (pitstop_plugin_core: rings,
// communicator registry, exporter streaming to the agent's Unix socket),
// paced in scaled time; the verdict is read back over the Controller gRPC
// API (ListFaults, as `pitstopctl faults` shows it).
//
// Time: data time t maps to replay_start + (t - t0) / speed on this host's
// CLOCK_MONOTONIC, and recorded durations shrink by `speed` too (ratios,
// which detection uses, are unchanged). Records without times (Flight
// Recorder progress derived from pg_status) are sent at the start.
//
// Threads: one thread per rank (the export path's rings are per thread);
// ReplayJob() itself blocks until the verdict is read.
#ifndef PITSTOP_IMPORTERS_REPLAY_H_
#define PITSTOP_IMPORTERS_REPLAY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/v1/controller.pb.h"
#include "src/importers/imported_job.h"
#include "src/importers/log_ends.h"

namespace pitstop::importers {

// Highest --speed honoured when the data would fit in max_replay at a lower
// one; higher requests are clamped (ReplayResult::speed_note says so).
inline constexpr double kMaxReplaySpeed = 1000;

struct ReplayOptions {
  // Data seconds per replay second; 0 = choose so the data takes at most
  // `max_replay` (and never slower than real time).
  double speed = 0;
  absl::Duration max_replay = absl::Milliseconds(500);
  // After the last record: how long to let detection run (hang timeouts
  // must pass twice to confirm) before reading the verdict.
  absl::Duration settle = absl::Seconds(4);
  // Then until the faults' verdict keeps its shape for settle / 2 (a loaded
  // machine's detection lags), at most this long after the last record.
  absl::Duration settle_max = absl::Seconds(30);
  // Keep the daemons' work directory (logs, database) for inspection.
  bool keep_work_dir = false;
  // Progress lines; may be null.
  std::function<void(const std::string&)> progress;
};

struct ReplayResult {
  std::vector<v1::Fault> faults;  // open faults of the job, from ListFaults
  uint64_t records_sent = 0;
  int nodes = 0;
  double speed = 0;
  // Set when the requested speed was clamped to kMaxReplaySpeed.
  std::string speed_note;
  std::string work_dir;
  // Where ranks' logs end before their peers' (log_ends.h), judged as in
  // AnalyzeJob; records above the ends not judged stuck were not replayed.
  std::vector<LogEnd> log_ends;
};

// Starts the daemons, replays, reads the verdict, stops everything.
// NotFound when pitstop-controller / pitstop-agent are not found (set
// PITSTOP_BIN_DIR); Unavailable when the controller cannot be reached.
absl::StatusOr<ReplayResult> ReplayJob(const ImportedJob& job,
                                       const ReplayOptions& options);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_REPLAY_H_
