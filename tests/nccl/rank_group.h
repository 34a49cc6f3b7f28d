// Runs N ranks of a test program as real processes and waits for all of
// them with a deadline (a hung rank is killed and reported, never waited
// for forever). Shared by the CPU NCCL backend and trainer tests.
#ifndef PITSTOP_TESTS_NCCL_RANK_GROUP_H_
#define PITSTOP_TESTS_NCCL_RANK_GROUP_H_

#include <map>
#include <string>
#include <vector>

namespace pitstop::testing {

struct RankResult {
  int status = -1;         // waitpid status; -1: could not start
  bool timed_out = false;  // killed at the deadline
  std::string stderr_text;
};

// argv[rank] is each rank's command line; env is added to this process's
// environment (a key "-KEY" unsets KEY). Each rank's stderr goes to a file
// under `work_dir` and is returned.
std::vector<RankResult> RunRanks(
    int n_ranks, const std::vector<std::vector<std::string>>& argv,
    const std::map<std::string, std::string>& env, const std::string& work_dir,
    int deadline_s);

// "rank R: exit 0" lines for a failure message.
std::string Describe(const std::vector<RankResult>& results);
bool AllExitedZero(const std::vector<RankResult>& results);

// A unique id from the CPU backend's ncclGetUniqueId, as hex for argv.
std::string UniqueIdHex(const void* id, size_t bytes);

}  // namespace pitstop::testing

#endif  // PITSTOP_TESTS_NCCL_RANK_GROUP_H_
