#include "src/sim/rank_driver.h"

#include <time.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "pitstop/status_macros.h"
#include "src/nccl/emulator/nccl_emulator.h"

namespace pitstop::sim {
namespace {

constexpr int kProxyStepBit = 0x10;
// Events closer than this to "now" run without sleeping (fewer wake-ups).
constexpr int64_t kCoalesceNs = 200'000;

void SleepUntil(int64_t abs_ns) {
  timespec ts;
  ts.tv_sec = abs_ns / 1'000'000'000;
  ts.tv_nsec = abs_ns % 1'000'000'000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

struct Event {
  int64_t t;  // plan time
  int order;  // tie-break: program order
  std::function<void()> run;
};

class Replayer {
 public:
  Replayer(const Plan& plan, const RankPlan& me, const RankDriverOptions& o,
           emu::Emulator* emu, std::vector<std::unique_ptr<emu::Comm>>* comms)
      : plan_(plan), me_(me), o_(o), emu_(emu), comms_(comms) {}

  void Run() {
    for (const OpPlan& op : me_.ops) {
      if (!RunOp(op)) return;  // blocked forever in this op
    }
  }

 private:
  int64_t Abs(int64_t t) const { return o_.start_ns + t; }
  uint64_t Gpu(int64_t t) const { return EmulatedGpuNs(me_.rank, Abs(t)); }

  // Sleeps until plan time `t`; dies first if a crash is planned before.
  void WaitFor(int64_t t) {
    if (t >= me_.crash_ns) {
      SleepUntil(Abs(me_.crash_ns));
      emu::SimulateCrash(1);
    }
    if (Abs(t) - MonotonicNowNs() > kCoalesceNs) SleepUntil(Abs(t));
  }

  // Returns false if the op never completes (the rank is stuck in it).
  bool RunOp(const OpPlan& op) {
    emu::Comm* comm = (*comms_)[op.comm].get();
    emu::OpSpec spec;
    spec.func = op.func;
    spec.count = op.bytes / 4;
    spec.datatype = "ncclFloat32";
    if (op.func == "Broadcast" || op.func == "Reduce") spec.root = 0;
    spec.n_channels = static_cast<int>(op.channel_stop_ns.size());
    spec.seq_number = op.seq;
    WaitFor(op.api_ns);
    std::unique_ptr<emu::Op> handle = comm->StartOp(spec);
    emu::Op* h = handle.get();
    const bool deep = (emu_->activation_mask() & kProxyStepBit) != 0;
    std::vector<Event> ev;
    int order = 0;
    auto add = [&](int64_t t, std::function<void()> f) {
      if (t != kNever) ev.push_back({t, order++, std::move(f)});
    };
    add(op.enqueue_ns, [h] { h->EnqueueDone(); });
    auto proxy = std::make_shared<std::vector<int>>(op.conns.size(), -1);
    for (size_t i = 0; i < op.conns.size(); ++i) {
      const ConnPlan& c = op.conns[i];
      add(c.post_ns, [h, proxy, i, c] {
        (*proxy)[i] = h->ProxyOpStart(
            {.channel = c.channel,
             .peer = c.peer,
             .is_send = c.is_send,
             .n_steps = c.n_steps,
             .chunk_size = static_cast<int>(c.bytes / std::max(1, c.n_steps))});
      });
    }
    for (size_t ch = 0; ch < op.channel_stop_ns.size(); ++ch) {
      const uint64_t g = Gpu(op.kernel_start_ns);
      add(op.kernel_start_ns, [h, ch, g] { h->KernelStart(ch, g); });
    }
    for (size_t i = 0; i < op.conns.size(); ++i) {
      const ConnPlan& c = op.conns[i];
      add(c.progress_ns, [h, proxy, i] { h->ProxyOpInProgress((*proxy)[i]); });
      if (deep && c.progress_ns != kNever) AddSteps(c, i, h, proxy, add);
      add(c.stop_ns, [h, proxy, i] { h->ProxyOpStop((*proxy)[i]); });
    }
    for (size_t ch = 0; ch < op.channel_stop_ns.size(); ++ch) {
      const int64_t t = op.channel_stop_ns[ch];
      if (t == kNever) continue;
      const uint64_t g = Gpu(t);
      add(t, [h, ch, g] { h->KernelStop(ch, g); });
    }
    std::sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
      return a.t != b.t ? a.t < b.t : a.order < b.order;
    });
    for (Event& e : ev) {
      WaitFor(e.t);
      e.run();
    }
    if (op.end_ns() == kNever) {
      held_.push_back(std::move(handle));  // stays open, like a hung op
      return false;
    }
    return true;
  }

  template <typename Add>
  void AddSteps(const ConnPlan& c, size_t i, emu::Op* h,
                std::shared_ptr<std::vector<int>> proxy, Add& add) {
    const int n = std::max(1, c.n_steps);
    const bool stalls = c.stop_ns == kNever;
    const int emit = stalls ? c.steps_before_stall : n;
    const int64_t span = stalls ? 2'000'000 * n : c.stop_ns - c.progress_ns;
    const uint64_t bytes = c.bytes / n;
    for (int k = 0; k < emit; ++k) {
      const int64_t t = c.progress_ns + span * (k + 1) / n;
      add(std::min(t, stalls ? kNever - 1 : c.stop_ns),
          [h, proxy, i, k, bytes] { h->ProxyStep((*proxy)[i], k, bytes); });
    }
  }

  const Plan& plan_;
  const RankPlan& me_;
  const RankDriverOptions& o_;
  emu::Emulator* emu_;
  std::vector<std::unique_ptr<emu::Comm>>* comms_;
  std::vector<std::unique_ptr<emu::Op>> held_;
};

}  // namespace

uint64_t EmulatedGpuNs(int rank, int64_t cpu_ns) {
  return static_cast<uint64_t>(cpu_ns) + 5'000'000'000ull +
         static_cast<uint64_t>(rank) * 7'919'000'000ull;
}

absl::Status RunRank(const Plan& plan, const RankDriverOptions& options) {
  if (options.rank < 0 || options.rank >= static_cast<int>(plan.ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank ", options.rank, " not in [0, ", plan.ranks.size(), ")"));
  }
  const RankPlan& me = plan.ranks[options.rank];
  ASSIGN_OR_RETURN(std::unique_ptr<emu::Emulator> emu,
                   emu::Emulator::Create({.plugin = options.plugin}));
  // Indexed by comm index of the plan (null where not a member).
  std::vector<std::unique_ptr<emu::Comm>> comms(plan.comms.size());
  for (int ci : me.comms) {
    const CommDef& c = plan.comms[ci];
    const int comm_rank =
        std::find(c.members.begin(), c.members.end(), me.rank) -
        c.members.begin();
    ASSIGN_OR_RETURN(
        comms[ci], emu->InitComm({.comm_hash = c.hash,
                                  .name = c.name,
                                  .n_ranks = static_cast<int>(c.members.size()),
                                  .rank = comm_rank,
                                  .n_nodes = c.n_nodes}));
  }
  {
    Replayer replayer(plan, me, options, emu.get(), &comms);
    replayer.Run();
    // Blocked or done: stay until the end of the run (or the crash).
    const int64_t end = std::max(plan.duration_ns, me.finish_ns);
    if (me.crash_ns <= end) {
      SleepUntil(options.start_ns + me.crash_ns);
      emu::SimulateCrash(1);
    }
    SleepUntil(options.start_ns + end);
  }
  for (auto& c : comms) {
    if (c != nullptr) c->Finalize();
  }
  return absl::OkStatus();
}

}  // namespace pitstop::sim
