// Made-up Flight Recorder JSON dumps shared by the importer tests.
#ifndef PITSTOP_TESTS_IMPORTERS_FR_TEST_UTIL_H_
#define PITSTOP_TESTS_IMPORTERS_FR_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"

namespace pitstop::importers {

// "[0, 1, ..., n-1]" as Flight Recorder prints a rank list.
inline std::string AllRanks(int n) {
  std::string all = "[";
  for (int k = 0; k < n; ++k) absl::StrAppend(&all, k ? ", " : "", k);
  return all + "]";
}

// One rank's dump in a job whose group "1" (TP) has `n` members: group "0"
// (default_pg, members `ranks0` as text) all completed up to 5; group "1"
// with all_reduces 6..8, completed up to 7, this rank's last enqueued
// `last`.
inline nlohmann::json FrDoc(int n, int64_t last, const std::string& ranks0) {
  using nlohmann::json;
  std::string all = AllRanks(n);
  json entries = json::array();
  for (int seq = 6; seq <= std::min<int64_t>(last, 8); ++seq) {
    entries.push_back({{"record_id", seq},
                       {"pg_id", 1},
                       {"process_group", {"1", "TP"}},
                       {"collective_seq_id", seq},
                       {"p2p_seq_id", 0},
                       {"profiling_name", "nccl:all_reduce"},
                       {"input_sizes", {{1024}}},
                       {"input_dtypes", {"Float"}},
                       {"state", seq <= 7 ? "completed" : "scheduled"},
                       {"time_created_ns", 1000 * seq},
                       {"is_p2p", false}});
  }
  auto status = [](int64_t enq, int64_t done) {
    return json{{"last_enqueued_collective", enq},
                {"last_started_collective", -1},
                {"last_completed_collective", done}};
  };
  return {{"version", "2.9"},
          {"pg_config",
           {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", ranks0}}},
            {"1", {{"name", "1"}, {"desc", "TP"}, {"ranks", all}}}}},
          {"pg_status", {{"0", status(5, 5)}, {"1", status(last, 7)}}},
          {"entries", entries}};
}

}  // namespace pitstop::importers

#endif  // PITSTOP_TESTS_IMPORTERS_FR_TEST_UTIL_H_
