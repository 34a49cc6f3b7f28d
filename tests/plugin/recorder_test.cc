// Unit tests of the Recorder's handle lifecycle (double and stale stops,
// drop accounting) and of the settings that guard the training process
// (ring memory cap, agent socket path, event-mask parsing).
#include "plugin/recorder.h"

#include <unistd.h>

#include <barrier>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/abi/profiler_common.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/ring.h"

namespace pitstop::plugin {
namespace {

class RecorderTest : public ::testing::Test {
 protected:
  RecorderTest() : rings_(4, 1024), rec_(&rings_, getpid(), SmallPools()) {
    ctx_.comm_hash = 42;
    ctx_.n_ranks = 2;
    ctx_.mask.store(kSupportedEventMask);
    ctx_.p2p_seq = std::make_unique<std::atomic<uint64_t>[]>(4);
  }
  static PoolSizes SmallPools() {
    PoolSizes p;
    p.api = p.op = p.proxy_op = p.proxy_step = p.kernel = p.net = 16;
    return p;
  }
  void* StartColl() {
    OpStart a;
    a.func = "AllReduce";
    a.seq_number = seq_++;
    return rec_.StartOp(&ctx_, nullptr, a);
  }
  // Drains every ring; returns record counts by type.
  std::map<RecordType, int> Drain() {
    std::map<RecordType, int> n;
    rings_.DrainAll(1 << 20, [&](const Record& r) { ++n[r.type]; });
    return n;
  }

  RingSet rings_;
  Recorder rec_;
  CommContext ctx_;
  uint64_t seq_ = 0;
};

TEST_F(RecorderTest, DoubleStopOfCollIsIgnoredAndSlotsStayReusable) {
  // 16 op slots; many rounds would exhaust the pool if a double stop leaked
  // its slot (before the fix the refcount wrapped and the slot was lost).
  for (int i = 0; i < 2000; ++i) {
    void* h = StartColl();
    ASSERT_NE(h, nullptr) << "round " << i;
    rec_.Stop(h);
    rec_.Stop(h);
    auto n = Drain();
    ASSERT_EQ(n[RecordType::kOp], 1) << "round " << i;
    ASSERT_EQ(n[RecordType::kCompletion], 0) << "round " << i;
  }
  EXPECT_EQ(rec_.ignored(), 2000u);
  EXPECT_EQ(rec_.pool_exhausted(), 0u);
}

TEST_F(RecorderTest, DoubleStopOfChildDetachesFromParentOnce) {
  for (int i = 0; i < 200; ++i) {
    void* op = StartColl();
    ASSERT_NE(op, nullptr) << "round " << i;
    ProxyOpStart pa;
    pa.pid = getpid();
    void* proxy = rec_.StartProxyOp(&ctx_, op, pa);
    void* kernel = rec_.StartKernelCh(&ctx_, op, 0, 0);
    ASSERT_NE(proxy, nullptr);
    ASSERT_NE(kernel, nullptr);
    rec_.Stop(op);
    rec_.Stop(proxy);
    rec_.Stop(proxy);  // must not detach from the parent again
    auto n = Drain();
    EXPECT_EQ(n[RecordType::kCompletion], 0) << "early completion, round " << i;
    rec_.Stop(kernel);
    rec_.Stop(kernel);
    n = Drain();
    ASSERT_EQ(n[RecordType::kCompletion], 1) << "round " << i;
    ASSERT_EQ(n[RecordType::kKernelCh], 1) << "round " << i;
  }
  EXPECT_EQ(rec_.ignored(), 400u);
  EXPECT_EQ(rec_.pool_exhausted(), 0u);
}

TEST_F(RecorderTest, ChildCountSaturatesWithoutCorruptingTheOp) {
  // The op's header packs live references and the children count into one
  // word; 20,000 children over one op's life must saturate the count, not
  // carry into the stop bits. Then the slot must still be reclaimed (all
  // 16 slots reused many times) with its count cleared.
  void* op = StartColl();
  ASSERT_NE(op, nullptr);
  uint32_t kernel_records = 0;
  for (int i = 0; i < 20000; ++i) {
    void* k = rec_.StartKernelCh(&ctx_, op, 0, 0);
    ASSERT_NE(k, nullptr) << i;
    rec_.Stop(k);
    kernel_records += Drain()[RecordType::kKernelCh];
  }
  EXPECT_EQ(kernel_records, 20000u);
  rec_.Stop(op);
  std::vector<uint32_t> children;
  rings_.DrainAll(1 << 20, [&](const Record& r) {
    if (r.type == RecordType::kCompletion) {
      children.push_back(r.completion.children);
    }
  });
  ASSERT_EQ(children.size(), 1u);
  EXPECT_GE(children[0], 0x3F00u);
  EXPECT_LT(children[0], 20000u);
  for (int i = 0; i < 200; ++i) {
    void* o = StartColl();
    ASSERT_NE(o, nullptr) << "round " << i;
    void* k = rec_.StartKernelCh(&ctx_, o, 0, 0);
    rec_.Stop(o);
    rec_.Stop(k);
    children.clear();
    rings_.DrainAll(1 << 20, [&](const Record& r) {
      if (r.type == RecordType::kCompletion) {
        children.push_back(r.completion.children);
      }
    });
    ASSERT_EQ(children, std::vector<uint32_t>{1}) << "round " << i;
  }
  EXPECT_EQ(rec_.pool_exhausted(), 0u);
  EXPECT_EQ(rec_.ignored(), 0u);
}

TEST_F(RecorderTest, ChildrenOnOtherThreadsCompleteEachOpExactlyOnce) {
  // The Coll is stopped by this thread while its kernel children start and
  // stop on another (NCCL's proxy thread): whichever side drops the last
  // reference emits the one completion, counting every child.
  constexpr int kOps = 3000;
  constexpr int kChildren = 3;
  std::atomic<void*> handoff{nullptr};
  std::atomic<bool> done{false};
  std::atomic<bool> attached{false};
  std::thread proxy([&] {
    while (!done.load()) {
      void* op = handoff.exchange(nullptr);
      if (op == nullptr) continue;
      void* k[kChildren];
      for (auto& h : k) h = rec_.StartKernelCh(&ctx_, op, 0, 0);
      attached.store(true);
      for (auto* h : k) rec_.Stop(h);
    }
  });
  std::map<uint32_t, int> completions_by_children;
  int completions = 0;
  for (int i = 0; i < kOps; ++i) {
    void* op = StartColl();
    ASSERT_NE(op, nullptr) << i;
    // Attached before the handoff: the slot cannot be reclaimed while the
    // other thread still holds the handle unattached.
    void* first = rec_.StartKernelCh(&ctx_, op, 1, 0);
    attached.store(false);
    handoff.store(op);
    rec_.Stop(op);  // races with the other thread's attaches and stops
    // A child that attaches after every earlier one detached starts a
    // second completion by design (late children); keep all attached
    // before the last local reference goes so exactly one is expected.
    while (!attached.load()) std::this_thread::yield();
    rec_.Stop(first);  // races with the other thread's stops
    rings_.DrainAll(1 << 20, [&](const Record& r) {
      if (r.type == RecordType::kCompletion) {
        ++completions;
        ++completions_by_children[r.completion.children];
      }
    });
  }
  done.store(true);
  proxy.join();
  rings_.DrainAll(1 << 20, [&](const Record& r) {
    if (r.type == RecordType::kCompletion) {
      ++completions;
      ++completions_by_children[r.completion.children];
    }
  });
  EXPECT_EQ(completions, kOps);
  EXPECT_EQ(completions_by_children[kChildren + 1], kOps);
  EXPECT_EQ(rec_.pool_exhausted(), 0u);
}

}  // namespace

// Steps a child's stop in two halves, so that another thread's events can
// be placed inside the window in which a completion is being emitted.
class RecorderTestPeer {
 public:
  // The reference drop of a child's stop: true if this caller now emits
  // the completion (holding the slot), `*word` its header.
  static bool DropRef(Recorder* r, void* op, uint32_t* word) {
    return r->DropRef(r->AsOp(op), word);
  }
  static void FinishCompletion(Recorder* r, void* op, uint32_t word) {
    r->FinishCompletion(r->AsOp(op), word, /*now=*/1);
  }
};

namespace {

TEST_F(RecorderTest, LateChildStoppedDuringACompletionIsCompletedOnce) {
  // The first channel of each op is never stopped (its stop is stepped
  // by hand): room for all of them.
  PoolSizes sizes = SmallPools();
  sizes.kernel = 64;
  Recorder rec(&rings_, getpid(), sizes);
  // A child that attaches to a stopped op and stops while the op's
  // completion is being emitted (the slot held, kStopping) leaves its count
  // to that completion's thread, which emits a second completion for it and
  // only then releases the slot. Before the fix the late child ran its own
  // completion at the same time and both subtracted their counts: the
  // header underflowed and the slot never came back.
  for (int round = 0; round < 40; ++round) {  // > 16 slots: all reclaimed
    OpStart a;
    a.func = "AllReduce";
    void* op = rec.StartOp(&ctx_, nullptr, a);
    ASSERT_NE(op, nullptr) << round;
    ASSERT_NE(rec.StartKernelCh(&ctx_, op, 0, 0), nullptr);
    rec.Stop(op);  // the kernel channel still holds it
    uint32_t word = 0;
    ASSERT_TRUE(RecorderTestPeer::DropRef(&rec, op, &word));  // its stop
    void* late = rec.StartKernelCh(&ctx_, op, 1, 0);
    ASSERT_NE(late, nullptr);
    rec.Stop(late);
    std::vector<uint32_t> children;
    auto drain = [&] {
      rings_.DrainAll(1 << 20, [&](const Record& r) {
        if (r.type == RecordType::kCompletion) {
          children.push_back(r.completion.children);
        }
      });
    };
    drain();
    EXPECT_TRUE(children.empty()) << "the late child completed on its own";
    RecorderTestPeer::FinishCompletion(&rec, op, word);
    drain();
    EXPECT_EQ(children, (std::vector<uint32_t>{1, 1})) << round;
  }
  // Every slot came back (40 ops through 16 slots).
  EXPECT_EQ(rec.pool_exhausted(), 0u);
}

TEST_F(RecorderTest, DoubleStopOfOtherKindsIsIgnored) {
  void* api = rec_.StartApi(&ctx_, false, false);
  void* step = rec_.StartProxyStep(&ctx_, nullptr, 0);
  void* net =
      rec_.StartNetPlugin(&ctx_, nullptr, abi::kNetPluginTypeIb, nullptr);
  ASSERT_NE(api, nullptr);
  ASSERT_NE(step, nullptr);
  ASSERT_NE(net, nullptr);
  for (void* h : {api, step, net}) {
    rec_.Stop(h);
    rec_.Stop(h);
  }
  auto n = Drain();
  EXPECT_EQ(n[RecordType::kProxyStep], 1);
  EXPECT_EQ(n[RecordType::kNetPlugin], 1);
  EXPECT_EQ(rec_.ignored(), 3u);
}

TEST_F(RecorderTest, KernelStopsWithGpuTimersSampleTheCpuClockSparsely) {
  // Both GPU timers given: the CPU clock is read at the first stop on this
  // thread, then only once the GPU stop timer moved kFitSampleGpuNs (the
  // agent's clock-fit samples); without a GPU timer at start or stop every
  // record keeps its CPU time. The completion always has one, also when the
  // stop that completes the op read no clock.
  void* op = StartColl();
  ASSERT_NE(op, nullptr);
  constexpr uint64_t kGpu = 1'700'000'000'000'000'000ull;
  constexpr int kChannels = 120;  // 1 us apart: 120 us of GPU time
  std::vector<void*> open;
  for (int i = 0; i < kChannels; ++i) {
    const uint64_t t = kGpu + uint64_t{1000} * i;
    void* k = rec_.StartKernelCh(&ctx_, op, static_cast<uint8_t>(i % 32), t);
    ASSERT_NE(k, nullptr) << i;
    rec_.RecordState(k, abi::kKernelChStop, t + 800);
    if (i < kChannels - 1) {
      rec_.Stop(k);
    } else {
      open.push_back(k);
    }
  }
  void* no_stop_timer = rec_.StartKernelCh(&ctx_, op, 0, kGpu);
  void* no_start_timer = rec_.StartKernelCh(&ctx_, op, 0, 0);
  rec_.RecordState(no_start_timer, abi::kKernelChStop, kGpu + 500);
  rec_.Stop(no_stop_timer);
  rec_.Stop(no_start_timer);
  rec_.Stop(op);
  // The last channel's stop completes the op; its own GPU stop timer is
  // 119.8 us after the first sample and 19.8 us after the third: no sample.
  rec_.Stop(open[0]);
  std::vector<uint64_t> sampled_gpu;
  uint64_t completion_ns = 0, completions = 0;
  uint64_t untimed_start = 0, untimed_stop = 0, kernel_records = 0;
  rings_.DrainAll(1 << 20, [&](const Record& r) {
    if (r.type == RecordType::kCompletion) {
      ++completions;
      completion_ns = r.completion.completion_cpu_ns;
      EXPECT_EQ(r.completion.children, uint32_t{kChannels + 2});
    }
    if (r.type != RecordType::kKernelCh) return;
    ++kernel_records;
    const KernelChRec& k = r.kernel;
    if (k.stop_gpu_ns == 0) {
      untimed_stop = k.stop_cpu_ns;
    } else if (k.start_gpu_ns == 0) {
      untimed_start = k.stop_cpu_ns;
      EXPECT_NE(k.start_cpu_ns, 0u);
    } else {
      EXPECT_EQ(k.start_cpu_ns, 0u);
      if (k.stop_cpu_ns != 0) sampled_gpu.push_back(k.stop_gpu_ns);
    }
  });
  EXPECT_EQ(kernel_records, uint64_t{kChannels + 2});
  const std::vector<uint64_t> want = {kGpu + 800, kGpu + 50'800,
                                      kGpu + 100'800};
  EXPECT_EQ(sampled_gpu, want);
  EXPECT_NE(untimed_start, 0u);
  EXPECT_NE(untimed_stop, 0u);
  EXPECT_EQ(completions, 1u);
  EXPECT_NE(completion_ns, 0u);
  EXPECT_GE(completion_ns, untimed_start);
  // A GPU timer far behind the last sample (another GPU's clock on the
  // same thread) is sampled too.
  void* k = rec_.StartKernelCh(&ctx_, nullptr, 0, 5'000'000);
  rec_.RecordState(k, abi::kKernelChStop, 5'000'800);
  rec_.Stop(k);
  uint64_t behind = 0;
  rings_.DrainAll(1 << 20, [&](const Record& r) {
    if (r.type == RecordType::kKernelCh) behind = r.kernel.stop_cpu_ns;
  });
  EXPECT_NE(behind, 0u);
  EXPECT_EQ(rec_.ignored(), 0u);
}

TEST(RecorderOwnedSlotsTest,
     OwnerAndOtherThreadsStopInterleavedEachHandleOnce) {
  // Owned slots are stopped by their owner without a locked instruction and
  // by any other thread with a CAS. Here both happen at once on the same
  // partition: the owner starts children of a shared op, stops half of them
  // itself and hands the other half to a second thread; then both try a
  // second (sequential) stop of every handle. Every handle is accepted
  // once, every op completes once with all its children counted, nothing
  // leaks.
  RingSet rings(4, 1 << 14);
  PoolSizes sizes;
  sizes.op = 64;
  sizes.kernel = 256;  // 4 partitions of 32: the owner's spills over too
  Recorder rec(&rings, getpid(), sizes);
  CommContext ctx;
  ctx.comm_hash = 9;
  ctx.n_ranks = 2;
  ctx.mask.store(kSupportedEventMask);
  ctx.p2p_seq = std::make_unique<std::atomic<uint64_t>[]>(4);
  constexpr int kOps = 300;
  constexpr int kChildren = 40;
  std::atomic<int> round{-1};
  std::atomic<int> foreign_done{-1};
  std::vector<void*> theirs(kChildren / 2);
  std::thread other([&] {
    for (int r = 0; r < kOps; ++r) {
      while (round.load() < r) std::this_thread::yield();
      for (void* h : theirs) rec.Stop(h);
      for (void* h : theirs) rec.Stop(h);  // refused: already stopped
      foreign_done.store(r);
    }
  });
  std::vector<void*> mine(kChildren / 2);
  int completions = 0;
  for (int r = 0; r < kOps; ++r) {
    OpStart a;
    a.func = "AllReduce";
    a.seq_number = static_cast<uint64_t>(r);
    void* op = rec.StartOp(&ctx, nullptr, a);
    ASSERT_NE(op, nullptr) << r;
    for (int i = 0; i < kChildren; ++i) {
      void* k = rec.StartKernelCh(&ctx, op, static_cast<uint8_t>(i),
                                  uint64_t{1000} * (i + 1));
      ASSERT_NE(k, nullptr) << r << " " << i;
      rec.RecordState(k, abi::kKernelChStop, uint64_t{1000} * (i + 1) + 500);
      (i % 2 == 0 ? mine : theirs)[i / 2] = k;
    }
    round.store(r);  // the other thread stops `theirs` meanwhile
    rec.Stop(op);    // races with its detaches
    for (void* h : mine) rec.Stop(h);
    while (foreign_done.load() < r) std::this_thread::yield();
    for (void* h : mine) rec.Stop(h);  // refused: already stopped
    rings.DrainAll(1 << 20, [&](const Record& rd) {
      if (rd.type == RecordType::kCompletion) {
        ++completions;
        EXPECT_EQ(rd.completion.children, uint32_t{kChildren}) << r;
      }
    });
  }
  other.join();
  EXPECT_EQ(completions, kOps);
  EXPECT_EQ(rec.ignored(), uint64_t{kOps} * kChildren);
  EXPECT_EQ(rec.pool_exhausted(), 0u);
  EXPECT_EQ(rings.TotalFullDrops(), 0u);
}

TEST(RecorderOwnedSlotsTest,
     ThreadsClaimOwnPartitionsThenShareWithoutDoubleClaims) {
  // 4 rings and 1,024 kernel slots: each thread owns 128 slots claimed
  // without a CAS; beyond that it spills into the shared upper half. Every
  // handle in flight at once must be distinct, and all come back.
  RingSet rings(4, 4096);
  PoolSizes sizes;
  sizes.kernel = 1024;
  Recorder rec(&rings, getpid(), sizes);
  CommContext ctx;
  ctx.comm_hash = 7;
  ctx.n_ranks = 2;
  ctx.mask.store(kSupportedEventMask);
  ctx.p2p_seq = std::make_unique<std::atomic<uint64_t>[]>(4);
  constexpr int kThreads = 3;
  constexpr int kInFlight = 200;  // > 128: uses the shared half too
  constexpr int kRounds = 50;
  std::vector<std::vector<void*>> handles(kThreads);
  int kernel_records = 0;
  // The same threads (rings) every round; the main thread checks and drains
  // between phases.
  std::barrier sync(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        handles[t].clear();
        for (int i = 0; i < kInFlight; ++i) {
          handles[t].push_back(rec.StartKernelCh(&ctx, nullptr, 0, 1));
        }
        sync.arrive_and_wait();  // claimed
        sync.arrive_and_wait();  // checked
        // Stopped by another thread than the one that claimed them.
        for (void* h : handles[(t + 1) % kThreads]) rec.Stop(h);
        sync.arrive_and_wait();  // stopped
        sync.arrive_and_wait();  // drained
      }
    });
  }
  for (int round = 0; round < kRounds; ++round) {
    sync.arrive_and_wait();
    std::set<void*> distinct;
    int null_handles = 0;
    for (const auto& hs : handles) {
      for (void* h : hs) {
        if (h == nullptr) ++null_handles;
        distinct.insert(h);
      }
    }
    EXPECT_EQ(null_handles, 0) << "round " << round;
    EXPECT_EQ(distinct.size(), size_t{kThreads * kInFlight})
        << "a slot was claimed twice, round " << round;
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    rings.DrainAll(1 << 20, [&](const Record& r) {
      if (r.type == RecordType::kKernelCh) ++kernel_records;
    });
    sync.arrive_and_wait();
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(kernel_records, kThreads * kInFlight * kRounds);
  EXPECT_EQ(rec.ignored(), 0u);
  EXPECT_EQ(rec.pool_exhausted(), 0u);
}

TEST(RecorderDropsTest, ThreadWithoutRingCountsEachDropOnce) {
  RingSet rings(1, 64);
  Recorder rec(&rings, getpid());
  CommContext ctx;
  ctx.comm_hash = 7;
  ctx.mask.store(kSupportedEventMask);
  ASSERT_NE(rings.ThreadRing(), nullptr);  // this thread takes the only ring
  std::thread([&] {
    OpStart a;
    a.func = "AllReduce";
    EXPECT_EQ(rec.StartOp(&ctx, nullptr, a), nullptr);
  }).join();
  EXPECT_EQ(rings.no_ring_drops() + rec.pool_exhausted(), 1u);
  EXPECT_EQ(rec.pool_exhausted(), 0u);
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(ConfigLimitsTest, RingMemoryAboveCapFallsBackToDefaults) {
  ScopedEnv threads("PITSTOP_MAX_THREADS", "1024");
  ScopedEnv capacity("PITSTOP_RING_CAPACITY", "1048576");
  const PluginConfig c = ReadPluginConfig();
  const PluginConfig d;
  EXPECT_EQ(c.max_rings, d.max_rings);
  EXPECT_EQ(c.ring_capacity, d.ring_capacity);
  EXPECT_THAT(c.warnings,
              ::testing::Contains(::testing::HasSubstr("MiB of rings")));
}

TEST(ConfigLimitsTest, RingMemoryUnderCapIsKept) {
  ScopedEnv threads("PITSTOP_MAX_THREADS", "64");
  ScopedEnv capacity("PITSTOP_RING_CAPACITY", "65536");
  const PluginConfig c = ReadPluginConfig();
  EXPECT_EQ(c.max_rings, 64u);
  EXPECT_EQ(c.ring_capacity, 65536u);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ConfigLimitsTest, BadAgentSocketPathWarnsAndUsesDefault) {
  const PluginConfig d;
  for (const std::string& bad : {std::string("/tmp/") + std::string(103, 's'),
                                 std::string("rel.sock")}) {
    ScopedEnv sock("PITSTOP_AGENT_SOCKET", bad.c_str());
    const PluginConfig c = ReadPluginConfig();
    EXPECT_EQ(c.agent_socket, d.agent_socket) << bad;
    EXPECT_THAT(c.warnings, ::testing::Contains(
                                ::testing::HasSubstr("PITSTOP_AGENT_SOCKET")));
  }
  const std::string ok = std::string("/tmp/") + std::string(102, 's');
  ScopedEnv sock("PITSTOP_AGENT_SOCKET", ok.c_str());
  EXPECT_EQ(ReadPluginConfig().agent_socket, ok);
}

TEST(ConfigLimitsTest, EventMaskIsDecimalOrHexNeverOctalAndZeroWarns) {
  uint32_t mask = 0;
  ASSERT_TRUE(ParseEventMask("010", &mask));
  EXPECT_EQ(mask, 10u);  // octal would be 8
  ASSERT_TRUE(ParseEventMask("0x0a", &mask));
  EXPECT_EQ(mask, 10u);
  EXPECT_FALSE(ParseEventMask("0x", &mask));
  ScopedEnv m("PITSTOP_EVENT_MASK", "0");
  const PluginConfig c = ReadPluginConfig();
  EXPECT_EQ(c.event_mask, 0u);
  EXPECT_THAT(c.warnings,
              ::testing::Contains(::testing::HasSubstr("selects no events")));
}

}  // namespace
}  // namespace pitstop::plugin
