// Small robust statistics used by the detectors (median, MAD, percentiles).
// Inputs are taken by value because the functions partially sort them.
#ifndef PITSTOP_CONTROLLER_DETECT_ROBUST_STATS_H_
#define PITSTOP_CONTROLLER_DETECT_ROBUST_STATS_H_

#include <cstdint>
#include <vector>

namespace pitstop::controller {

// Median of `v`; 0 for an empty vector.
double Median(std::vector<double> v);

// Median absolute deviation around `median`; 0 for an empty vector.
double Mad(const std::vector<double>& v, double median);

// The q-quantile (0 <= q <= 1, nearest rank) of `v`; 0 for an empty vector.
double Quantile(std::vector<double> v, double q);

// P(X >= k) for X ~ Binomial(n, p): how likely `k` or more of `n`
// independent trials succeed by chance. 1 for k <= 0, 0 for k > n.
double BinomialTailAtLeast(int64_t k, int64_t n, double p);

// MAD scaled to a normal standard deviation (x 1.4826).
inline constexpr double kMadToSigma = 1.4826;

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_ROBUST_STATS_H_
