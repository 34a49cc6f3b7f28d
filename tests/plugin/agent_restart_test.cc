// The agent killed and restarted many times while ranks record: the
// library never crashes, never blocks an NCCL thread on the agent, and
// accounts for every record (delivered to some agent instance, or counted
// as dropped). Four "NCCL threads" drive ncclProfiler_v5 directly (Coll,
// KernelCh with GPU timers, KernelChStop) and time every callback; the main
// thread kills the agent's ingest server (connections closed at once, rings
// unread, like SIGKILL) and starts a new one on the same path.
//
// The longest callback (wall time, so it includes preemption on a loaded
// machine) is printed, not asserted: timing is not a test here
// (docs/benchmarks.md reports it). What is asserted is that no callback
// ever blocked: the kernel's count of voluntary context switches of each
// recording thread does not move across its callbacks. PITSTOP_RESTART_CYCLES
// overrides the number of kill/restart cycles (default 1000; 400 under a
// sanitizer).
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "plugin/abi/profiler_v5.h"
#include "src/agent/shm_ingest_server.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

uint64_t MonoNs() { return static_cast<uint64_t>(MonotonicNowNs()); }

// CPU time of the calling thread: a callback's own work, without the time
// the thread sat preempted on a loaded machine.
uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

struct RankStats {
  uint64_t iterations = 0;
  uint64_t max_call_ns = 0;
  uint64_t max_call_cpu_ns = 0;
  uint64_t calls_over_1ms = 0;
  // Iterations in which the thread gave up the CPU by itself (a voluntary
  // context switch: it blocked on a lock, a full socket, a futex) while in
  // the plugin's callbacks, and took no page fault. Not timing: the kernel
  // counts them.
  uint64_t blocked = 0;
  // Voluntary switches in iterations that also took a page fault: the
  // kernel slept paging in (a thread's first touch of its ring; the
  // library's code read back from disk after memory pressure evicted it, as
  // a full build beside the suite does). Memory management, not the agent:
  // printed, not asserted.
  uint64_t blocked_in_page_fault = 0;
};

// One emulated NCCL thread: Coll start, KernelCh start, KernelChStop,
// KernelCh stop, Coll stop; every callback timed.
void RankLoop(const abi::ProfilerV5* p, void* ctx, int rank,
              const std::atomic<bool>* stop, RankStats* st) {
  uint64_t seq = 0;
  auto timed = [st](auto&& fn) {
    const uint64_t c0 = ThreadCpuNs();
    const uint64_t t0 = MonoNs();
    fn();
    const uint64_t d = MonoNs() - t0;
    const uint64_t cpu = ThreadCpuNs() - c0;
    if (d > st->max_call_ns) st->max_call_ns = d;
    if (cpu > st->max_call_cpu_ns) st->max_call_cpu_ns = cpu;
    if (d > 1000000) ++st->calls_over_1ms;
  };
  while (!stop->load(std::memory_order_relaxed)) {
    rusage before;
    getrusage(RUSAGE_THREAD, &before);
    abi::DescrV5 coll{};
    coll.type = abi::kColl;
    coll.rank = rank;
    coll.coll.seq_number = seq++;
    coll.coll.func = "AllReduce";
    coll.coll.count = 1024;
    coll.coll.datatype = "ncclFloat32";
    coll.coll.n_channels = 1;
    coll.coll.algo = "RING";
    coll.coll.proto = "SIMPLE";
    void* ch = nullptr;
    timed([&] { p->start_event(ctx, &ch, &coll); });
    abi::DescrV5 k{};
    k.type = abi::kKernelCh;
    k.parent_obj = ch;
    k.rank = rank;
    k.kernel_ch.channel_id = 0;
    k.kernel_ch.p_timer = 1000 + seq * 10;
    void* kh = nullptr;
    timed([&] { p->start_event(ctx, &kh, &k); });
    abi::StateArgsV5 args{};
    args.kernel_ch.p_timer = 1005 + seq * 10;
    timed([&] { p->record_event_state(kh, abi::kKernelChStop, &args); });
    timed([&] { p->stop_event(kh); });
    timed([&] { p->stop_event(ch); });
    rusage after;
    getrusage(RUSAGE_THREAD, &after);
    if (after.ru_nvcsw != before.ru_nvcsw) {
      const bool faulted = after.ru_minflt != before.ru_minflt ||
                           after.ru_majflt != before.ru_majflt;
      ++(faulted ? st->blocked_in_page_fault : st->blocked);
    }
    ++st->iterations;
    // About 50,000 events/s per thread (NCCL's pace is far lower): a load,
    // not a spin that starves the agent on a small machine.
    if ((seq & 7) == 0) usleep(100);
  }
}

TEST(AgentRestartTest, KillAndRestartUnderLoadLosesNothingUncounted) {
  // Under a sanitizer a reconnect takes ~180 ms, not a few: each exporter
  // tick drops millions of records with instrumented code. 400 cycles still
  // kill hundreds of live connections at every moment of the protocol and
  // keep the test near a minute there.
#if defined(PITSTOP_TSAN) || defined(PITSTOP_ASAN)
  int cycles = 400;
#else
  int cycles = 1000;
#endif
  if (const char* v = std::getenv("PITSTOP_RESTART_CYCLES")) cycles = atoi(v);
  const std::string sock = TempSocketPath("restart");
  setenv("PITSTOP_AGENT_SOCKET", sock.c_str(), 1);
  setenv("PITSTOP_FINALIZE_TIMEOUT_MS", "20000", 1);
  setenv("PITSTOP_RECONNECT_MAX_MS", "20", 1);
  auto receiver = TelemetryReceiver::Start(sock, /*keep_batches=*/false);
  ASSERT_TRUE(receiver.ok()) << receiver.status();

  void* lib = dlopen(PITSTOP_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const auto* p =
      static_cast<const abi::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
  ASSERT_NE(p, nullptr);
  constexpr int kRanks = 4;
  int mask = 0;
  void* ctx[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(
        p->init(&ctx[r], 0x100 + r, &mask, "restart", 1, kRanks, r, nullptr),
        abi::kNcclSuccess);
  }
  std::atomic<bool> stop{false};
  std::vector<RankStats> stats(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back(RankLoop, p, ctx[r], r, &stop, &stats[r]);
  }

  std::mt19937 rng(42);
  uint64_t delivered = 0;
  int with_connection = 0;
  uint64_t reconnect_wait_ns = 0;
  for (int i = 0; i < cycles; ++i) {
    // Mostly let the ranks reconnect first (backoff 20 ms), sometimes kill
    // at once; then kill after a random moment: mid-hello, mid-batch, idle.
    // The wait is long because a reconnect is slow where the exporter thread
    // competes with four spinning ranks for two cores: a clang -O0 ASan
    // build on CI reconnected within 200 ms in only 473 of 1000 cycles
    // (the total wait is printed). It costs nothing where reconnects are
    // fast.
    if (rng() % 8 != 0) {
      const uint64_t start = MonoNs();
      const uint64_t until = start + 2'000'000'000ull;
      while ((*receiver)->server()->connections() == 0 && MonoNs() < until) {
        usleep(1000);
      }
      reconnect_wait_ns += MonoNs() - start;
    }
    if ((*receiver)->server()->connections() > 0) ++with_connection;
    usleep(rng() % 3000);
    (*receiver)->Shutdown();
    delivered += (*receiver)->records_received();
    receiver = TelemetryReceiver::Start(sock, /*keep_batches=*/false);
    ASSERT_TRUE(receiver.ok()) << receiver.status();
  }
  // A last stable agent gets the end of the run and the goodbye. The ranks
  // record until it has received records from the live rings: when each
  // killed agent lived only a few milliseconds (a TSan build on a loaded
  // CI machine delivered nothing to any of them), this is what shows that
  // the library still delivers after hundreds of kills.
  const uint64_t last_until = MonoNs() + 60'000'000'000ull;
  while ((*receiver)->records_received() == 0 && MonoNs() < last_until) {
    usleep(1000);
  }
  stop = true;
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(p->finalize(ctx[r]), 0);
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(60)));
  const v1::DropCounters drops = LastDrops((*receiver)->Streams());
  const uint64_t last_delivered = (*receiver)->records_received();
  delivered += last_delivered;

  uint64_t iterations = 0, max_call = 0, max_cpu = 0, over = 0, blocked = 0;
  uint64_t blocked_in_page_fault = 0;
  for (const auto& s : stats) {
    iterations += s.iterations;
    blocked += s.blocked;
    blocked_in_page_fault += s.blocked_in_page_fault;
    max_call = std::max(max_call, s.max_call_ns);
    max_cpu = std::max(max_cpu, s.max_call_cpu_ns);
    over += s.calls_over_1ms;
  }
  std::printf(
      "cycles=%d with_connection=%d iterations=%llu records=%llu "
      "delivered=%llu export_dropped=%llu ring_full=%llu "
      "max_callback_us=%.1f max_callback_cpu_us=%.1f callbacks_over_1ms=%llu "
      "blocked=%llu blocked_in_page_fault=%llu reconnect_wait_ms=%.0f\n",
      cycles, with_connection, static_cast<unsigned long long>(iterations),
      static_cast<unsigned long long>(drops.events_recorded()),
      static_cast<unsigned long long>(delivered),
      static_cast<unsigned long long>(drops.export_dropped()),
      static_cast<unsigned long long>(drops.ring_full()), max_call / 1e3,
      max_cpu / 1e3, static_cast<unsigned long long>(over),
      static_cast<unsigned long long>(blocked),
      static_cast<unsigned long long>(blocked_in_page_fault),
      reconnect_wait_ns / 1e6);
  // No NCCL thread ever blocked inside the plugin (what wall-clock stalls
  // remain are preemption on a loaded machine, printed above). A switch in
  // an iteration that took a page fault is the kernel paging, counted
  // apart: on a loaded machine each thread's first iteration (its first
  // touch of its ring and of the library's code) showed one, with a major
  // fault when a build beside the suite had evicted the library's pages. Under
  // TSan its own runtime takes internal locks on instrumented accesses, so the
  // count is printed but says nothing about the library there. Under ASan
  // the first touch of a shadow page is a page fault, which sleeps on the
  // process's mmap lock while another thread maps or unmaps (the exporter,
  // the agent link): one such switch in 1.2 M iterations failed a loaded
  // `sanitize` run (round 10) and passed 3 of 3 alone. The default build,
  // which runs this test too, keeps the check.
#if !defined(PITSTOP_TSAN) && !defined(PITSTOP_ASAN)
  EXPECT_EQ(blocked, 0u);
#endif
  EXPECT_GT(with_connection, cycles / 2);  // kills hit live connections
  // Every iteration made 3 records (op, kernel channel, completion).
  EXPECT_EQ(
      drops.events_recorded() + drops.ring_full() + drops.pool_exhausted(),
      iterations * 3);
  // Everything that went into the rings reached some agent or was counted.
  EXPECT_EQ(delivered + drops.export_dropped(), drops.events_recorded());
  // The last agent, left alive, got records from the rings.
  EXPECT_GT(last_delivered, 0u);
}

}  // namespace
}  // namespace pitstop::emu
