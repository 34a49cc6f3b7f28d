#include "src/controller/actions/command_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace pitstop::controller {
namespace {

constexpr size_t kOutputTail = 4096;
constexpr absl::Duration kKillGrace = absl::Seconds(2);

// Closes the fds it holds when it goes out of scope.
struct Fds {
  int fd[4] = {-1, -1, -1, -1};
  ~Fds() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  void Close(int i) {
    if (fd[i] >= 0) close(fd[i]);
    fd[i] = -1;
  }
};

std::vector<std::string> MergedEnv(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    env[kv.substr(0, kv.find('='))] = kv;
  }
  for (const std::string& kv : extra) env[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, kv] : env) out.push_back(std::move(kv));
  return out;
}

void AppendTail(std::string* out, const char* data, size_t n) {
  out->append(data, n);
  if (out->size() > 2 * kOutputTail) out->erase(0, out->size() - kOutputTail);
}

// A socket for the child's stdin (so that writing to a command that exited
// or closed it gives EPIPE with MSG_NOSIGNAL instead of SIGPIPE in the
// controller) and a pipe for its output.
absl::Status OpenPipes(Fds* fds) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  fds->fd[0] = sp[0];
  fds->fd[1] = sp[1];
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  fds->fd[2] = pp[0];
  fds->fd[3] = pp[1];
  shutdown(fds->fd[1], SHUT_WR);  // the child only reads its stdin
  return absl::OkStatus();
}

// Starts the command in its own process group (a timeout kills the command
// and its children) with the signal mask and dispositions reset (the
// controller blocks SIGTERM for its signal thread; commands must not
// inherit that).
absl::StatusOr<pid_t> Spawn(const CommandSpec& spec, const Fds& fds) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds.fd[1], 0);
  posix_spawn_file_actions_adddup2(&fa, fds.fd[3], 1);
  posix_spawn_file_actions_adddup2(&fa, fds.fd[3], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const std::string& a : spec.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env = MergedEnv(spec.env);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run '", spec.argv[0], "': ", strerror(rc)));
  }
  return pid;
}

// Feeds the command's stdin and keeps the tail of its output until it
// exits; past the timeout (or on `cancel`) its process group gets SIGTERM,
// then SIGKILL kKillGrace later. Returns the wait status.
int Supervise(const CommandSpec& spec, pid_t pid, absl::Time start,
              const std::atomic<bool>* cancel, Fds* fds,
              CommandResult* result) {
  size_t written = 0;
  const absl::Time deadline = start + spec.timeout;
  absl::Time kill_at = absl::InfiniteFuture();
  int status = 0;
  char buf[4096];
  for (;;) {
    pollfd p[2];
    int n = 0;
    if (fds->fd[2] >= 0) p[n++] = {fds->fd[2], POLLIN, 0};
    if (fds->fd[0] >= 0) p[n++] = {fds->fd[0], POLLOUT, 0};
    // Short waits: the child's exit is polled with waitpid (its output may
    // stay open in a grandchild it left running).
    poll(p, n, 50);
    for (int i = 0; i < n; ++i) {
      if (p[i].fd == fds->fd[2] && p[i].revents != 0) {
        const ssize_t r = read(fds->fd[2], buf, sizeof(buf));
        if (r > 0) {
          AppendTail(&result->output, buf, r);
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          fds->Close(2);
        }
      } else if (p[i].fd == fds->fd[0] && p[i].revents != 0) {
        const ssize_t w = send(fds->fd[0], spec.stdin_data.data() + written,
                               spec.stdin_data.size() - written, MSG_NOSIGNAL);
        if (w > 0) written += w;
        if ((w < 0 && errno != EAGAIN && errno != EINTR) ||
            written == spec.stdin_data.size()) {
          fds->Close(0);  // done, or the command closed its stdin
        }
      }
    }
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    const absl::Time now = absl::Now();
    const bool cancelled = cancel != nullptr && cancel->load();
    if (!result->timed_out && (now >= deadline || cancelled)) {
      result->timed_out = true;
      kill(-pid, SIGTERM);
      kill_at = now + kKillGrace;
    } else if (now >= kill_at) {
      kill(-pid, SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
}

}  // namespace

std::string CommandResult::Describe() const {
  std::string s = term_signal != 0
                      ? absl::StrCat("killed by signal ", term_signal)
                      : absl::StrCat("exit ", exit_code);
  if (timed_out) absl::StrAppend(&s, " after timeout");
  absl::StrAppend(&s, " in ", absl::ToInt64Milliseconds(duration), " ms");
  return s;
}

absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec,
                                         const std::atomic<bool>* cancel) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError("command: empty");
  }
  Fds fds;  // 0: our stdin end, 1: child's stdin, 2: output read, 3: write
  if (absl::Status s = OpenPipes(&fds); !s.ok()) return s;
  const absl::Time start = absl::Now();
  absl::StatusOr<pid_t> pid = Spawn(spec, fds);
  if (!pid.ok()) return pid.status();
  fds.Close(1);
  fds.Close(3);
  fcntl(fds.fd[0], F_SETFL, O_NONBLOCK);
  fcntl(fds.fd[2], F_SETFL, O_NONBLOCK);
  CommandResult result;
  if (spec.stdin_data.empty()) fds.Close(0);
  const int status = Supervise(spec, *pid, start, cancel, &fds, &result);
  // What the command wrote just before it exited.
  char buf[4096];
  while (fds.fd[2] >= 0) {
    const ssize_t r = read(fds.fd[2], buf, sizeof(buf));
    if (r <= 0) break;
    AppendTail(&result.output, buf, r);
  }
  if (result.output.size() > kOutputTail) {
    result.output.erase(0, result.output.size() - kOutputTail);
  }
  result.duration = absl::Now() - start;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace pitstop::controller
