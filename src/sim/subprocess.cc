#include "src/sim/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"

extern char** environ;

namespace pitstop::sim {
namespace {

// Everything the child needs, built before fork: after fork only
// async-signal-safe calls are allowed (the parent may have gRPC threads).
struct ExecImage {
  std::vector<std::string> args;
  std::vector<std::string> envs;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

void BuildImage(const SubprocessOptions& options, ExecImage* image) {
  image->args = options.argv;
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  for (const auto& [k, v] : env) image->envs.push_back(absl::StrCat(k, "=", v));
  for (auto& a : image->args) image->argv.push_back(a.data());
  image->argv.push_back(nullptr);
  for (auto& e : image->envs) image->envp.push_back(e.data());
  image->envp.push_back(nullptr);
}

[[noreturn]] void ExecChild(const ExecImage& image, int log_fd, pid_t parent) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // parent already gone
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  execve(image.argv[0], image.argv.data(), image.envp.data());
  _exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const SubprocessOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("Subprocess: empty argv");
  }
  const std::string& path = options.argv[0];
  if (access(path.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("not an executable file: ", path,
                                            " (", std::strerror(errno), ")"));
  }
  ExecImage image;
  BuildImage(options, &image);
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot open log ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) ExecChild(image, log_fd, parent);
  const int fork_errno = errno;
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return std::unique_ptr<Subprocess>(new Subprocess(pid, std::move(name)));
}

Subprocess::~Subprocess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    Reap(/*block=*/true);
  }
}

bool Subprocess::Reap(bool block) {
  if (exited_) return true;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r == pid_) {
      exited_ = true;
      wait_status_ = status;
      return true;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {  // ECHILD: someone else reaped it
      exited_ = true;
      return true;
    }
    return false;
  }
}

bool Subprocess::Running() { return !Reap(/*block=*/false); }

void Subprocess::Signal(int signal) {
  if (!Reap(/*block=*/false)) kill(pid_, signal);
}

bool Subprocess::Wait(absl::Duration timeout) {
  const int64_t deadline = MonotonicNowNs() + absl::ToInt64Nanoseconds(timeout);
  while (!Reap(/*block=*/false)) {
    if (MonotonicNowNs() >= deadline) return false;
    usleep(5000);
  }
  return true;
}

int Subprocess::Stop(absl::Duration grace) {
  Signal(SIGTERM);
  return WaitOrKill(grace);
}

int Subprocess::WaitOrKill(absl::Duration grace) {
  if (!Wait(grace)) {
    Signal(SIGKILL);
    Reap(/*block=*/true);
  }
  return wait_status_;
}

std::string Subprocess::DescribeExit() const {
  if (!exited_) return "running";
  if (WIFEXITED(wait_status_)) {
    return absl::StrCat("exit ", WEXITSTATUS(wait_status_));
  }
  if (WIFSIGNALED(wait_status_)) {
    const int sig = WTERMSIG(wait_status_);
    return absl::StrCat("signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("status ", wait_status_);
}

}  // namespace pitstop::sim
