#include "src/sim/local_cluster.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "pitstop/clock.h"
#include "pitstop/status_macros.h"

namespace pitstop::sim {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBuildSubdirs[] = {
    "src/agent",        "src/controller", "src/trainer", "src/sim",
    "tools/pitstopctl", "tools/pitstop",  "plugin",      "src/nccl/cpu/lib"};

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string SelfExeDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.parent_path().string();
}

bool SocketAccepts(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// Port from a port file ("PORT\n"); 0 while not (completely) written.
int ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty() || text.back() != '\n') return 0;
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) return 0;
  return port;
}

std::string LogTail(const std::string& path, size_t max_bytes = 2000) {
  std::ifstream in(path);
  if (!in) return "(no log)";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > max_bytes)
    text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

// Polls `ready` every 20 ms until true, the process exits, or timeout.
absl::Status WaitReady(Subprocess* process, const std::string& what,
                       const std::string& log, absl::Duration timeout,
                       const std::function<bool()>& ready) {
  const int64_t deadline = MonotonicNowNs() + absl::ToInt64Nanoseconds(timeout);
  while (!ready()) {
    if (!process->Running()) {
      return absl::InternalError(absl::StrCat(
          what, " exited before it was ready (", process->DescribeExit(),
          "); log ", log, ":\n", LogTail(log)));
    }
    if (MonotonicNowNs() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " not ready after ", absl::FormatDuration(timeout),
                       "; log ", log, ":\n", LogTail(log)));
    }
    usleep(20000);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FindPitstopBinary(const std::string& name) {
  std::vector<std::string> tried;
  auto probe = [&](const std::string& dir) -> std::string {
    std::vector<std::string> candidates = {dir + "/" + name};
    for (const char* sub : kBuildSubdirs) {
      candidates.push_back(absl::StrCat(dir, "/", sub, "/", name));
    }
    for (const std::string& c : candidates) {
      if (IsFile(c)) return c;
      tried.push_back(c);
    }
    return "";
  };
  if (const char* env = getenv("PITSTOP_BIN_DIR"); env != nullptr && *env) {
    if (std::string found = probe(env); !found.empty()) return found;
  }
  fs::path dir = SelfExeDir();
  while (!dir.empty()) {
    if (std::string found = probe(dir.string()); !found.empty()) return found;
    if (dir == dir.root_path()) break;
    dir = dir.parent_path();
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", name,
      "; build it (cmake --build <build> --target ...) or set "
      "PITSTOP_BIN_DIR. Tried: ",
      absl::StrJoin(tried.begin(),
                    tried.begin() + std::min<size_t>(tried.size(), 8), ", "),
      tried.size() > 8 ? ", ..." : ""));
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (options.nodes < 1) {
    return absl::InvalidArgumentError("LocalCluster: nodes must be >= 1");
  }
  if (!options.host_names.empty() &&
      static_cast<int>(options.host_names.size()) != options.nodes) {
    return absl::InvalidArgumentError(
        "LocalCluster: host_names must have one name per node");
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(options));
  cluster->controller_path_ = options.controller_path;
  if (cluster->controller_path_.empty()) {
    ASSIGN_OR_RETURN(cluster->controller_path_,
                     FindPitstopBinary("pitstop-controller"));
  }
  cluster->agent_path_ = options.agent_path;
  if (cluster->agent_path_.empty()) {
    ASSIGN_OR_RETURN(cluster->agent_path_, FindPitstopBinary("pitstop-agent"));
  }
  if (options.work_dir.empty()) {
    char tmpl[] = "/tmp/pitstop-sim-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return absl::InternalError(
          absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    cluster->work_dir_ = tmpl;
    cluster->owns_work_dir_ = !options.keep_work_dir;
  } else {
    std::error_code ec;
    fs::create_directories(options.work_dir, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", options.work_dir, ": ", ec.message()));
    }
    cluster->work_dir_ = options.work_dir;
  }
  for (int i = 0; i < options.nodes; ++i) {
    Agent agent;
    agent.host = options.host_names.empty() ? absl::StrCat("node", i)
                                            : options.host_names[i];
    agent.socket = absl::StrCat(cluster->work_dir_, "/agent", i, ".sock");
    agent.shm_socket =
        absl::StrCat(cluster->work_dir_, "/agent", i, "-shm.sock");
    if (agent.shm_socket.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "socket path too long (>= 108 bytes): ", agent.shm_socket));
    }
    cluster->agents_.push_back(std::move(agent));
  }
  RETURN_IF_ERROR(cluster->StartController(0));
  for (int i = 0; i < options.nodes; ++i) {
    RETURN_IF_ERROR(cluster->StartAgent(i));
  }
  for (int i = 0; i < options.nodes; ++i) {
    Agent& a = cluster->agents_[i];
    RETURN_IF_ERROR(WaitReady(
        a.process.get(), "pitstop-agent " + a.host, cluster->agent_log(i),
        options.ready_timeout, [&a] {
          return SocketAccepts(a.socket) && SocketAccepts(a.shm_socket);
        }));
  }
  return cluster;
}

LocalCluster::~LocalCluster() {
  (void)Shutdown(absl::Seconds(3));
  if (owns_work_dir_) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }
}

std::string LocalCluster::controller_address() const {
  return absl::StrCat("127.0.0.1:", controller_port_);
}

std::string LocalCluster::agent_log(int i) const {
  return absl::StrCat(work_dir_, "/agent-", agents_[i].host, ".log");
}

std::string LocalCluster::tuner_table(int i) const {
  return absl::StrCat(work_dir_, "/tuner-", agents_[i].host);
}

absl::Status LocalCluster::StartController(int port) {
  const std::string port_file = work_dir_ + "/controller.port";
  unlink(port_file.c_str());
  SubprocessOptions opts;
  opts.argv = {
      controller_path_, "--listen",          absl::StrCat("127.0.0.1:", port),
      "--port-file",    port_file,           "--db",
      database_path(),  "--metrics-address", "",
      "--log-level",    options_.log_level};
  if (!options_.controller_config.empty()) {
    opts.argv.push_back("--config");
    opts.argv.push_back(options_.controller_config);
  }
  for (const auto& a : options_.controller_extra_args) opts.argv.push_back(a);
  opts.log_path = controller_log();
  ASSIGN_OR_RETURN(controller_, Subprocess::Start(opts));
  int bound = 0;
  RETURN_IF_ERROR(WaitReady(controller_.get(), "pitstop-controller",
                            controller_log(), options_.ready_timeout, [&] {
                              return (bound = ReadPortFile(port_file)) > 0;
                            }));
  controller_port_ = bound;
  return absl::OkStatus();
}

absl::Status LocalCluster::StartAgent(int i) {
  Agent& a = agents_[i];
  unlink(a.socket.c_str());
  unlink(a.shm_socket.c_str());
  SubprocessOptions opts;
  opts.argv = {agent_path_,
               "--ingest-socket",
               a.socket,
               "--ingest-shm-socket",
               a.shm_socket,
               "--controller",
               controller_address(),
               "--host",
               a.host,
               "--batch-ms",
               absl::StrCat(options_.agent_batch_ms),
               "--metrics-address",
               "",
               "--log-level",
               options_.log_level,
               "--tuner-table",
               tuner_table(i)};
  for (const auto& arg : options_.agent_extra_args) opts.argv.push_back(arg);
  if (auto it = options_.agent_args_by_node.find(i);
      it != options_.agent_args_by_node.end()) {
    for (const auto& arg : it->second) opts.argv.push_back(arg);
  }
  opts.log_path = agent_log(i);
  ASSIGN_OR_RETURN(a.process, Subprocess::Start(opts));
  return absl::OkStatus();
}

bool LocalCluster::ControllerRunning() {
  return controller_ != nullptr && controller_->Running();
}

bool LocalCluster::AgentRunning(int i) {
  return i >= 0 && i < nodes() && agents_[i].process != nullptr &&
         agents_[i].process->Running();
}

absl::Status LocalCluster::KillAgent(int i, int signal) {
  if (i < 0 || i >= nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("no node ", i));
  }
  if (agents_[i].process == nullptr) return absl::OkStatus();
  agents_[i].process->Signal(signal);
  if (signal == SIGKILL || signal == SIGTERM) {
    agents_[i].process->Wait(absl::Seconds(5));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartAgent(int i) {
  if (i < 0 || i >= nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("no node ", i));
  }
  Agent& a = agents_[i];
  if (a.process != nullptr) a.process->Stop(absl::Seconds(3));
  RETURN_IF_ERROR(StartAgent(i));
  return WaitReady(
      a.process.get(), "pitstop-agent " + a.host, agent_log(i),
      options_.ready_timeout,
      [&a] { return SocketAccepts(a.socket) && SocketAccepts(a.shm_socket); });
}

absl::Status LocalCluster::KillController(int signal) {
  if (controller_ == nullptr) return absl::OkStatus();
  controller_->Signal(signal);
  if (signal == SIGKILL || signal == SIGTERM) {
    controller_->Wait(absl::Seconds(5));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartController() {
  if (controller_ != nullptr) controller_->Stop(absl::Seconds(3));
  return StartController(controller_port_);
}

absl::Status LocalCluster::Shutdown(absl::Duration grace) {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  std::vector<std::string> unclean;
  // One SIGTERM each: a second one may kill a daemon that already restored
  // its default signal disposition while shutting down.
  auto stop = [&](Subprocess* p, const std::string& what, bool was_running) {
    if (p == nullptr) return;
    const int status = p->WaitOrKill(grace);
    if (was_running && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      unclean.push_back(absl::StrCat(what, ": ", p->DescribeExit()));
    }
  };
  std::vector<bool> running;
  for (auto& a : agents_) {
    running.push_back(a.process != nullptr && a.process->Running());
    if (running.back()) a.process->Signal(SIGTERM);
  }
  for (size_t i = 0; i < agents_.size(); ++i) {
    stop(agents_[i].process.get(), "pitstop-agent " + agents_[i].host,
         running[i]);
  }
  const bool controller_running = ControllerRunning();
  if (controller_running) controller_->Signal(SIGTERM);
  stop(controller_.get(), "pitstop-controller", controller_running);
  if (!unclean.empty()) {
    return absl::InternalError(
        absl::StrCat("unclean shutdown: ", absl::StrJoin(unclean, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::sim
