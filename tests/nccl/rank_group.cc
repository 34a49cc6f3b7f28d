#include "tests/nccl/rank_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace pitstop::testing {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

pid_t Spawn(const std::vector<std::string>& argv,
            const std::vector<std::string>& env_strings,
            const std::string& stderr_path) {
  std::vector<char*> args, envp;
  std::vector<std::string> a = argv, e = env_strings;
  for (auto& s : a) args.push_back(s.data());
  args.push_back(nullptr);
  for (auto& s : e) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

}  // namespace

std::vector<RankResult> RunRanks(
    int n_ranks, const std::vector<std::vector<std::string>>& argv,
    const std::map<std::string, std::string>& env, const std::string& work_dir,
    int deadline_s) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) {
      merged[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
  }
  for (const auto& [k, v] : env) {
    if (!k.empty() && k[0] == '-') {
      merged.erase(k.substr(1));  // "-KEY": unset KEY
    } else {
      merged[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);

  std::vector<RankResult> results(n_ranks);
  std::vector<pid_t> pids(n_ranks, -1);
  std::vector<int> pidfds(n_ranks, -1);
  for (int r = 0; r < n_ranks; ++r) {
    pids[r] = Spawn(argv[r], env_strings,
                    absl::StrCat(work_dir, "/rank", r, ".stderr"));
    if (pids[r] > 0) {
      pidfds[r] = static_cast<int>(syscall(SYS_pidfd_open, pids[r], 0));
    }
  }
  // Wait on the pidfds (readable when the process exits) until the deadline.
  const int64_t deadline = NowMs() + int64_t{deadline_s} * 1000;
  int running = 0;
  for (int r = 0; r < n_ranks; ++r) running += pidfds[r] >= 0;
  while (running > 0) {
    std::vector<pollfd> fds;
    for (int r = 0; r < n_ranks; ++r) {
      if (pidfds[r] >= 0) fds.push_back({pidfds[r], POLLIN, 0});
    }
    const int64_t left = deadline - NowMs();
    if (left <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) continue;
    for (int r = 0; r < n_ranks; ++r) {
      if (pidfds[r] < 0) continue;
      pollfd p{pidfds[r], POLLIN, 0};
      if (poll(&p, 1, 0) == 1) {
        waitpid(pids[r], &results[r].status, 0);
        close(pidfds[r]);
        pidfds[r] = -1;
        --running;
      }
    }
  }
  for (int r = 0; r < n_ranks; ++r) {
    if (pidfds[r] >= 0) {  // past the deadline: kill and reap
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &results[r].status, 0);
      results[r].timed_out = true;
      close(pidfds[r]);
    }
    std::ifstream in(absl::StrCat(work_dir, "/rank", r, ".stderr"));
    std::stringstream ss;
    ss << in.rdbuf();
    results[r].stderr_text = ss.str();
  }
  return results;
}

std::string Describe(const std::vector<RankResult>& results) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    const RankResult& x = results[r];
    absl::StrAppend(&out, "rank ", r, ": ");
    if (x.timed_out) {
      absl::StrAppend(&out, "TIMED OUT (killed)");
    } else if (x.status == -1) {
      absl::StrAppend(&out, "did not start");
    } else if (WIFEXITED(x.status)) {
      absl::StrAppend(&out, "exit ", WEXITSTATUS(x.status));
    } else {
      absl::StrAppend(&out, "signal ", WTERMSIG(x.status));
    }
    absl::StrAppend(&out, "\n", x.stderr_text);
  }
  return out;
}

bool AllExitedZero(const std::vector<RankResult>& results) {
  for (const RankResult& x : results) {
    if (x.timed_out || x.status == -1 || !WIFEXITED(x.status) ||
        WEXITSTATUS(x.status) != 0) {
      return false;
    }
  }
  return true;
}

std::string UniqueIdHex(const void* id, size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(id);
  for (size_t i = 0; i < bytes; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  return out;
}

}  // namespace pitstop::testing
