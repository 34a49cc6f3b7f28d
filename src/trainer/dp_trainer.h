// A deterministic data-parallel trainer: a small MLP (in -> hidden, tanh ->
// 1) learning a fixed "teacher" function on synthetic data, plain SGD, the
// gradients of every step summed across ranks with ncclAllReduce.
//
// Deterministic by construction: the data of sample k is a pure function of
// (seed, k) (splitmix64), every rank starts from the same weights (a
// function of the seed), local gradients are summed in sample order, and
// the CPU NCCL backend's all-reduce reduces in a fixed rank order. Two runs
// with the same arguments and rank count end with bit-identical weights,
// on every rank. This is the yardstick for migration: a run that moved its
// ranks must end exactly where an undisturbed run ends.
//
// The NCCL calls go through the public nccl* API (src/nccl/cpu/
// nccl_functions.h), so the pitstop interposer and profiler see them like a
// framework's.
//
// Thread safety: one Trainer per process, used from one thread.
#ifndef PITSTOP_SRC_TRAINER_DP_TRAINER_H_
#define PITSTOP_SRC_TRAINER_DP_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/nccl/cpu/nccl_api.h"

namespace pitstop::trainer {

struct ModelShape {
  int inputs = 16;
  int hidden = 32;
};

struct TrainOptions {
  ModelShape shape{};
  uint64_t seed = 1;
  int steps = 100;  // total: the run ends after step steps-1
  int batch_per_rank = 32;
  float learning_rate = 0.2f;
  // A failed all-reduce waits this long for pitstop's recovery migration.
  int64_t recover_timeout_ms = 120000;
  // Shadow iterations (a joiner's warm-up on a sandbox communicator whose
  // all-reduces pitstop answers from recorded outputs): registers no state,
  // never polls or recovers; a failed all-reduce ends the run.
  bool sandbox = false;
  // Emulated accelerator time per step (ms), slept between the local
  // gradient and the all-reduce. The model itself computes in
  // microseconds, where a GPU's forward and backward take milliseconds;
  // detection judges ranks by when they reach the collective, so this is
  // what a slow GPU stretches. Never changes the numerics.
  double compute_ms = 0;
  // A degraded GPU (thermal throttling, a bad HBM stack): from this step
  // on the emulated compute takes compute_ms x slow_factor. -1: never.
  int slow_from_step = -1;
  double slow_factor = 1;
};

// The whole training state at a step boundary: every data-parallel replica
// holds the same one, so any rank's copy restores any rank.
struct TrainState {
  int next_step = 0;            // first step still to run
  std::vector<float> params{};  // empty: InitialParameters(shape, seed)
};

// Checkpoint file: "PSDPCK01", then little-endian u64 seed, u32 inputs,
// u32 hidden, u64 next_step, u64 parameter count, the float32 parameters,
// and u64 FNV-1a of everything before it.
absl::Status SaveCheckpoint(const std::string& path, const TrainOptions& o,
                            const TrainState& state);
// Errors name the file and the byte offset (bad magic, shape or seed that
// differ from `o`, truncation, checksum).
absl::StatusOr<TrainState> LoadCheckpoint(const std::string& path,
                                          const TrainOptions& o);

// Flat parameters: W1 (hidden x inputs), b1 (hidden), w2 (hidden), b2 (1).
size_t ParameterCount(const ModelShape& shape);
std::vector<float> InitialParameters(const ModelShape& shape, uint64_t seed);

// Synthetic sample k: inputs in [-1, 1) and the teacher's target.
void Sample(const ModelShape& shape, uint64_t seed, uint64_t k, float* x,
            float* y);

// Adds the gradient of 0.5 * (f(x) - y)^2 over samples [first, first + n)
// to `grad` and returns the summed loss (in sample order: deterministic).
double AccumulateGradient(const ModelShape& shape, uint64_t seed,
                          const std::vector<float>& params, uint64_t first,
                          int n, std::vector<float>* grad);

struct StepReport {
  int step = 0;
  double loss = 0;  // mean over the global batch
  // The step's time, including the migration poll at its start (a switch
  // happens there). A redone step's time starts where the step that failed
  // started: it includes the failure's detection and the recovery.
  int64_t step_ns = 0;
  const std::vector<float>* params = nullptr;  // after this step's update
  // Set when the migration poll before this step failed (training went on
  // on the communicator it had).
  std::string migration_error;
};

// How Train ended: at options.steps, or because a migration moved this rank
// to a joiner before step `next_step` (pitstop_trainer_poll said LEAVE).
struct TrainResult {
  std::vector<float> params;
  bool left = false;
  int next_step = 0;
};

// Runs steps [start.next_step, options.steps) of data-parallel SGD on
// `comm` (rank r of n takes samples [(step*n + r)*b, +b)). `on_step` sees
// every step. Resuming from a checkpoint of step S gives exactly the
// weights an uninterrupted run has after the same steps.
//
// Migration (include/pitstop/trainer.h; nothing happens without the pitstop
// library): the parameters and the next step are registered as the state
// ("params", "next_step") and the library is polled at every step
// boundary, before the step. When an all-reduce fails (a peer died) and
// the library is loaded, the library's recovery names the step to redo
// (this one or the one before: the parameters at the start of the last
// two steps are kept), the parameters go back there, the communicator is
// switched and training goes on from that step; it prints "recovered:
// step S failed, redoing step R" to stderr. A redone step is reported
// again; a failed one was never reported. Without the library a failed
// all-reduce ends Train with the error, as before.
absl::StatusOr<TrainResult> Train(
    ncclComm_t comm, const TrainOptions& options, const TrainState& start,
    const std::function<void(const StepReport&)>& on_step);

// FNV-1a over the parameter bytes: a short fingerprint for logs.
uint64_t Fingerprint(const std::vector<float>& params);

}  // namespace pitstop::trainer

#endif  // PITSTOP_SRC_TRAINER_DP_TRAINER_H_
