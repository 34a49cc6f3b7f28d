#include "src/controller/detect/robust_stats.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace pitstop::controller {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

double Mad(const std::vector<double>& v, double median) {
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - median));
  return Median(std::move(dev));
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const size_t k = std::min(
      v.size() - 1, static_cast<size_t>(std::ceil(q * v.size())) - (q > 0));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

namespace {

// log of the Binomial(n, p) probability of exactly k successes.
double LogPmf(int64_t k, int64_t n, double p) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) -
         std::lgamma(n - k + 1.0) + k * std::log(p) + (n - k) * std::log1p(-p);
}

// Sums pmf(i) from i = `from` away from the mean (step +1 or -1) until the
// terms no longer matter. Each term comes from the previous one; the first
// in log space, so a large n does not overflow. Starting on the far side
// of the mean, the terms only shrink: once they underflow, so does the sum.
double TailFrom(int64_t from, int64_t n, double p, int step) {
  double term = std::exp(LogPmf(from, n, p));
  double sum = 0;
  const double odds = p / (1 - p);
  for (int64_t i = from; i >= 0 && i <= n; i += step) {
    sum += term;
    if (term == 0 || term < sum * 1e-12) break;
    term *= step > 0 ? static_cast<double>(n - i) / (i + 1) * odds
                     : static_cast<double>(i) / (n - i + 1) / odds;
  }
  return sum;
}

}  // namespace

double BinomialTailAtLeast(int64_t k, int64_t n, double p) {
  if (k <= 0) return 1;
  if (k > n || p <= 0) return 0;
  if (p >= 1) return 1;
  // The tail on the far side of the mean is summed directly, the other as
  // one minus the far side of the complement, so the loop never walks
  // through the bulk of the distribution.
  if (k > n * p) return std::min(1.0, TailFrom(k, n, p, +1));
  return std::max(0.0, 1.0 - TailFrom(k - 1, n, p, -1));
}

}  // namespace pitstop::controller
