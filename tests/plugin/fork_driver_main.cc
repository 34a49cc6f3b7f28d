// plugin_fork_driver: real fork() and exit() around the in-process library,
// for tests/plugin/fork_test.cc. The library streams to the agent at
// $PITSTOP_AGENT_SOCKET.
//
//   plugin_fork_driver fork-silent     parent records comm 0xA (10 ops),
//                                      forks; the child drives the parent's
//                                      comm on its own thread (10 ops, Coll
//                                      start/stop) and calls exit(0); the
//                                      parent records 10 more and finalizes.
//   plugin_fork_driver fork-own-comm   as fork-silent, but the child then
//                                      creates comm 0xB of its own (5 ops),
//                                      finalizes it and calls exit(0).
//   plugin_fork_driver exit OPS        OPS ops on comm 0xC, then prints
//                                      "exit_at_ns=N" (CLOCK_MONOTONIC) and
//                                      calls exit(0) without finalize.
//   plugin_fork_driver finalize OPS    OPS ops, then prints
//                                      "finalize_ns=N" (how long the last
//                                      finalize took) and returns 0.
//
// Prints "child_status=S" (the wait status) for the fork modes. Exit code
// 0 on success, 2 on usage errors, 3 if the emulator cannot start, 4 if the
// child failed.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "src/nccl/emulator/nccl_emulator.h"

// LeakSanitizer's interface when linked (sanitizer builds), else null.
extern "C" void __lsan_ignore_object(const void*) __attribute__((weak));

// LeakSanitizer cannot scan the stacks of the parent's threads in a forked
// child ("running thread was not suspended"), so whatever they alone held
// looks leaked there: the leak check is for the parent (this hook is read
// by LeakSanitizer at exit).
static volatile int g_forked_child = 0;
extern "C" int __lsan_is_turned_off() { return g_forked_child; }

namespace {

// What the child abandons on purpose is not a leak.
void Abandon(const void* p) {
  if (__lsan_ignore_object != nullptr) __lsan_ignore_object(p);
}

using pitstop::emu::Comm;
using pitstop::emu::Emulator;
using pitstop::emu::OpSpec;

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

void RunOps(Comm* comm, int n, uint64_t first_seq) {
  for (int i = 0; i < n; ++i) {
    OpSpec spec;
    spec.seq_number = first_seq + static_cast<uint64_t>(i);
    comm->RunCollective(spec, {.kernel_us = 0});
  }
}

// The forked child: the parent's emulator threads do not exist here, so
// only calling-thread events (API, Group, Coll) are driven, and nothing of
// the parent's is destroyed (no joins of threads that are gone).
[[noreturn]] void Child(Comm* parent_comm, bool own_comm) {
  g_forked_child = 1;
  for (int i = 0; i < 10; ++i) {
    OpSpec spec;
    spec.seq_number = 1000 + static_cast<uint64_t>(i);
    std::unique_ptr<pitstop::emu::Op> op = parent_comm->StartOp(spec);
    op->EnqueueDone();
    // Its state names the parent's threads: never destroyed.
    pitstop::emu::Op* kept = op.release();
    Abandon(kept);
  }
  if (own_comm) {
    auto emu = Emulator::Create({.plugin = "pitstop"});
    if (!emu.ok()) std::_Exit(3);
    auto comm = (*emu)->InitComm({.comm_hash = 0xB,
                                  .name = "child",
                                  .n_ranks = 2,
                                  .rank = 0,
                                  .n_nodes = 1});
    if (!comm.ok()) std::_Exit(3);
    RunOps(comm->get(), 5, 0);
    if ((*comm)->Finalize() != 0) std::_Exit(4);
    Abandon(comm->release());
    Abandon(emu->release());
  }
  std::exit(0);  // runs the library's exit handler, inherited from the parent
}

int Fork(bool own_comm) {
  auto emu = Emulator::Create({.plugin = "pitstop"});
  if (!emu.ok()) return 3;
  auto comm = (*emu)->InitComm({.comm_hash = 0xA,
                                .name = "parent",
                                .n_ranks = 2,
                                .rank = 0,
                                .n_nodes = 1});
  if (!comm.ok()) return 3;
  RunOps(comm->get(), 10, 0);
  std::fflush(stdout);
  // The library parks its exporter thread across fork() (GCC 12's ASan
  // allocator is not locked around fork, so a thread inside malloc would
  // leave the child a held lock). The emulator's worker threads are ours:
  // give them time to go back to waiting after the last op's completion.
  usleep(20000);
  const pid_t pid = fork();
  if (pid < 0) return 4;
  if (pid == 0) Child(comm->get(), own_comm);
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("child_pid=%d child_status=%d\n", pid, status);
  RunOps(comm->get(), 10, 10);
  if ((*comm)->Finalize() != 0) return 4;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: plugin_fork_driver fork-silent|fork-own-comm|"
                 "exit OPS|finalize OPS\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "fork-silent") return Fork(false);
  if (mode == "fork-own-comm") return Fork(true);
  if ((mode != "exit" && mode != "finalize") || argc < 3) return 2;
  const int ops = std::atoi(argv[2]);
  auto emu = Emulator::Create({.plugin = "pitstop"});
  if (!emu.ok()) return 3;
  auto comm = (*emu)->InitComm({.comm_hash = 0xC,
                                .name = "bound",
                                .n_ranks = 2,
                                .rank = 0,
                                .n_nodes = 1});
  if (!comm.ok()) return 3;
  RunOps(comm->get(), ops, 0);
  if (mode == "exit") {
    std::printf("exit_at_ns=%llu\n", static_cast<unsigned long long>(MonoNs()));
    std::fflush(stdout);
    std::exit(0);
  }
  const uint64_t t0 = MonoNs();
  const int rc = (*comm)->Finalize();
  std::printf("finalize_ns=%llu\n",
              static_cast<unsigned long long>(MonoNs() - t0));
  return rc == 0 ? 0 : 4;
}
