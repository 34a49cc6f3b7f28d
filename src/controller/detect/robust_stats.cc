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

double BinomialTailAtLeast(int64_t k, int64_t n, double p) {
  if (k <= 0) return 1;
  if (k > n || p <= 0) return 0;
  if (p >= 1) return 1;
  // Terms from i = k up, each from the previous (pmf(i+1) = pmf(i) *
  // (n-i)/(i+1) * p/(1-p)), the first in log space so large n does not
  // overflow; stops once the terms no longer matter.
  const double log_first = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) -
                           std::lgamma(n - k + 1.0) + k * std::log(p) +
                           (n - k) * std::log1p(-p);
  double term = std::exp(log_first);
  double sum = 0;
  const double odds = p / (1 - p);
  for (int64_t i = k; i <= n; ++i) {
    sum += term;
    term *= static_cast<double>(n - i) / static_cast<double>(i + 1) * odds;
    if (i >= n * p && term < sum * 1e-12) break;
  }
  return std::min(1.0, sum);
}

}  // namespace pitstop::controller
