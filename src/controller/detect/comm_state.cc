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
  const int32_t n = static_cast<int32_t>(c.members.size());
  if (a < 0 || b < 0 || a >= n || b >= n) return true;
  const std::string& ha = c.members[a].host;
  const std::string& hb = c.members[b].host;
  return ha.empty() || hb.empty() || ha != hb;
}

void FoldConnections(CommState* c, const Join& join) {
  std::vector<double> tputs;
  for (const ConnSample& s : join.connections) {
    if (s.throughput_bps > 0 && InterHost(*c, s.src, s.dst)) {
      tputs.push_back(s.throughput_bps);
    }
  }
  if (tputs.size() < 2) return;
  const double median = Median(tputs);
  if (median <= 0) return;
  ++c->window.collectives_with_connections;
  for (const ConnSample& s : join.connections) {
    if (s.throughput_bps > 0 && InterHost(*c, s.src, s.dst)) {
      c->window.link_ratio[{s.src, s.dst}].push_back(s.throughput_bps / median);
    }
  }
}

}  // namespace

Member& CommState::MemberAt(int32_t rank) {
  if (rank >= static_cast<int32_t>(members.size())) members.resize(rank + 1);
  return members[rank];
}

int32_t CommState::ExpectedRanks() const {
  return n_ranks_known ? n_ranks : static_cast<int32_t>(members.size());
}

void CommState::ResetWindow() { window = WindowAccum{}; }

void FoldJoin(CommState* c, int32_t func, const Join& join) {
  const size_t n = join.duration_ns.size();
  int64_t max_d = 0;
  int64_t min_d = INT64_MAX;
  size_t argmin = 0;
  int ties = 0;
  for (size_t r = 0; r < n; ++r) {
    const int64_t d = join.duration_ns[r];
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
  for (size_t r = 0; r < n; ++r) {
    waits[r] = static_cast<double>(join.duration_ns[r] - min_d);
    w.sum_wait_ns[r] += waits[r];
  }
  // The rank that arrived last waited least; ties name nobody.
  if (ties == 0) ++w.last_count[argmin];
  ++w.collectives;
  w.min_duration_ns.push_back(static_cast<double>(min_d));
  w.lateness_ns.push_back(Median(std::move(waits)));
  w.min_duration_by_key[SizeKey(func, join.bytes)].push_back(
      static_cast<double>(min_d));
  FoldConnections(c, join);
}

}  // namespace pitstop::controller
