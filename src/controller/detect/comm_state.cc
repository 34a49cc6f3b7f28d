#include "src/controller/detect/comm_state.h"

#include <algorithm>
#include <bit>

#include "src/controller/detect/robust_stats.h"

namespace pitstop::controller {
namespace {

constexpr size_t kRecentDurations = 256;

uint64_t SizeKey(int32_t func, uint64_t bytes) {
  const uint64_t log2 = bytes == 0 ? 0 : std::bit_width(bytes);
  return (static_cast<uint64_t>(func) << 8) | log2;
}

bool InterHost(const CommState& c, int32_t a, int32_t b) {
  const Member* ma = c.FindMember(a);
  const Member* mb = c.FindMember(b);
  if (ma == nullptr || mb == nullptr) return true;
  const std::string& ha = ma->host;
  const std::string& hb = mb->host;
  return ha.empty() || hb.empty() || ha != hb;
}

// A connection's throughput over the time its data moved. A rank that
// reaches the collective early starts its proxy ops early and they wait,
// with it, for the last rank: with a straggler every link but the
// straggler's looks slow by the straggler's lateness. Taking the reporting
// rank's own wait (`waits`, by comm rank; empty when the join has no
// timings) off the op's duration leaves the transfer, so a slow NIC in
// the ring of a straggler still stands out (issue #12, concurrent faults).
double NetThroughput(const ConnSample& s, const std::vector<double>& waits) {
  const auto r = static_cast<size_t>(s.reporter);
  if (s.duration_ns == 0 || s.bytes == 0 || r >= waits.size()) {
    return s.throughput_bps;
  }
  const double net = static_cast<double>(s.duration_ns) - waits[r];
  // An op that lasted no longer than its rank's wait moved its data in no
  // measurable time: nothing to judge.
  if (net <= 0) return 0;
  return static_cast<double>(s.bytes) * 1e9 / net;
}

void FoldConnections(CommState* c, const Join& join,
                     const std::vector<double>& waits = {}) {
  std::vector<double> tputs;
  tputs.reserve(join.connections.size());
  for (const ConnSample& s : join.connections) {
    tputs.push_back(InterHost(*c, s.src, s.dst) ? NetThroughput(s, waits) : 0);
  }
  std::vector<double> inter;
  for (double t : tputs) {
    if (t > 0) inter.push_back(t);
  }
  if (inter.size() < 2) return;
  const double median = Median(std::move(inter));
  if (median <= 0) return;
  ++c->window.collectives_with_connections;
  for (size_t i = 0; i < tputs.size(); ++i) {
    if (tputs[i] <= 0) continue;
    const ConnSample& s = join.connections[i];
    c->window.link_ratio[{s.src, s.dst}].push_back(tputs[i] / median);
  }
}

}  // namespace

Member& CommState::MemberAt(int32_t rank) { return members[rank]; }

const Member* CommState::FindMember(int32_t rank) const {
  auto it = members.find(rank);
  return it == members.end() ? nullptr : &it->second;
}

int32_t CommState::ExpectedRanks() const {
  if (n_ranks_known) return n_ranks;
  return members.empty() ? 0 : members.rbegin()->first + 1;
}

const RankProgressState& FuncProgress::RankAt(int32_t rank) const {
  static const RankProgressState kNone;
  auto it = ranks.find(rank);
  return it == ranks.end() ? kNone : it->second;
}

void CommState::ResetWindow() { window = WindowAccum{}; }

void FoldJoin(CommState* c, int32_t func, const Join& join) {
  // Complete joins hold every rank of [0, n_ranks): the keys are 0..n-1.
  const size_t n =
      join.duration_ns.empty()
          ? 0
          : static_cast<size_t>(join.duration_ns.rbegin()->first) + 1;
  if (n != join.duration_ns.size()) return FoldConnections(c, join);
  int64_t max_d = 0;
  int64_t min_d = INT64_MAX;
  size_t argmin = 0;
  int ties = 0;
  for (const auto& [rank, d] : join.duration_ns) {
    const size_t r = static_cast<size_t>(rank);
    if (d <= 0) return FoldConnections(c, join);  // no timings on this op
    max_d = std::max(max_d, d);
    if (d < min_d) {
      min_d = d;
      argmin = r;
      ties = 0;
    } else if (d == min_d) {
      ++ties;
    }
  }
  if (n < 2) return;
  if (c->recent_max_duration_ns.size() < kRecentDurations) {
    c->recent_max_duration_ns.push_back(static_cast<double>(max_d));
  } else {
    c->recent_max_duration_ns[c->recent_next] = static_cast<double>(max_d);
  }
  c->recent_next = (c->recent_next + 1) % kRecentDurations;

  WindowAccum& w = c->window;
  if (w.sum_wait_ns.size() < n) {
    w.sum_wait_ns.resize(n, 0);
    w.last_count.resize(n, 0);
  }
  std::vector<double> waits(n);
  for (const auto& [rank, d] : join.duration_ns) {
    const size_t r = static_cast<size_t>(rank);
    waits[r] = static_cast<double>(d - min_d);
    w.sum_wait_ns[r] += waits[r];
  }
  // The rank that arrived last waited least; ties name nobody.
  if (ties == 0) ++w.last_count[argmin];
  ++w.collectives;
  w.min_duration_ns.push_back(static_cast<double>(min_d));
  w.lateness_ns.push_back(Median(waits));
  w.min_duration_by_key[SizeKey(func, join.bytes)].push_back(
      static_cast<double>(min_d));
  FoldConnections(c, join, waits);
}

}  // namespace pitstop::controller
