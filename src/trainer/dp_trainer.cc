#include "src/trainer/dp_trainer.h"

#include <time.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pitstop/bounded_file.h"
#include "pitstop/status_macros.h"
#include "pitstop/trainer.h"
#include "src/nccl/cpu/nccl_functions.h"

namespace pitstop::trainer {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from 24 random bits (exact in float).
float Uniform(uint64_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 40) - (1 << 23)) /
         static_cast<float>(1 << 23);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Sleeps the step's emulated accelerator time (TrainOptions::compute_ms).
void EmulateCompute(const TrainOptions& o, int step) {
  double ms = o.compute_ms;
  if (o.slow_from_step >= 0 && step >= o.slow_from_step) ms *= o.slow_factor;
  if (ms > 0) absl::SleepFor(absl::Milliseconds(ms));
}

// The parameters at the start of a step. Train keeps the last two: a step
// that failed on this rank may have completed on a peer, and every rank
// redoes the lowest failed step (include/pitstop/trainer.h).
struct Snapshot {
  int step = -1;
  std::vector<float> params;
};

struct View {  // the parameter blocks of a flat vector
  const ModelShape& s;
  size_t W1() const { return 0; }
  size_t b1() const { return static_cast<size_t>(s.hidden) * s.inputs; }
  size_t w2() const { return b1() + s.hidden; }
  size_t b2() const { return w2() + s.hidden; }
};

}  // namespace

size_t ParameterCount(const ModelShape& shape) { return View{shape}.b2() + 1; }

std::vector<float> InitialParameters(const ModelShape& shape, uint64_t seed) {
  std::vector<float> p(ParameterCount(shape));
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.inputs));
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = 0.5f * scale * Uniform(SplitMix(seed * 0x1000003ull + i));
  }
  return p;
}

void Sample(const ModelShape& shape, uint64_t seed, uint64_t k, float* x,
            float* y) {
  const uint64_t base = SplitMix(seed ^ (k * 0x9e3779b97f4a7c15ull));
  float target = 0;
  for (int i = 0; i < shape.inputs; ++i) {
    x[i] = Uniform(SplitMix(base + static_cast<uint64_t>(i)));
    // Teacher: a fixed smooth function of the inputs.
    target += (i % 3 == 0 ? 0.8f : -0.3f) * x[i] +
              0.2f * x[i] * x[(i + 1) % shape.inputs];
  }
  *y = std::tanh(target);
}

double AccumulateGradient(const ModelShape& shape, uint64_t seed,
                          const std::vector<float>& params, uint64_t first,
                          int n, std::vector<float>* grad) {
  const View v{shape};
  std::vector<float> x(shape.inputs), h(shape.hidden);
  double loss = 0;
  for (int j = 0; j < n; ++j) {
    float y = 0;
    Sample(shape, seed, first + static_cast<uint64_t>(j), x.data(), &y);
    float out = params[v.b2()];
    for (int u = 0; u < shape.hidden; ++u) {
      float a = params[v.b1() + u];
      for (int i = 0; i < shape.inputs; ++i) {
        a += params[v.W1() + u * shape.inputs + i] * x[i];
      }
      h[u] = std::tanh(a);
      out += params[v.w2() + u] * h[u];
    }
    const float err = out - y;
    loss += 0.5 * static_cast<double>(err) * err;
    (*grad)[v.b2()] += err;
    for (int u = 0; u < shape.hidden; ++u) {
      (*grad)[v.w2() + u] += err * h[u];
      const float da = err * params[v.w2() + u] * (1.0f - h[u] * h[u]);
      (*grad)[v.b1() + u] += da;
      for (int i = 0; i < shape.inputs; ++i) {
        (*grad)[v.W1() + u * shape.inputs + i] += da * x[i];
      }
    }
  }
  return loss;
}

namespace {

// A peer died in step `step` (its all-reduce failed with `failure`): the
// pitstop library's recovery migration names the step to redo; the
// parameters go back to its start and the communicator is switched.
// Returns the step to redo, or the error that ends training (the failure
// itself when pitstop is not loaded).
absl::StatusOr<int> Recover(int rank, int step, const std::string& failure,
                            int64_t timeout_ms, const Snapshot (&snaps)[2],
                            std::vector<float>* params, uint64_t* next_step) {
  uint64_t redo = 0;
  const int r =
      pitstop_try_recover(static_cast<uint64_t>(step), &redo, timeout_ms);
  if (r == PITSTOP_TRAINER_UNAVAILABLE) {
    return absl::UnavailableError(failure);
  }
  if (r != 0) {
    return absl::UnavailableError(
        absl::StrCat(failure, "; recovery failed: ", pitstop_try_last_error()));
  }
  const Snapshot* snap = nullptr;
  for (const Snapshot& s : snaps) {
    if (s.step >= 0 && static_cast<uint64_t>(s.step) == redo) snap = &s;
  }
  if (snap == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        failure, "; the recovery redoes step ", redo,
        " but this rank kept the state of steps ", snaps[(step + 1) & 1].step,
        " and ", snaps[step & 1].step, " only"));
  }
  *params = snap->params;  // same size: the registered buffer stays put
  *next_step = redo;
  if (pitstop_try_resume(redo) != 0) {
    return absl::UnavailableError(
        absl::StrCat(failure, "; resuming at step ", redo,
                     " failed: ", pitstop_try_last_error()));
  }
  std::fprintf(stderr,
               "pitstop-dp-trainer: rank %d: recovered: step %d failed, "
               "redoing step %llu\n",
               rank, step, static_cast<unsigned long long>(redo));
  return static_cast<int>(redo);
}

}  // namespace

absl::StatusOr<TrainResult> Train(
    ncclComm_t comm, const TrainOptions& options, const TrainState& start,
    const std::function<void(const StepReport&)>& on_step) {
  int rank = 0, n = 0;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess ||
      ncclCommCount(comm, &n) != ncclSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("bad communicator: ", ncclGetLastError(comm)));
  }
  std::vector<float> params =
      start.params.empty() ? InitialParameters(options.shape, options.seed)
                           : start.params;
  if (params.size() != ParameterCount(options.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("start state has ", params.size(), " parameters, the ",
                     "model ", ParameterCount(options.shape)));
  }
  std::vector<float> grad(params.size());
  const int b = options.batch_per_rank;
  const float scale = options.learning_rate / static_cast<float>(b * n);
  // What a joiner needs to continue this rank: every replica holds the
  // same, so the leaver's copy is the state.
  uint64_t next_step = static_cast<uint64_t>(start.next_step);
  if (!options.sandbox) {
    pitstop_try_register_state("params", params.data(),
                               params.size() * sizeof(float));
    pitstop_try_register_state("next_step", &next_step, sizeof(next_step));
  }
  Snapshot snaps[2];
  int64_t failed_t0 = -1;  // a redone step's time includes the recovery
  for (int step = start.next_step; step < options.steps; ++step) {
    const int64_t t0 = failed_t0 >= 0 ? failed_t0 : NowNs();
    failed_t0 = -1;
    next_step = static_cast<uint64_t>(step);
    std::string migration_error;
    const int polled = options.sandbox ? PITSTOP_TRAINER_CONTINUE
                                       : pitstop_try_poll(next_step);
    if (polled == PITSTOP_TRAINER_LEAVE) {
      return TrainResult{std::move(params), true, step};
    }
    if (polled < 0) migration_error = pitstop_try_last_error();
    snaps[step & 1].step = step;
    snaps[step & 1].params = params;  // no allocation after the first two
    std::fill(grad.begin(), grad.end(), 0.0f);
    const uint64_t first = (static_cast<uint64_t>(step) * n + rank) * b;
    double loss = AccumulateGradient(options.shape, options.seed, params, first,
                                     b, &grad);
    EmulateCompute(options, step);
    // Gradients and the loss travel in one all-reduce (loss as the last
    // element, so the report needs no second collective).
    grad.push_back(static_cast<float>(loss));
    const ncclResult_t r = ncclAllReduce(grad.data(), grad.data(), grad.size(),
                                         ncclFloat32, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      grad.pop_back();  // the loss slot; the rest is garbage
      const std::string failure = absl::StrCat(
          "step ", step, ": ncclAllReduce: ", ncclGetErrorString(r), ": ",
          ncclGetLastError(comm));
      if (options.sandbox) return absl::UnavailableError(failure);
      ASSIGN_OR_RETURN(const int redo,
                       Recover(rank, step, failure, options.recover_timeout_ms,
                               snaps, &params, &next_step));
      step = redo - 1;  // the loop's increment makes it `redo`
      failed_t0 = t0;
      continue;
    }
    loss = grad.back();
    grad.pop_back();
    for (size_t i = 0; i < params.size(); ++i) params[i] -= scale * grad[i];
    if (on_step) {
      on_step({.step = step,
               .loss = loss / (b * n),
               .step_ns = NowNs() - t0,
               .params = &params,
               .migration_error = std::move(migration_error)});
    }
  }
  return TrainResult{std::move(params), false, options.steps};
}

namespace {

constexpr char kCheckpointMagic[8] = {'P', 'S', 'D', 'P', 'C', 'K', '0', '1'};

uint64_t Fnv(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64: little-endian
  out->append(b, sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& path, const std::string& data)
      : path_(path), data_(data) {}
  template <typename T>
  absl::Status Get(T* v, const char* what) {
    if (data_.size() - off_ < sizeof(T)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": offset ", off_, ": truncated reading ", what));
    }
    std::memcpy(v, data_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return absl::OkStatus();
  }
  size_t offset() const { return off_; }

 private:
  const std::string& path_;
  const std::string& data_;
  size_t off_ = 0;
};

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, const TrainOptions& o,
                            const TrainState& state) {
  std::string out(kCheckpointMagic, 8);
  Put<uint64_t>(&out, o.seed);
  Put<uint32_t>(&out, static_cast<uint32_t>(o.shape.inputs));
  Put<uint32_t>(&out, static_cast<uint32_t>(o.shape.hidden));
  Put<uint64_t>(&out, static_cast<uint64_t>(state.next_step));
  Put<uint64_t>(&out, state.params.size());
  out.append(reinterpret_cast<const char*>(state.params.data()),
             state.params.size() * sizeof(float));
  Put<uint64_t>(&out, Fnv(out));
  // Write then rename: a reader never sees half a checkpoint.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainState> LoadCheckpoint(const std::string& path,
                                          const TrainOptions& o) {
  // The trainer's MLPs are kilobytes to megabytes; 1 GiB bounds a wrong
  // path (a FIFO, /dev/zero, a huge file) without limiting real use.
  ASSIGN_OR_RETURN(const std::string data,
                   ReadRegularFile(path, "--resume", uint64_t{1} << 30));
  if (data.size() < 8 || std::memcmp(data.data(), kCheckpointMagic, 8) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": offset 0: not a pitstop-dp-trainer checkpoint"));
  }
  Reader r(path, data);
  char magic[8];
  RETURN_IF_ERROR(r.Get(&magic, "magic"));
  uint64_t seed = 0, next = 0, n = 0;
  uint32_t inputs = 0, hidden = 0;
  RETURN_IF_ERROR(r.Get(&seed, "seed"));
  RETURN_IF_ERROR(r.Get(&inputs, "inputs"));
  RETURN_IF_ERROR(r.Get(&hidden, "hidden"));
  if (seed != o.seed || static_cast<int>(inputs) != o.shape.inputs ||
      static_cast<int>(hidden) != o.shape.hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": offset 8: checkpoint of seed ", seed, " shape ",
                     inputs, "x", hidden, ", this run has seed ", o.seed,
                     " shape ", o.shape.inputs, "x", o.shape.hidden));
  }
  RETURN_IF_ERROR(r.Get(&next, "next step"));
  RETURN_IF_ERROR(r.Get(&n, "parameter count"));
  if (n != ParameterCount(o.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": offset ", r.offset() - 8, ": ", n,
                     " parameters, the model has ", ParameterCount(o.shape)));
  }
  TrainState state;
  state.next_step = static_cast<int>(next);
  state.params.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(r.Get(&state.params[i], "parameters"));
  }
  const size_t body = r.offset();
  uint64_t sum = 0;
  RETURN_IF_ERROR(r.Get(&sum, "checksum"));
  if (sum != Fnv(data.substr(0, body))) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": offset ", body, ": checksum mismatch"));
  }
  return state;
}

uint64_t Fingerprint(const std::vector<float>& params) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace pitstop::trainer
