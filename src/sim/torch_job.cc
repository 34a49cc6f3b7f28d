#include "src/sim/torch_job.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/clock.h"
#include "pitstop/status_macros.h"

namespace pitstop::sim {
namespace {

namespace fs = std::filesystem;

// A /proc file with read(2): a process may end between the listing and
// the read, which fails with ESRCH, and libstdc++'s filebuf throws on a
// failed read. Empty on any error.
std::string ReadProcFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.clear();
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// A port the kernel considers free now, for torchrun's static rendezvous
// (its --master_port cannot be 0). Another process may take it before
// torchrun binds it; the run then fails at start with torchrun's error.
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return absl::InternalError(
        absl::StrCat("bind 127.0.0.1:0: ", std::strerror(err)));
  }
  return ntohs(addr.sin_port);
}

// The parent pid in /proc/<pid>/stat: the field after the command name,
// which is in parentheses and may itself hold spaces or parentheses.
pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 4 >= stat.size()) return 0;
  // ") S 1234 ..."
  const size_t start = stat.find(' ', close + 2);
  if (start == std::string::npos) return 0;
  const size_t end = stat.find(' ', start + 1);
  int ppid = 0;
  if (!absl::SimpleAtoi(stat.substr(start + 1, end - start - 1), &ppid)) {
    return 0;
  }
  return ppid;
}

// The NUL-separated strings of /proc/<pid>/<file>.
std::vector<std::string> NulSeparated(pid_t pid, const char* file) {
  const std::string raw = ReadProcFile(absl::StrCat("/proc/", pid, "/", file));
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t end = raw.find('\0', pos);
    if (end == std::string::npos) end = raw.size();
    out.push_back(raw.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// Each thread's wait channel (/proc/<pid>/task/*/wchan), counted: the
// kernel function a blocked thread sleeps in, "running" for one on a CPU.
std::string ThreadWaits(pid_t pid, int* threads) {
  std::vector<std::pair<std::string, int>> waits;
  std::error_code ec;
  for (fs::directory_iterator it(absl::StrCat("/proc/", pid, "/task"), ec), end;
       !ec && it != end; it.increment(ec)) {
    std::string w = ReadProcFile(it->path().string() + "/wchan");
    if (w.empty() || w == "0") w = "running";
    ++*threads;
    auto at = std::find_if(waits.begin(), waits.end(),
                           [&](const auto& e) { return e.first == w; });
    if (at == waits.end()) {
      waits.emplace_back(w, 1);
    } else {
      ++at->second;
    }
  }
  return absl::StrJoin(waits, ", ", [](std::string* out, const auto& e) {
    absl::StrAppend(
        out, e.first,
        e.second > 1 ? absl::StrCat(" x", e.second) : std::string());
  });
}

}  // namespace

std::string DescribeProcess(pid_t pid) {
  const std::string stat = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t open = stat.find('(');
  const size_t close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos ||
      close + 2 >= stat.size()) {
    return absl::StrCat("pid ", pid, ": gone");
  }
  int threads = 0;
  const std::string waits = ThreadWaits(pid, &threads);
  return absl::StrCat("pid ", pid, " (",
                      stat.substr(open + 1, close - open - 1), ") state ",
                      stat.substr(close + 2, 1), ", ", threads,
                      " threads, waiting in: ", waits);
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  // increment(ec), not ++: the range-for's ++ throws on an error.
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
    if (ParentOf(pid) == parent) out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> DescendantsOf(pid_t root) {
  std::vector<pid_t> out;
  for (pid_t child : ChildrenOf(root)) {
    for (pid_t d : DescendantsOf(child)) out.push_back(d);
    out.push_back(child);
  }
  return out;
}

std::string EnvironOf(pid_t pid, const std::string& name) {
  const std::string env = ReadProcFile(absl::StrCat("/proc/", pid, "/environ"));
  const std::string key = name + "=";
  size_t pos = 0;
  while (pos < env.size()) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (env.compare(pos, key.size(), key) == 0) {
      return env.substr(pos + key.size(), end - pos - key.size());
    }
    pos = end + 1;
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> EnvironmentOf(pid_t pid) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& kv : NulSeparated(pid, "environ")) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos)
      out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

std::vector<std::string> CommandLineOf(pid_t pid) {
  return NulSeparated(pid, "cmdline");
}

absl::StatusOr<std::unique_ptr<TorchJob>> TorchJob::Start(
    const TorchJobOptions& options) {
  if (options.nodes < 1 || options.ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        "TorchJob: nodes and ranks_per_node must be >= 1");
  }
  if (!options.plugin.empty() &&
      (static_cast<int>(options.agent_sockets.size()) != options.nodes ||
       static_cast<int>(options.hosts.size()) != options.nodes)) {
    return absl::InvalidArgumentError(
        "TorchJob: one agent socket and host name per node");
  }
  std::error_code ec;
  if (!fs::is_regular_file(options.script, ec)) {
    return absl::NotFoundError(
        absl::StrCat("the torch job's script ", options.script,
                     " is not there (set PITSTOP_TORCH_JOB to its path)"));
  }
  std::unique_ptr<TorchJob> job(new TorchJob(options));
  fs::create_directories(options.out_dir, ec);
  fs::create_directories(options.log_dir, ec);
  ASSIGN_OR_RETURN(job->port_, FreePort());
  for (int node = 0; node < options.nodes; ++node) {
    SubprocessOptions so;
    so.argv = job->Argv(node, job->port_);
    so.env = options.env;
    so.env.emplace_back("OMP_NUM_THREADS", "1");
    so.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
    so.env.emplace_back("PYTHONUNBUFFERED", "1");
    if (!options.plugin.empty()) {
      so.env.emplace_back("LD_PRELOAD", options.plugin);
      so.env.emplace_back("PITSTOP_AGENT_SOCKET", options.agent_sockets[node]);
      so.env.emplace_back("PITSTOP_HOST", options.hosts[node]);
      so.env.emplace_back("PITSTOP_JOB_ID", options.job_id);
    }
    so.log_path = job->torchrun_log(node);
    ASSIGN_OR_RETURN(auto p, Subprocess::Start(so));
    job->torchruns_.push_back(std::move(p));
  }
  return job;
}

TorchJob::~TorchJob() { Kill(); }

std::vector<std::string> TorchJob::DescribeRunning() {
  std::vector<std::string> out;
  for (int node = 0; node < options_.nodes; ++node) {
    Subprocess& t = *torchruns_[node];
    if (!t.Running()) continue;
    const std::string who = absl::StrCat("torchrun node", node);
    out.push_back(absl::StrCat(who, ": ", DescribeProcess(t.pid())));
    for (pid_t pid : DescendantsOf(t.pid())) {
      const std::string rank = EnvironOf(pid, "RANK");
      out.push_back(absl::StrCat(
          "  under ", who, rank.empty() ? "" : absl::StrCat(", rank ", rank),
          ": ", DescribeProcess(pid)));
    }
  }
  return out;
}

std::string TorchJob::torchrun_log(int node) const {
  return absl::StrCat(options_.log_dir, "/torchrun-node", node, ".log");
}

std::vector<std::string> TorchJob::Argv(int node, int port) const {
  std::vector<std::string> argv = {
      options_.torchrun,
      "--nnodes",
      absl::StrCat(options_.nodes),
      "--node_rank",
      absl::StrCat(node),
      "--nproc_per_node",
      absl::StrCat(options_.ranks_per_node),
      "--master_addr",
      "127.0.0.1",
      "--master_port",
      absl::StrCat(port),
      "--redirects",
      "2",
      "--tee",
      "2",
      "--log_dir",
      absl::StrCat(options_.log_dir, "/torchrun-node", node),
      options_.script};
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  argv.insert(argv.end(), {"--out", options_.out_dir});
  return argv;
}

absl::Status TorchJob::FindWorkers(absl::Duration timeout) {
  const int64_t deadline = MonotonicNowNs() + absl::ToInt64Nanoseconds(timeout);
  while (true) {
    for (int node = 0; node < options_.nodes; ++node) {
      for (pid_t child : ChildrenOf(torchruns_[node]->pid())) {
        int rank = -1;
        if (!absl::SimpleAtoi(EnvironOf(child, "RANK"), &rank) || rank < 0 ||
            rank >= world() || NodeOf(rank) != node) {
          continue;
        }
        workers_[rank] = child;
      }
    }
    std::vector<int> missing;
    for (int r = 0; r < world(); ++r) {
      if (workers_[r] == 0) missing.push_back(r);
    }
    if (missing.empty()) return absl::OkStatus();
    const bool ended = Running() < options_.nodes;
    if (ended || MonotonicNowNs() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the workers of rank(s) ", absl::StrJoin(missing, ","),
                       ended ? " never started: a torchrun ended"
                             : absl::StrCat(" did not start within ",
                                            absl::FormatDuration(timeout)),
                       " (logs ", options_.log_dir, "/torchrun-node*.log)"));
    }
    usleep(50000);
  }
}

int TorchJob::StepsDone(int rank) {
  const std::string path =
      absl::StrCat(options_.out_dir, "/losses-rank", rank, ".jsonl");
  std::ifstream in(path, std::ios::binary);
  if (!in) return steps_[rank];
  in.seekg(static_cast<std::streamoff>(log_offsets_[rank]));
  const std::string more(std::istreambuf_iterator<char>(in), {});
  // Whole lines only: the writer may be in the middle of one.
  const size_t end = more.rfind('\n');
  if (end == std::string::npos) return steps_[rank];
  size_t pos = 0;
  while (pos <= end) {
    const size_t nl = more.find('\n', pos);
    if (more.compare(pos, 8, "{\"step\":") == 0 &&
        more.substr(pos, nl - pos).find("\"loss\"") != std::string::npos) {
      ++steps_[rank];
    }
    pos = nl + 1;
  }
  log_offsets_[rank] += end + 1;
  return steps_[rank];
}

int TorchJob::Running() {
  int n = 0;
  for (auto& t : torchruns_) n += t->Running();
  return n;
}

std::vector<std::string> TorchJob::Exits() {
  std::vector<std::string> out;
  for (auto& t : torchruns_) {
    t->Running();  // reaps it if it just exited
    out.push_back(t->DescribeExit());
  }
  return out;
}

bool TorchJob::AllExitedCleanly() {
  for (auto& t : torchruns_) {
    if (t->Running() || t->wait_status() != 0) return false;
  }
  return true;
}

void TorchJob::Kill() {
  for (auto& t : torchruns_) {
    if (!t->Running()) continue;
    // Workers first: torchrun would otherwise see them die and restart or
    // signal them itself meanwhile.
    for (pid_t pid : DescendantsOf(t->pid())) kill(pid, SIGKILL);
    t->Signal(SIGKILL);
    t->Wait(absl::Seconds(10));
  }
  // A worker whose torchrun was already gone (reparented) is found by its
  // pid, checked against what it was: its rank and this job's port.
  for (int r = 0; r < world(); ++r) {
    const pid_t pid = workers_[r];
    if (pid > 0 && EnvironOf(pid, "RANK") == absl::StrCat(r) &&
        EnvironOf(pid, "MASTER_PORT") == absl::StrCat(port_)) {
      kill(pid, SIGKILL);
    }
  }
}

}  // namespace pitstop::sim
