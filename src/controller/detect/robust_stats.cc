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

}  // namespace pitstop::controller
