#include "plugin/nic_steering.h"

#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "pitstop/nic_plan.h"
#include "plugin/plugin_sync.h"

namespace pitstop::plugin {
namespace {

constexpr char kTopoEnv[] = "NCCL_TOPO_FILE";

// Process-wide: the variable as the user had it, and the creations in
// flight that set it.
struct State {
  int in_flight = 0;
  std::string ours;       // the file we pointed the variable at
  bool user_had = false;  // the user's NCCL_TOPO_FILE, to put back
  std::string user_value;
  bool left_set = false;  // left for a non-blocking init
};
Mutex g_mu;
State* g_state PLUGIN_GUARDED_BY(g_mu) = nullptr;

bool InfoLogging() {
  const char* d = std::getenv("NCCL_DEBUG");
  return d != nullptr &&
         (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0);
}

// NCCL's logger is not ours before the profiler's first init (which runs
// inside the creation): stderr, in NCCL's INFO format, when NCCL_DEBUG asks.
void Info(const std::string& msg) {
  if (!InfoLogging()) return;
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "%s:%d:%d [pitstop] NCCL INFO PITSTOP/NicPlan: %s\n",
               host, getpid(), getpid(), msg.c_str());
}
void Warn(const std::string& msg) {
  std::fprintf(stderr, "[pitstop] NCCL WARN PITSTOP/NicPlan: %s\n",
               msg.c_str());
}

std::string JobId() {
  for (const char* v :
       {"PITSTOP_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && s[0] != '\0') return s;
  }
  return "";
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// The node's topology to filter: the user's NCCL_TOPO_FILE, else
// $PITSTOP_NCCL_TOPO_BASE, else NCCL's default location.
std::string BasePath(const State& st) {
  if (st.user_had && !st.user_value.empty()) return st.user_value;
  const char* b = std::getenv(nicplan::kBaseTopoEnv);
  if (b != nullptr && b[0] != '\0') return b;
  return nicplan::kNcclDefaultTopo;
}

// Writes `text` to a file of a new name in `dir` (a shared directory such
// as /tmp): mkostemps picks a name nobody can predict and creates it with
// O_CREAT|O_EXCL, mode 0600, so a name another user planted (a link, a
// file of theirs) is never followed, truncated or written (round 21,
// R21-5). The path, or "" with the reason in `error`.
std::string WriteNewFile(const std::string& dir, const std::string& text,
                         std::string* error) {
  std::string path =
      dir + "/pitstop-nccl-topo-" + std::to_string(getpid()) + "-XXXXXX.xml";
  const int fd = mkostemps(path.data(), 4, O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *error = dir + ": " + std::strerror(errno);
    return "";
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = path + ": " + (n < 0 ? std::strerror(errno) : "short write");
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 && done == text.size()) {
    *error = path + ": " + std::strerror(errno);
    done = 0;
  }
  if (done < text.size()) {
    unlink(path.c_str());
    return "";
  }
  return path;
}

// Builds the filtered topology for `e`; "" when it cannot (logged).
std::string MakeTopology(const State& st, const nicplan::NicPlanEntry& e) {
  const std::string base = BasePath(st);
  std::string xml;
  if (!ReadFile(base, &xml)) {
    Warn("job " + e.job + " plan epoch " + std::to_string(e.epoch) +
         ": no base topology to apply the NIC set to (" + base +
         " unreadable; set " + nicplan::kBaseTopoEnv +
         " to the node's NCCL topology XML): NCCL picks the NICs");
    return "";
  }
  std::string filtered, error;
  std::vector<std::string> names;
  if (!nicplan::FilterTopologyXml(xml, e.nics, &filtered, &names, &error)) {
    Warn(base + ": " + error + ": NCCL picks the NICs");
    return "";
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = WriteNewFile(
      tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp", filtered, &error);
  if (path.empty()) {
    Warn(error + ": cannot write the filtered topology: NCCL picks the NICs");
    return "";
  }
  std::string list;
  for (const std::string& s : names) list += (list.empty() ? "" : ",") + s;
  Info("comm ranks " + std::to_string(e.n_ranks) + ": plan epoch " +
       std::to_string(e.epoch) + " of job " + e.job + ": NICs " + list +
       " (others demoted) in " + path);
  return path;
}

// Puts the user's NCCL_TOPO_FILE back (or none) and removes our file.
void Restore(State& st) PLUGIN_REQUIRES(g_mu) {
  if (st.user_had) {
    setenv(kTopoEnv, st.user_value.c_str(), 1);
  } else {
    unsetenv(kTopoEnv);
  }
  if (!st.ours.empty()) unlink(st.ours.c_str());
  st.ours.clear();
  st.left_set = false;
}

}  // namespace

NicSteering NicSteering::Begin(uint64_t comm_hash, int n_ranks) noexcept {
  NicSteering s;
  try {
    std::vector<nicplan::NicPlanEntry> entries;
    std::string error;
    const std::string plan_path = nicplan::ResolveNicPlanPath("", "");
    const bool have_plan = nicplan::ReadNicPlan(plan_path, &entries, &error);
    MutexLock lock(&g_mu);
    if (g_state == nullptr) g_state = new State();
    State& st = *g_state;
    if (st.in_flight == 0) {
      if (st.left_set) {
        // Ours, left for a non-blocking init: put the user's back.
        Restore(st);
      } else {
        const char* v = std::getenv(kTopoEnv);
        st.user_had = v != nullptr;
        st.user_value = v != nullptr ? v : "";
      }
    }
    ++st.in_flight;
    s.counted_ = true;
    if (!have_plan) return s;  // no plan on this node (yet)
    const nicplan::NicPlanEntry* e =
        nicplan::MatchNicPlan(entries, JobId(), comm_hash, n_ranks);
    if (e == nullptr || e->nics.empty()) return s;
    if (st.in_flight > 1) {
      Warn(
          "another communicator is being created in this process at the "
          "same time: plan epoch " +
          std::to_string(e->epoch) + " not applied to this one");
      return s;
    }
    const std::string path = MakeTopology(st, *e);
    if (path.empty()) return s;
    setenv(kTopoEnv, path.c_str(), 1);
    st.ours = path;
    s.applied_ = true;
    s.topo_file_ = path;
  } catch (...) {
  }
  return s;
}

void NicSteering::End(bool in_progress) noexcept {
  if (!counted_) return;
  MutexLock lock(&g_mu);
  State& st = *g_state;
  if (--st.in_flight > 0) return;
  if (in_progress && !st.ours.empty()) {
    st.left_set = true;  // NCCL's init thread reads it later
    return;
  }
  if (!st.ours.empty()) Restore(st);
}

}  // namespace pitstop::plugin
