#include "src/agent/joiner_launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "pitstop/logging.h"

namespace pitstop::agent {
namespace {

// The step of the child's set-up that failed, sent back over the pipe.
enum Stage : int { kLog = 1, kGroups, kGid, kUid, kChdir, kExec };

struct ChildError {
  int stage = 0;
  int err = 0;
};

const char* StageName(int stage) {
  switch (stage) {
    case kLog:
      return "opening its log";
    case kGroups:
      return "setgroups";
    case kGid:
      return "setgid";
    case kUid:
      return "setuid";
    case kChdir:
      return "chdir";
    default:
      return "execve";
  }
}

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::vector<gid_t> groups;
};

absl::StatusOr<User> ResolveUser(const std::string& user) {
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  uint32_t numeric = 0;
  const int rc =
      absl::SimpleAtoi(user, &numeric)
          ? getpwuid_r(numeric, &pw, buf.data(), buf.size(), &found)
          : getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "user '", user, "' is unknown on this node",
        rc != 0 ? absl::StrCat(" (", std::strerror(rc), ")") : ""));
  }
  User u{pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, {}};
  if (u.uid == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "user '", user, "' is uid 0: a joiner is never started as root"));
  }
  int n = 64;
  u.groups.resize(n);
  if (getgrouplist(u.name.c_str(), u.gid, u.groups.data(), &n) < 0) {
    u.groups.resize(n);
    getgrouplist(u.name.c_str(), u.gid, u.groups.data(), &n);
  }
  u.groups.resize(std::max(n, 0));
  return u;
}

// In the child after fork: only async-signal-safe calls.
[[noreturn]] void Child(int report_fd, const char* log_path, bool switch_user,
                        const User& u, const char* dir, char* const argv[],
                        char* const envp[]) {
  auto fail = [report_fd](int stage) {
    const ChildError e{stage, errno};
    (void)!write(report_fd, &e, sizeof(e));
    _exit(127);
  };
  const int null_in = open("/dev/null", O_RDONLY);
  const int out = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0640);
  if (null_in < 0 || out < 0) fail(kLog);
  dup2(null_in, 0);
  dup2(out, 1);
  dup2(out, 2);
  if (switch_user) {
    if (setgroups(u.groups.size(), u.groups.data()) != 0) fail(kGroups);
    if (setgid(u.gid) != 0) fail(kGid);
    if (setuid(u.uid) != 0) fail(kUid);
  }
  if (chdir(dir) != 0) fail(kChdir);
  execve(argv[0], argv, envp);
  fail(kExec);
  _exit(127);
}

std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) last = line;
  }
  if (last.size() > 200) last = last.substr(last.size() - 200);
  return last;
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return absl::StrCat("status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// The joiner's environment: not the agent's; the operator's values over a
// minimal base, then what the migration needs over those.
std::vector<std::string> JoinerEnvironment(const JoinerLaunchConfig& config,
                                           const User& user,
                                           const JoinerSpec& spec) {
  std::map<std::string, std::string> vars = {
      {"PATH", "/usr/local/bin:/usr/bin:/bin"},
      {"HOME", user.home},
      {"USER", user.name},
      {"LOGNAME", user.name}};
  for (const auto& [k, v] : config.env) {
    vars[k] = ExpandJoinerTemplate(v, spec);
  }
  vars["PITSTOP_JOB_ID"] = spec.job_id;
  vars["PITSTOP_HOST"] = spec.host;
  vars["PITSTOP_MIGRATION_ROLE"] = "joiner";
  vars["PITSTOP_MIGRATION_ID"] = spec.migration_id;
  vars["PITSTOP_LEAVER_HOST"] = spec.leaver_host;
  vars["RANK"] = absl::StrCat(spec.global_rank);
  vars["LOCAL_RANK"] = absl::StrCat(spec.local_rank);
  if (!spec.agent_socket.empty()) {
    vars["PITSTOP_AGENT_SOCKET"] = spec.agent_socket;
  }
  std::vector<std::string> env;
  env.reserve(vars.size());
  for (const auto& [k, v] : vars) env.push_back(absl::StrCat(k, "=", v));
  return env;
}

// The reason a child's set-up step failed.
std::string SetupError(const std::string& what, const ChildError& e,
                       const User& user, const std::string& log,
                       const std::string& dir) {
  std::string hint;
  if (e.stage <= kUid && e.stage >= kGroups) {
    hint = absl::StrCat(" (switching to user ", user.name, ", uid ", user.uid,
                        "; the agent runs as uid ", geteuid(), ")");
  }
  return absl::StrCat(what, ": ", StageName(e.stage),
                      e.stage == kLog ? absl::StrCat(" ", log) : "",
                      e.stage == kChdir ? absl::StrCat(" ", dir) : "", ": ",
                      strerror(e.err), hint);
}

// Forks and execs `args`; returns once the exec happened (or failed: the
// child reports the failed step over a close-on-exec pipe).
absl::StatusOr<pid_t> Spawn(const std::string& what, const User& user,
                            std::vector<std::string> args,
                            std::vector<std::string> env,
                            const std::string& log, const std::string& dir) {
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  for (std::string& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const bool switch_user = geteuid() != user.uid;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat(what, ": pipe2: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": fork: ", strerror(err)));
  }
  if (pid == 0) {
    close(fds[0]);
    Child(fds[1], log.c_str(), switch_user, user, dir.c_str(), argv.data(),
          envp.data());
  }
  close(fds[1]);
  ChildError e;
  ssize_t n = 0;
  do {
    n = read(fds[0], &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  close(fds[0]);
  if (n != static_cast<ssize_t>(sizeof(e))) return pid;
  int status = 0;
  waitpid(pid, &status, 0);
  return absl::FailedPreconditionError(SetupError(what, e, user, log, dir));
}

}  // namespace

std::string ExpandJoinerTemplate(const std::string& text,
                                 const JoinerSpec& spec) {
  return absl::StrReplaceAll(text,
                             {{"{rank}", absl::StrCat(spec.global_rank)},
                              {"{local_rank}", absl::StrCat(spec.local_rank)},
                              {"{job}", spec.job_id},
                              {"{host}", spec.host},
                              {"{leaver_host}", spec.leaver_host},
                              {"{migration}", spec.migration_id}});
}

absl::StatusOr<std::unique_ptr<JoinerLauncher>> JoinerLauncher::Create(
    JoinerLaunchConfig config, Clock* clock) {
  const std::string where = absl::StrCat("joiner of job '", config.job_id, "'");
  if (config.launcher != "plain") {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": launcher '", config.launcher,
        "' is not built (expected plain; slurm and kubernetes are not yet)"));
  }
  if (config.command.empty() || config.command[0].empty() ||
      config.command[0][0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": command must start with an absolute path, got '",
                     config.command.empty() ? "" : config.command[0], "'"));
  }
  if (config.user.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": user is required (the job's user)"));
  }
  if (config.user == "root" || config.user == "0") {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": user '", config.user,
                     "' refused: a joiner is never started as root"));
  }
  return std::unique_ptr<JoinerLauncher>(
      new PlainJoinerLauncher(std::move(config), clock));
}

PlainJoinerLauncher::PlainJoinerLauncher(JoinerLaunchConfig config,
                                         Clock* clock)
    : config_(std::move(config)), clock_(clock) {}

PlainJoinerLauncher::~PlainJoinerLauncher() {
  MutexLock lock(&mu_);
  Reap();
}

std::vector<pid_t> PlainJoinerLauncher::children() const {
  MutexLock lock(&mu_);
  std::vector<pid_t> out;
  for (const auto& [pid, migration] : children_) out.push_back(pid);
  return out;
}

void PlainJoinerLauncher::Reap() {
  std::erase_if(children_, [](const auto& child) {
    int status = 0;
    return waitpid(child.first, &status, WNOHANG) != 0;
  });
}

void PlainJoinerLauncher::Stop(const std::string& migration_id) {
  MutexLock lock(&mu_);
  Reap();
  for (const auto& [pid, migration] : children_) {
    if (migration != migration_id) continue;
    Logger("agent")->warn("migration {}: ending its joiner pid {}",
                          migration_id, pid);
    kill(pid, SIGTERM);
  }
}

absl::Status PlainJoinerLauncher::Launch(const JoinerSpec& spec) {
  const std::string what =
      absl::StrCat("plain launcher: joiner of rank ", spec.global_rank, " (",
                   config_.command[0], ")");
  absl::StatusOr<User> user = ResolveUser(config_.user);
  if (!user.ok()) {
    return absl::Status(user.status().code(),
                        absl::StrCat(what, ": ", user.status().message()));
  }
  std::vector<std::string> args;
  for (const std::string& a : config_.command) {
    args.push_back(ExpandJoinerTemplate(a, spec));
  }
  const std::string log =
      config_.log_dir.empty()
          ? "/dev/null"
          : absl::StrCat(config_.log_dir, "/", spec.job_id, "-",
                         spec.migration_id, "-rank", spec.global_rank, ".log");
  const std::string dir = config_.work_dir.empty() ? "/" : config_.work_dir;
  absl::StatusOr<pid_t> pid =
      Spawn(what, *user, std::move(args),
            JoinerEnvironment(config_, *user, spec), log, dir);
  if (!pid.ok()) return pid.status();
  if (absl::Status s = WatchStart(what, *pid, log); !s.ok()) return s;
  {
    MutexLock lock(&mu_);
    Reap();
    children_[*pid] = spec.migration_id;
  }
  Logger("agent")->info(
      "migration {} of job {}: started the joiner of rank {} as {} (pid {}, "
      "log {})",
      spec.migration_id, spec.job_id, spec.global_rank, user->name, *pid, log);
  return absl::OkStatus();
}

// Exec'd. A joiner that ends at once (bad arguments, a missing module) did
// not start either.
absl::Status PlainJoinerLauncher::WatchStart(const std::string& what, pid_t pid,
                                             const std::string& log) {
  const absl::Time until = clock_->Now() + config_.start_grace;
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      const std::string last = LastLine(log);
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": exited with ", ExitText(status), " within ",
          absl::FormatDuration(config_.start_grace), " of its start",
          log == "/dev/null" ? "" : absl::StrCat(" (log ", log, ")"),
          last.empty() ? "" : absl::StrCat(": ", last)));
    }
    const absl::Time now = clock_->Now();
    if (now >= until) return absl::OkStatus();
    clock_->SleepFor(std::min(absl::Milliseconds(10), until - now));
  }
}

}  // namespace pitstop::agent
