// Reads one series of a prometheus-cpp registry in tests: a counter's or
// gauge's value, a histogram's count or sum. -1 when the series does not
// exist (a check on it then fails instead of reading 0).
#ifndef PITSTOP_TESTS_CONTROLLER_METRIC_READER_H_
#define PITSTOP_TESTS_CONTROLLER_METRIC_READER_H_

#include <map>
#include <string>

#include "prometheus/registry.h"

namespace pitstop::controller::testing {

enum class Read { kValue, kCount, kSum };

inline double MetricValue(const prometheus::Registry& registry,
                          const std::string& name,
                          const std::map<std::string, std::string>& labels,
                          Read what = Read::kValue) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got != labels) continue;
      switch (what) {
        case Read::kCount:
          return static_cast<double>(m.histogram.sample_count);
        case Read::kSum:
          return m.histogram.sample_sum;
        case Read::kValue:
          return f.type == prometheus::MetricType::Gauge ? m.gauge.value
                                                         : m.counter.value;
      }
    }
  }
  return -1;
}

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_METRIC_READER_H_
