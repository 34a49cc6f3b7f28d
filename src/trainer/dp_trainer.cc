#include "src/trainer/dp_trainer.h"

#include <time.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::vector<float>> Train(
    ncclComm_t comm, const TrainOptions& options,
    const std::function<void(const StepReport&)>& on_step) {
  int rank = 0, n = 0;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess ||
      ncclCommCount(comm, &n) != ncclSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("bad communicator: ", ncclGetLastError(comm)));
  }
  std::vector<float> params = InitialParameters(options.shape, options.seed);
  std::vector<float> grad(params.size());
  const int b = options.batch_per_rank;
  const float scale = options.learning_rate / static_cast<float>(b * n);
  for (int step = 0; step < options.steps; ++step) {
    const int64_t t0 = NowNs();
    std::fill(grad.begin(), grad.end(), 0.0f);
    const uint64_t first = (static_cast<uint64_t>(step) * n + rank) * b;
    double loss = AccumulateGradient(options.shape, options.seed, params, first,
                                     b, &grad);
    // Gradients and the loss travel in one all-reduce (loss as the last
    // element, so the report needs no second collective).
    grad.push_back(static_cast<float>(loss));
    const ncclResult_t r = ncclAllReduce(grad.data(), grad.data(), grad.size(),
                                         ncclFloat32, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat(
          "step ", step, ": ncclAllReduce: ", ncclGetErrorString(r), ": ",
          ncclGetLastError(comm)));
    }
    loss = grad.back();
    grad.pop_back();
    for (size_t i = 0; i < params.size(); ++i) params[i] -= scale * grad[i];
    if (on_step) {
      on_step({.step = step, .loss = loss / (b * n), .step_ns = NowNs() - t0});
    }
  }
  return params;
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
