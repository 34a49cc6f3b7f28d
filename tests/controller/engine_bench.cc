// Benchmark driver of the detection engine (not a test): N simulated ranks,
// 8 per node; per node one tensor-parallel communicator of 8 ranks and, per
// local GPU index, one data-parallel communicator across all nodes (N/8
// ranks). Each iteration every TP comm runs 4 all-reduces and every DP comm
// two; every rank's summaries and progress are fed node by node (as agent
// batches arrive), so each collective's join stays open until the last node.
// Prints summaries and collectives joined per second (feeding, single thread),
// the detection cycle time (windows closing, every detector running) and the
// RSS; and, in thread CPU time, how much of a cycle the controller spends
// under its lock with the cycle in one step (round 6, odd iterations) and
// in three steps (detectors on a copy off the lock, even iterations), with
// the longest stretch between two yields.
//
//   controller_engine_bench --ranks 100000 --iterations 20
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "src/controller/detect/detection_engine.h"

namespace pitstop::controller {
namespace {

double RssMiB() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, rss = 0;
  in >> pages >> rss;
  return rss * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

struct Comm {
  uint64_t hash;
  std::vector<int32_t> globals;  // comm rank -> global rank
};

std::string Host(int32_t global) { return absl::StrCat("node", global / 8); }

double ThreadCpuS() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The longest CPU stretch between two marks: how long the controller holds
// its lock without letting it go (it does so between communicators).
struct Stretch {
  double last = ThreadCpuS();
  double longest = 0;
  void Mark() {
    const double now = ThreadCpuS();
    longest = std::max(longest, now - last);
    last = now;
  }
};

int Main(int argc, char** argv) {
  int32_t ranks = 1000;
  int iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iterations"))
      iterations = std::atoi(argv[i + 1]);
  }
  if (ranks < 16 || ranks % 8 != 0 || iterations < 1) {
    std::fprintf(stderr,
                 "usage: %s --ranks N (multiple of 8, >= 16) "
                 "--iterations K\n",
                 argv[0]);
    return 2;
  }
  const double rss0 = RssMiB();
  FakeClock clock;
  auto engine_or = DetectionEngine::Create(&clock, {});
  if (!engine_or.ok()) return 1;
  DetectionEngine* engine = engine_or->get();
  const int32_t nodes = ranks / 8;
  std::vector<Comm> comms;
  for (int32_t n = 0; n < nodes; ++n) {
    Comm& c = comms.emplace_back();
    c.hash = 0x1000000 + n;
    for (int32_t g = 0; g < 8; ++g) c.globals.push_back(n * 8 + g);
  }
  for (int32_t g = 0; g < 8; ++g) {
    Comm& c = comms.emplace_back();
    c.hash = 0x2000000 + g;
    for (int32_t n = 0; n < nodes; ++n) c.globals.push_back(n * 8 + g);
  }
  for (int32_t n = 0; n < nodes; ++n) {
    v1::NodeRegistration reg;
    reg.set_host(Host(n * 8));
    for (int g = 0; g < 8; ++g) {
      reg.add_gpus()->set_index(g);
      reg.add_nics()->set_name(absl::StrCat("mlx5_", g));
    }
    (void)engine->AddNode(reg);
  }
  for (const Comm& c : comms) {
    v1::CommunicatorInfo info;
    info.set_comm_hash(c.hash);
    info.set_n_ranks(c.globals.size());
    info.set_job_id("bench");
    for (int32_t g : c.globals) info.add_global_ranks(g);
    for (size_t r = 0; r < c.globals.size(); ++r) {
      info.set_rank(r);
      info.set_host(Host(c.globals[r]));
      info.set_pid(10000 + c.globals[r]);
      info.set_cuda_device(c.globals[r] % 8);
      (void)engine->AddCommunicator(info.host(), info);
    }
  }
  v1::CollectiveSummary s;
  s.set_func(v1::COLL_FUNC_ALL_REDUCE);
  s.set_state(v1::OP_STATE_COMPLETED);
  s.set_bytes(64 << 20);
  v1::RankProgress p;
  p.set_func(v1::COLL_FUNC_ALL_REDUCE);
  p.set_last_enqueue_cpu_ns(1);
  p.set_last_completion_cpu_ns(1);
  // global rank -> (comm index, comm rank) of its communicators.
  std::vector<std::vector<std::pair<size_t, int32_t>>> member_of(ranks);
  for (size_t ci = 0; ci < comms.size(); ++ci) {
    for (size_t r = 0; r < comms[ci].globals.size(); ++r) {
      member_of[comms[ci].globals[r]].push_back({ci, static_cast<int32_t>(r)});
    }
  }
  uint64_t max_pending = 0;
  uint64_t summaries = 0;
  double feed_s = 0, cycle_s = 0, cycle_max_s = 0;
  uint64_t seq[2] = {0, 0};
  // CPU time of the cycles: one step (all of it under the controller's
  // lock) and three steps (copy + publish under it, detectors without).
  double one_locked_s = 0, one_stretch_s = 0;
  double split_locked_s = 0, split_detect_s = 0, split_stretch_s = 0;
  for (int it = 0; it < iterations; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    // Node by node, as agents' batches arrive: every collective stays open
    // until the last node reported it.
    for (int32_t g = 0; g < ranks; ++g) {
      if (g == ranks / 2) {  // half the nodes reported: joins are open
        max_pending =
            std::max<uint64_t>(max_pending, engine->stats().pending_joins);
      }
      for (const auto& [ci, r] : member_of[g]) {
        const Comm& c = comms[ci];
        const bool tp = c.hash < 0x2000000;
        const int ops = tp ? 4 : 2;
        const uint64_t first = seq[tp] + 1;
        s.set_comm_hash(c.hash);
        s.set_rank(r);
        s.set_global_rank(g);
        for (int op = 0; op < ops; ++op) {
          s.set_seq_number(first + op);
          s.set_kernel_duration_ns(1'000'000 +
                                   (r * 7919 + op * 104729) % 20'000);
          s.clear_connections();
          if (!tp) {
            for (int dir = 0; dir < 2; ++dir) {
              v1::ConnectionSummary* cs = s.add_connections();
              cs->set_peer_rank((r + (dir ? c.globals.size() - 1 : 1)) %
                                c.globals.size());
              cs->set_is_send(dir == 0);
              cs->set_bytes(s.bytes());
              cs->set_throughput_bps(20e9 + (r % 13) * 1e8);
            }
          }
          (void)engine->AddSummary(Host(g), s);
          ++summaries;
        }
        p.set_comm_hash(c.hash);
        p.set_rank(r);
        p.set_global_rank(g);
        p.set_last_enqueued_seq(first + ops - 1);
        p.set_last_started_seq(first + ops - 1);
        p.set_last_completed_seq(first + ops - 1);
        (void)engine->AddProgress(Host(g), p);
      }
    }
    max_pending =
        std::max<uint64_t>(max_pending, engine->stats().pending_joins);
    seq[1] += 4;
    seq[0] += 2;
    const auto t1 = std::chrono::steady_clock::now();
    clock.Advance(absl::Milliseconds(1000));  // every window closes
    // Odd iterations: the cycle in one step (round 6: the controller held
    // its lock throughout, letting it go between communicators); even: in
    // three steps (the detectors on a copy, off the lock). Thread CPU time,
    // so a loaded machine does not change it.
    const bool split = it % 2 == 0;
    Stretch stretch;
    CycleResult r;
    if (split) {
      const double b0 = ThreadCpuS();
      std::unique_ptr<CycleWork> work =
          engine->BeginCycle([&stretch] { stretch.Mark(); });
      stretch.Mark();
      const double b1 = ThreadCpuS();
      work->Detect();
      const double d1 = ThreadCpuS();
      stretch.last = d1;
      r = engine->FinishCycle(work.get(), [&stretch] { stretch.Mark(); });
      stretch.Mark();
      split_locked_s += (b1 - b0) + (ThreadCpuS() - d1);
      split_detect_s += d1 - b1;
      split_stretch_s = std::max(split_stretch_s, stretch.longest);
    } else {
      const double c0 = ThreadCpuS();
      r = engine->RunCycle([&stretch] { stretch.Mark(); });
      stretch.Mark();
      one_locked_s += ThreadCpuS() - c0;
      one_stretch_s = std::max(one_stretch_s, stretch.longest);
    }
    const double c = absl::ToDoubleSeconds(r.cycle_time);
    feed_s += std::chrono::duration<double>(t1 - t0).count();
    cycle_s += c;
    cycle_max_s = std::max(cycle_max_s, c);
    if (!r.faults.empty()) {
      std::fprintf(stderr, "unexpected fault: %s\n",
                   r.faults[0].summary().c_str());
    }
  }
  const EngineStats st = engine->stats();
  std::printf(
      "ranks %d comms %zu iterations %d | summaries/s %.0f | collectives "
      "joined %lu (%.0f/s) | cycle mean %.1f ms max %.1f ms | RSS %.0f MiB "
      "(engine %.0f MiB) | open joins mid-iteration %lu, dropped %lu\n",
      ranks, comms.size(), iterations, summaries / feed_s,
      static_cast<unsigned long>(st.collectives_joined),
      st.collectives_joined / feed_s, cycle_s / iterations * 1e3,
      cycle_max_s * 1e3, RssMiB(), RssMiB() - rss0,
      static_cast<unsigned long>(max_pending),
      static_cast<unsigned long>(st.incomplete_dropped));
  const int one = iterations / 2;
  const int three = iterations - one;
  std::printf(
      "cycle CPU under the controller's lock: one step (detectors under it) "
      "%.2f ms per cycle, longest stretch without a yield %.2f ms | three "
      "steps (detectors on a copy) %.2f ms per cycle, longest stretch %.2f "
      "ms, detectors off the lock %.2f ms\n",
      one ? one_locked_s / one * 1e3 : 0.0, one_stretch_s * 1e3,
      split_locked_s / three * 1e3, split_stretch_s * 1e3,
      split_detect_s / three * 1e3);
  return 0;
}

}  // namespace
}  // namespace pitstop::controller

int main(int argc, char** argv) {
  return pitstop::controller::Main(argc, argv);
}
