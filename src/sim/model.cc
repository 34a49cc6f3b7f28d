#include "src/sim/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "pitstop/status_macros.h"
#include "src/sim/observability.h"

namespace pitstop::sim {
namespace {

constexpr int64_t kApiToEnqueueNs = 15'000;
constexpr int64_t kEnqueueToKernelNs = 10'000;
constexpr int64_t kKernelTailNs = 5'000;
constexpr int64_t kAfterOpNs = 10'000;

int64_t Sec(double s) { return static_cast<int64_t>(s * 1e9); }

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool Active(const FaultSpec& f, int64_t t) {
  const int64_t at = Sec(f.at_s);
  if (t < at) return false;
  if (f.duration_s > 0 && t >= at + Sec(f.duration_s)) return false;
  if (f.kind == FaultKind::kFlappingNic) {
    const int64_t period = std::max<int64_t>(1, Sec(f.period_s));
    return ((t - at) / period) % 2 == 0;  // on, off, on, ...
  }
  return true;
}

// Ring traffic per rank and link, as a multiple of the message size.
double TrafficFactor(const std::string& func, int n) {
  if (func == "AllReduce") return 2.0 * (n - 1) / n;
  if (func == "AllGather" || func == "ReduceScatter") return (n - 1.0) / n;
  return 1.0;  // Broadcast, Reduce: the whole buffer flows along the chain
}

class Builder {
 public:
  explicit Builder(const Scenario& s)
      : s_(s), rng_(s.seed), normal_(0.0, 1.0), uniform_(0.0, 1.0) {}

  Plan Build();

 private:
  void MakeRanksAndComms();
  std::vector<std::vector<int>> GroupMembers(Group g) const;
  double ComputeNs(int rank, double ms, int64_t t);
  // Records which link and NIC faults the connection crosses while active
  // when it `moves` data (a stalled or blocked connection shows nothing).
  double LinkBps(int src, int dst, int64_t t, bool moves);
  void RunCollective(int comm, const PhaseSpec& p, int step, int phase,
                     bool eval);
  // RunCollective's steps. One collective of a communicator: who arrives
  // and when, the one-shot faults it meets, each connection's transfer.
  struct Collective {
    int comm = 0;
    int n = 0;
    int64_t t0 = 0;  // the last member's kernel start
    bool all_arrive = true;
    std::vector<bool> arrives;
    double slow = 1;            // a slow-collective fault's factor
    int hang_src = -1;          // comm rank whose send connection stalls
    int odd_member = -1;        // comm rank that issued it with other counts
    std::vector<int64_t> xfer;  // transfer time of comm rank i's send
    int64_t slowest = 0;
  };
  // Members stopped by a crash or a non-comm hang do not arrive (blocked
  // for good); t0 is when the last one that does starts the kernel.
  void Arrive(const CommDef& c, Collective* k);
  // A slow-collective, comm-hang or mismatch fault due at t0 (when every
  // member arrived) applies to this collective, once.
  void ApplyOneShotFaults(const CommDef& c, Collective* k);
  void TransferTimes(const CommDef& c, const PhaseSpec& p, Collective* k);
  // Each arriving member's op, with its send and receive connections.
  void EmitOps(const CommDef& c, const PhaseSpec& p, int step, int phase,
               bool eval, uint64_t seq, const Collective& k);
  void MakeTruths();
  FaultTruth& Truth(int index) { return plan_.truths[index]; }

  const Scenario& s_;
  Plan plan_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;
  std::uniform_real_distribution<double> uniform_;
  std::vector<int64_t> t_;                            // per rank: free at
  std::vector<bool> blocked_;                         // per rank: stuck forever
  std::vector<std::vector<int>> group_comms_{4};      // Group -> comm indices
  std::vector<std::map<std::string, uint64_t>> seq_;  // per comm, per func
  std::vector<bool> consumed_;                        // one-shot faults used
  // Per fault: a connection that moved data crossed it while it was active.
  std::vector<bool> crossed_;
};

std::vector<std::vector<int>> Builder::GroupMembers(Group g) const {
  const int tp = s_.tp, pp = s_.pp, dp = s_.dp;
  auto rank = [&](int d, int p, int t) { return d * pp * tp + p * tp + t; };
  std::vector<std::vector<int>> out;
  switch (g) {
    case Group::kTp:
      for (int d = 0; d < dp; ++d)
        for (int p = 0; p < pp; ++p) {
          out.emplace_back();
          for (int t = 0; t < tp; ++t) out.back().push_back(rank(d, p, t));
        }
      break;
    case Group::kPp:
      for (int d = 0; d < dp; ++d)
        for (int t = 0; t < tp; ++t) {
          out.emplace_back();
          for (int p = 0; p < pp; ++p) out.back().push_back(rank(d, p, t));
        }
      break;
    case Group::kDp:
      for (int p = 0; p < pp; ++p)
        for (int t = 0; t < tp; ++t) {
          out.emplace_back();
          for (int d = 0; d < dp; ++d) out.back().push_back(rank(d, p, t));
        }
      break;
    case Group::kWorld:
      out.emplace_back();
      for (int r = 0; r < s_.world_size(); ++r) out.back().push_back(r);
      break;
  }
  return out;
}

void Builder::MakeRanksAndComms() {
  const int world = s_.world_size();
  plan_.ranks.resize(world);
  for (int r = 0; r < world; ++r) {
    RankPlan& rp = plan_.ranks[r];
    rp.rank = r;
    rp.node = r / s_.gpus_per_node;
    rp.gpu = r % s_.gpus_per_node;
    rp.nic = rp.gpu % s_.nics_per_node;
  }
  bool used[4] = {false, false, false, false};
  for (const auto* steps : {&s_.step, &s_.eval_step}) {
    for (const PhaseSpec& p : *steps) {
      if (!p.compute) used[static_cast<int>(p.group)] = true;
    }
  }
  for (Group g : {Group::kTp, Group::kPp, Group::kDp, Group::kWorld}) {
    if (!used[static_cast<int>(g)]) continue;
    const auto groups = GroupMembers(g);
    for (size_t i = 0; i < groups.size(); ++i) {
      if (groups[i].size() < 2) continue;
      CommDef c;
      c.group = g;
      c.name = g == Group::kWorld ? "world" : absl::StrCat(GroupName(g), i);
      c.members = groups[i];
      c.hash = Fnv1a(absl::StrCat(s_.job_id, "/", c.name, "/", s_.seed));
      std::vector<int> nodes;
      for (int m : c.members) nodes.push_back(m / s_.gpus_per_node);
      std::sort(nodes.begin(), nodes.end());
      c.n_nodes = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
      const int idx = plan_.comms.size();
      for (int m : c.members) plan_.ranks[m].comms.push_back(idx);
      group_comms_[static_cast<int>(g)].push_back(idx);
      plan_.comms.push_back(std::move(c));
    }
  }
  seq_.resize(plan_.comms.size());
}

double Builder::ComputeNs(int rank, double ms, int64_t t) {
  double factor = 1 + s_.compute_jitter * normal_(rng_);
  factor = std::clamp(factor, 0.5, 1.5);
  for (const FaultSpec& f : s_.faults) {
    if (f.kind == FaultKind::kSlowGpu && f.rank == rank && Active(f, t)) {
      factor *= f.factor;
    }
  }
  return ms * 1e6 * factor;
}

// Bytes per second available to one connection (the channels share a link).
double Builder::LinkBps(int src, int dst, int64_t t, bool moves) {
  const RankPlan& a = plan_.ranks[src];
  const RankPlan& b = plan_.ranks[dst];
  double gbps;
  if (a.node == b.node) {
    gbps = s_.nvlink_gbps;
  } else {
    double fa = 1, fb = 1, fl = 1;
    for (size_t fi = 0; fi < s_.faults.size(); ++fi) {
      const FaultSpec& f = s_.faults[fi];
      if (!Active(f, t)) continue;
      if (f.kind == FaultKind::kSlowNic || f.kind == FaultKind::kFlappingNic) {
        const bool at_a = f.node == a.node && f.nic == a.nic;
        const bool at_b = f.node == b.node && f.nic == b.nic;
        if (at_a) fa = std::max(fa, f.factor);
        if (at_b) fb = std::max(fb, f.factor);
        if ((at_a || at_b) && moves) crossed_[fi] = true;
      }
      if (f.kind == FaultKind::kSlowLink &&
          ((f.node == a.node && f.peer_node == b.node) ||
           (f.node == b.node && f.peer_node == a.node))) {
        fl = std::max(fl, f.factor);
        if (moves) crossed_[fi] = true;
      }
    }
    gbps = s_.nic_gbps / std::max({fa, fb, fl});
  }
  return gbps * 1e9 / 8 / s_.channels;
}

void Builder::RunCollective(int ci, const PhaseSpec& p, int step, int phase,
                            bool eval) {
  const CommDef& c = plan_.comms[ci];
  Collective k;
  k.comm = ci;
  k.n = c.members.size();
  Arrive(c, &k);
  const uint64_t seq = seq_[ci][p.func]++;
  ApplyOneShotFaults(c, &k);
  TransferTimes(c, p, &k);
  EmitOps(c, p, step, phase, eval, seq, k);
}

void Builder::Arrive(const CommDef& c, Collective* k) {
  k->arrives.assign(k->n, false);
  for (int i = 0; i < k->n; ++i) {
    const int r = c.members[i];
    bool stops = blocked_[r] || plan_.ranks[r].crash_ns <= t_[r];
    for (size_t fi = 0; fi < s_.faults.size() && !stops; ++fi) {
      const FaultSpec& f = s_.faults[fi];
      if (f.kind == FaultKind::kNonCommHang && f.rank == r &&
          t_[r] >= Sec(f.at_s)) {
        stops = true;
        if (!consumed_[fi]) {
          consumed_[fi] = true;
          Truth(fi).onset_ns = t_[r];
        }
      }
    }
    if (stops) {
      blocked_[r] = true;
      k->all_arrive = false;
      continue;
    }
    k->arrives[i] = true;
    k->t0 = std::max(k->t0, t_[r] + kApiToEnqueueNs + kEnqueueToKernelNs);
  }
}

void Builder::ApplyOneShotFaults(const CommDef& c, Collective* k) {
  const int n = k->n;
  for (size_t fi = 0; fi < s_.faults.size() && k->all_arrive; ++fi) {
    const FaultSpec& f = s_.faults[fi];
    if (consumed_[fi] || k->t0 < Sec(f.at_s)) continue;
    if (f.kind == FaultKind::kSlowCollective) {
      k->slow = f.factor;
      consumed_[fi] = true;
      Truth(fi).onset_ns = k->t0;
    }
    if (f.kind == FaultKind::kCommHang) {
      for (int i = 0; i < n && k->hang_src < 0; ++i) {
        const int a = c.members[i], b = c.members[(i + 1) % n];
        if (plan_.ranks[a].node == f.node &&
            plan_.ranks[b].node == f.peer_node) {
          k->hang_src = i;
        }
      }
      if (k->hang_src >= 0) {
        consumed_[fi] = true;
        Truth(fi).onset_ns = k->t0;
        Truth(fi).rank = c.members[k->hang_src];
      }
    }
  }
  // An application desync: one member issues this collective with half the
  // elements of the others'. Everyone enters it and nobody completes.
  for (size_t fi = 0; fi < s_.faults.size() && k->all_arrive; ++fi) {
    const FaultSpec& f = s_.faults[fi];
    if (consumed_[fi] || f.kind != FaultKind::kMismatch ||
        k->t0 < Sec(f.at_s)) {
      continue;
    }
    for (int i = 0; i < n && k->odd_member < 0; ++i) {
      if (c.members[i] == f.rank) k->odd_member = i;
    }
    if (k->odd_member >= 0) {
      consumed_[fi] = true;
      Truth(fi).onset_ns = k->t0;
    }
  }
}

void Builder::TransferTimes(const CommDef& c, const PhaseSpec& p,
                            Collective* k) {
  const int n = k->n;
  const double per_conn_bytes =
      TrafficFactor(p.func, n) * p.bytes / s_.channels;
  const double lat_ns =
      (p.func == "AllReduce" ? 2.0 * (n - 1) : n - 1.0) * 1000 *
      (c.n_nodes > 1 ? s_.net_latency_us : s_.nvlink_latency_us);
  // Transfer time of the send connection of comm rank i (to i + 1).
  k->xfer.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    const bool moves = k->all_arrive && k->odd_member < 0 && i != k->hang_src;
    const double bps =
        LinkBps(c.members[i], c.members[(i + 1) % n], k->t0, moves);
    k->xfer[i] =
        static_cast<int64_t>((lat_ns + per_conn_bytes / bps * 1e9) * k->slow);
    k->slowest = std::max(k->slowest, k->xfer[i]);
  }
}

void Builder::EmitOps(const CommDef& c, const PhaseSpec& p, int step, int phase,
                      bool eval, uint64_t seq, const Collective& k) {
  const int n = k.n;
  const bool hung = !k.all_arrive || k.hang_src >= 0 || k.odd_member >= 0;
  const double per_conn_bytes =
      TrafficFactor(p.func, n) * p.bytes / s_.channels;
  const int64_t end = hung ? kNever : k.t0 + k.slowest + kKernelTailNs;
  for (int i = 0; i < n; ++i) {
    if (!k.arrives[i]) continue;
    const int r = c.members[i];
    OpPlan op;
    op.comm = k.comm;
    op.comm_rank = i;
    op.func = p.func;
    op.seq = seq;
    op.bytes = i == k.odd_member ? p.bytes / 2 : p.bytes;
    op.step = step;
    op.phase = phase;
    op.eval = eval;
    op.api_ns = t_[r];
    op.enqueue_ns = t_[r] + kApiToEnqueueNs;
    op.kernel_start_ns = op.enqueue_ns + kEnqueueToKernelNs;
    op.channel_stop_ns.assign(s_.channels, end);
    for (int ch = 0; ch < s_.channels; ++ch) {
      for (bool send : {true, false}) {
        ConnPlan cp;
        const int peer = send ? (i + 1) % n : (i - 1 + n) % n;
        const int sender = send ? i : peer;
        cp.peer = peer;
        cp.peer_global = c.members[peer];
        cp.channel = ch;
        cp.is_send = send;
        cp.bytes = static_cast<uint64_t>(per_conn_bytes);
        cp.n_steps = s_.steps_per_proxy_op;
        cp.post_ns = op.enqueue_ns + 2'000;
        const bool stalls =
            !k.all_arrive || sender == k.hang_src || k.odd_member >= 0;
        cp.progress_ns = k.all_arrive && k.odd_member < 0 ? k.t0 : kNever;
        cp.stop_ns = stalls ? kNever : k.t0 + k.xfer[sender];
        cp.steps_before_stall =
            k.all_arrive && k.odd_member < 0 ? cp.n_steps / 2 : 0;
        op.conns.push_back(cp);
      }
    }
    t_[r] = hung ? kNever : end + kAfterOpNs;
    if (hung) blocked_[r] = true;
    plan_.ranks[r].ops.push_back(std::move(op));
  }
}

void Builder::MakeTruths() {
  for (size_t i = 0; i < s_.faults.size(); ++i) {
    const FaultSpec& f = s_.faults[i];
    FaultTruth t;
    t.index = i;
    t.spec = f;
    t.onset_ns = Sec(f.at_s);
    if (f.duration_s > 0) t.end_ns = Sec(f.at_s + f.duration_s);
    t.expect_fault = !IsDeceptiveNormal(f.kind);
    t.nics_per_node = s_.nics_per_node;
    switch (f.kind) {
      case FaultKind::kSlowGpu:
        t.expected_class = "NON_COMM_SLOW";
        break;
      case FaultKind::kSlowNic:
      case FaultKind::kFlappingNic:
      case FaultKind::kSlowLink:
        t.expected_class = "COMM_SLOW";
        break;
      case FaultKind::kNonCommHang:
        t.expected_class = "NON_COMM_HANG";
        t.happened = false;  // set when the rank really stops
        break;
      case FaultKind::kCommHang:
        t.expected_class = "COMM_HANG";
        t.happened = false;
        break;
      case FaultKind::kCrash:
        t.expected_class = "PROCESS_DIED";
        break;
      case FaultKind::kMismatch:
        t.expected_class = "MISMATCH";
        t.happened = false;  // set when the rank issues it
        break;
      default:
        break;
    }
    if (f.rank >= 0) {
      t.rank = f.rank;
      t.host = HostName(f.rank / s_.gpus_per_node);
      t.gpu = f.rank % s_.gpus_per_node;
    }
    if (f.node >= 0) t.host = HostName(f.node);
    if (f.nic >= 0) t.nic = NicName(f.nic);
    if (f.peer_node >= 0) t.peer_host = HostName(f.peer_node);
    plan_.truths.push_back(t);
  }
}

Plan Builder::Build() {
  plan_.scenario = s_;
  plan_.duration_ns = Sec(s_.duration_s);
  MakeRanksAndComms();
  MakeTruths();
  const int world = s_.world_size();
  t_.assign(world, 0);
  blocked_.assign(world, false);
  consumed_.assign(s_.faults.size(), false);
  crossed_.assign(s_.faults.size(), false);
  for (const FaultSpec& f : s_.faults) {
    if (f.kind == FaultKind::kCrash) {
      auto& c = plan_.ranks[f.rank].crash_ns;
      c = std::min(c, Sec(f.at_s));
    }
  }
  for (int step = 0;; ++step) {
    int64_t lo = kNever, hi = 0;
    for (int r = 0; r < world; ++r) {
      if (blocked_[r]) continue;
      lo = std::min(lo, t_[r]);
      hi = std::max(hi, t_[r]);
    }
    if (lo == kNever || hi >= plan_.duration_ns) break;
    plan_.steps = step + 1;
    bool eval = false;
    for (size_t fi = 0; fi < s_.faults.size(); ++fi) {
      const FaultSpec& f = s_.faults[fi];
      if (f.kind == FaultKind::kEvalPhase && Active(f, lo)) eval = true;
      if (f.kind == FaultKind::kCheckpointPause && !consumed_[fi] &&
          lo >= Sec(f.at_s)) {
        consumed_[fi] = true;
        Truth(fi).onset_ns = lo;
        for (int r = 0; r < world; ++r) {
          if (!blocked_[r]) t_[r] += Sec(f.pause_s);
        }
      }
    }
    const auto& phases = eval ? s_.eval_step : s_.step;
    for (size_t ph = 0; ph < phases.size(); ++ph) {
      const PhaseSpec& p = phases[ph];
      if (p.compute) {
        for (int r = 0; r < world; ++r) {
          if (blocked_[r]) continue;
          double ns = ComputeNs(r, p.compute_ms, t_[r]);
          for (const FaultSpec& f : s_.faults) {
            if (f.kind == FaultKind::kDataLoaderJitter && ph == 0 &&
                Active(f, t_[r]) && uniform_(rng_) < f.probability) {
              ns += uniform_(rng_) * f.jitter_ms * 1e6;
            }
          }
          t_[r] += static_cast<int64_t>(ns);
        }
        continue;
      }
      for (int ci : group_comms_[static_cast<int>(p.group)]) {
        RunCollective(ci, p, step, ph, eval);
      }
    }
  }
  for (RankPlan& rp : plan_.ranks) {
    rp.finish_ns = plan_.duration_ns;
    if (!rp.ops.empty() && rp.ops.back().end_ns() != kNever) {
      rp.finish_ns = std::max(plan_.duration_ns, rp.ops.back().end_ns());
    }
  }
  for (size_t fi = 0; fi < s_.faults.size(); ++fi) {
    const FaultKind k = s_.faults[fi].kind;
    if (k == FaultKind::kNonCommHang || k == FaultKind::kCommHang ||
        k == FaultKind::kMismatch) {
      Truth(fi).happened = consumed_[fi];
    }
    if (k == FaultKind::kCrash) {
      Truth(fi).happened = Sec(s_.faults[fi].at_s) < plan_.duration_ns;
    }
  }
  MarkUnobservable(crossed_, &plan_);
  return std::move(plan_);
}

}  // namespace

int64_t OpPlan::end_ns() const {
  int64_t e = 0;
  for (int64_t c : channel_stop_ns) e = std::max(e, c);
  return e;
}

std::string HostName(int node) { return absl::StrCat("node", node); }
std::string NicName(int nic) { return absl::StrCat("mlx5_", nic); }

std::string FaultTruth::Describe() const {
  std::string where;
  if (rank >= 0 && spec.kind != FaultKind::kCommHang) {
    where = absl::StrCat("rank ", rank, " (", host, " GPU ", gpu, ")");
  } else if (!nic.empty()) {
    where = absl::StrCat(host, " ", nic);
  } else if (!peer_host.empty()) {
    where = absl::StrCat(host, " <-> ", peer_host);
  } else {
    where = "all ranks";
  }
  return absl::StrCat(FaultKindName(spec.kind), " at ", spec.at_s, " s on ",
                      where);
}

absl::StatusOr<Plan> BuildPlan(const Scenario& scenario) {
  RETURN_IF_ERROR(ValidateScenario(scenario));
  return Builder(scenario).Build();
}

}  // namespace pitstop::sim
