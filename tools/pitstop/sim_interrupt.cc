#include "tools/pitstop/sim_interrupt.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace pitstop::tool {
namespace {

// The first of SIGINT / SIGTERM that came, 0 before.
std::atomic<int> g_signal{0};

void OnInterrupt(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
}

// This process's children: every /proc/PID whose parent is us. The field
// after the command name (which may hold spaces and parentheses) is the
// state, then the parent's pid.
std::vector<pid_t> ChildPids() {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  const pid_t self = getpid();
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    char state = 0;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == self) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

}  // namespace

void InstallInterruptHandler() {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal: the default, exit now
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool Interrupted() { return g_signal.load() != 0; }

int ReportInterrupted() {
  const int sig = g_signal.load();
  std::cout.flush();
  std::cerr << "pitstop sim: interrupted ("
            << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
            << "): the cluster was stopped" << std::endl;
  return sig == SIGTERM ? kTerminatedExitCode : kInterruptedExitCode;
}

InterruptGuard::InterruptGuard() {
  InstallInterruptHandler();
  thread_ = std::thread([this] { Watch(); });
}

InterruptGuard::~InterruptGuard() {
  done_.store(true);
  thread_.join();
}

bool InterruptGuard::Disarm() {
  if (armed_.exchange(false)) {
    interrupted_before_disarm_.store(Interrupted());
  }
  return !interrupted_before_disarm_.load();
}

bool InterruptGuard::RunInterrupted() const {
  return armed_.load() ? Interrupted() : interrupted_before_disarm_.load();
}

// SIGTERM to every child while armed (the run may start new ones until its
// waits notice), SIGKILL to those still there after a grace period.
void InterruptGuard::Watch() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kGrace = std::chrono::seconds(3);
  Clock::time_point since{};
  while (!done_.load()) {
    if (armed_.load() && Interrupted()) {
      if (since == Clock::time_point{}) since = Clock::now();
      const int sig = Clock::now() - since < kGrace ? SIGTERM : SIGKILL;
      for (const pid_t pid : ChildPids()) kill(pid, sig);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace pitstop::tool
