// `pitstop sim --scenario torch-*` (docs/pytorch.md): detection on a real
// PyTorch job through the real path. A real controller and one agent per
// emulated node on loopback; the demo DDP job (tools/torch-job/train_lm.py,
// a byte-level language model on Debian's fortunes) launched by one
// torchrun per node with the pitstop library LD_PRELOADed (TorchJob). Once
// the job trains, the run injects one fault from outside the training loop:
//
//   torch-healthy    nothing: the job trains (checkpoints, evaluations) and
//                    ends; no fault may be raised
//   torch-straggler  one rank's process is throttled for real: SIGSTOP /
//                    SIGCONT on a duty cycle (the kernel's CPU bandwidth
//                    control does the same to a cgroup) -> NON_COMM_SLOW
//   torch-hang       one rank's process is stopped for good (SIGSTOP) at
//                    a point of its step the seed picks: in its own work
//                    or inside the all-reduce -> NON_COMM_HANG
//   torch-crash      one rank's process is killed (SIGKILL); torchrun then
//                    stops its siblings -> PROCESS_DIED, the first death
//   torch-desync     one rank issues an all-gather where the others go into
//                    the gradient all-reduce (the job's fault-injection
//                    knob --inject-desync) -> MISMATCH
//
// The verdict is scored like the emulated-rank scenarios' (score.h): PASS
// only when the fault is found with the right class and first suspect (the
// rank, or its host and GPU) and nothing else is raised.
//
// Thread-compatible: one caller.
#ifndef PITSTOP_SRC_SIM_TORCH_SCENARIO_H_
#define PITSTOP_SRC_SIM_TORCH_SCENARIO_H_

#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/sim/model.h"
#include "src/sim/score.h"

namespace pitstop::sim {

// The scenario names, in --list's order, and one line on each.
const std::vector<std::pair<std::string, std::string>>& TorchScenarios();
bool IsTorchScenario(const std::string& name);

// The demo job's script ($PITSTOP_TORCH_JOB, else the source tree's
// tools/torch-job/train_lm.py), and the environment `backend` needs from
// this build tree (empty for gloo). Shared with torch-migration.
std::string TorchJobScript();
absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
TorchBackendEnv(const std::string& backend, const std::string& plugin);

struct TorchScenarioOptions {
  std::string scenario = "torch-straggler";
  int nodes = 2;
  int ranks_per_node = 2;
  // The faulty rank; -1: the last one (the last GPU of the last node).
  int fault_rank = -1;
  // The process-group backend the job runs on: pitstop_nccl, the c10d
  // backend over the NCCL C API (src/torch_backend), so that the library
  // sees the collectives; with gloo it sees none and a run finds nothing.
  std::string backend = "pitstop_nccl";
  uint64_t seed = 1;
  // Training steps every rank has logged before the fault (the detectors'
  // warm-up: 20 collectives per communicator).
  int warmup_steps = 40;
  // torch-healthy: how long the job trains (s; it stops at the first
  // evaluation after that); 0: a fixed 100 steps.
  double duration_s = 0;
  int eval_every = 20;
  int ckpt_every = 50;
  // torch-straggler: the rank is stopped stop_ms of every period_ms: it
  // runs at most a fifth of the time, well below its share of an
  // oversubscribed machine (4 ranks on 2 cores: half a core each). At 50
  // of 100 ms it was last in only ~70% of the all-reduces, 10 ms late on
  // a 60 ms step, and the fault came and went (docs/pytorch.md).
  double stop_ms = 40;
  double period_ms = 50;
  // After the injection: the longest wait for the expected fault to be
  // CONFIRMED, and how long the run goes on after that (any other fault
  // raised meanwhile is false).
  double observe_s = 45;
  double settle_s = 3;
  std::string work_dir;  // empty: a fresh directory under /tmp
  bool keep_work_dir = false;
  std::string log_level = "warn";
  std::function<void(const std::string&)> progress;  // null: silent
  // Asked while the run waits (null: never): true ends it with Cancelled.
  std::function<bool()> cancelled;
  // Called with the judged result while the cluster and the job still run
  // (null: none); it may block (pitstop sim --keep-running).
  std::function<void(const struct TorchScenarioResult&)> before_stop;
};

struct TorchScenarioResult {
  std::string scenario;
  std::string description;  // what was injected, in words
  Plan plan;                // truths only: what was injected and expected
  std::vector<ObservedFault> faults;
  RunScore score;  // points into plan and faults: do not copy the result
  int64_t injected_ns = -1;           // after the job's start (-1: none)
  int64_t confirmed_after_ns = -1;    // the matching fault's CONFIRMED
  int steps_at_injection = 0;         // of the faulty rank
  int steps_done = 0;                 // rank 0's, at the end
  std::vector<std::string> problems;  // the job misbehaved (not detection)
  std::string controller_address;
  std::string work_dir;
  bool work_dir_kept = false;
  double wall_s = 0;
  bool passed() const { return score.ok() && problems.empty(); }
};

// InvalidArgument naming the option for options no run can use.
absl::Status ValidateTorchOptions(const TorchScenarioOptions& o);

// NotFound when a binary or the job's script is missing; Internal when the
// deployment cannot start. A run that went wrong is a result that did not
// pass. Heap-allocated: the score points into it.
absl::StatusOr<std::unique_ptr<TorchScenarioResult>> RunTorchScenario(
    const TorchScenarioOptions& options);

// The report, in the emulated scenarios' sections (== injected ==, == pitstop
// found ==, == score ==, == inspect ==).
void PrintTorchReport(const TorchScenarioResult& r, bool still_running,
                      const std::string& rerun, std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TORCH_SCENARIO_H_
