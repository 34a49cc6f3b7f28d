#include "src/controller/detect/comm_slow_detector.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/robust_stats.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

constexpr double kBaselineAlpha = 0.2;
constexpr uint32_t kBaselineWindows = 2;
constexpr size_t kMaxLinkSuspects = 4;

struct SlowLink {
  int32_t src;
  int32_t dst;
  double ratio;
};

double WindowGrowth(const CommState& c) {
  double growth = 0;
  for (const auto& [key, samples] : c.window.min_duration_by_key) {
    auto it = c.baselines.find(key);
    if (it == c.baselines.end() || it->second.windows < kBaselineWindows ||
        it->second.ewma_ns <= 0) {
      continue;
    }
    growth = std::max(growth, Median(samples) / it->second.ewma_ns);
  }
  return growth;
}

// Collective time of the window above the baselines, summed.
double ExtraNs(const CommState& c) {
  double extra = 0;
  for (const auto& [key, samples] : c.window.min_duration_by_key) {
    auto it = c.baselines.find(key);
    if (it == c.baselines.end() || it->second.windows < kBaselineWindows) {
      continue;
    }
    extra += std::max(0.0, Median(samples) - it->second.ewma_ns) *
             static_cast<double>(samples.size());
  }
  return extra;
}

void UpdateBaselines(CommState* c) {
  for (const auto& [key, samples] : c->window.min_duration_by_key) {
    Baseline& b = c->baselines[key];
    const double m = Median(samples);
    b.ewma_ns = b.windows == 0
                    ? m
                    : (1 - kBaselineAlpha) * b.ewma_ns + kBaselineAlpha * m;
    ++b.windows;
  }
}

std::vector<SlowLink> FindSlowLinks(const CommState& c, double min_effect) {
  std::vector<SlowLink> slow;
  const double limit = 1.0 / (1.0 + min_effect);
  for (const auto& [link, ratios] : c.window.link_ratio) {
    const double r = Median(ratios);
    if (r < limit) slow.push_back({link.first, link.second, r});
  }
  // A "slow" majority means the median itself moved: nothing stands out.
  if (slow.size() * 2 > c.window.link_ratio.size()) slow.clear();
  return slow;
}

const Member* MemberOf(const CommState& c, int32_t rank) {
  return c.FindMember(rank);
}

// Localises slow links to one NIC, one node pair, or the links themselves.
// Returns the fault key target.
std::string Localise(const CommState& c, const std::vector<SlowLink>& slow,
                     v1::Fault* f) {
  std::map<std::pair<std::string, std::string>, int> nic_count;
  std::set<std::pair<std::string, std::string>> host_pairs;
  for (const SlowLink& l : slow) {
    const Member* a = MemberOf(c, l.src);
    const Member* b = MemberOf(c, l.dst);
    const std::string ha = a ? a->host : "";
    const std::string hb = b ? b->host : "";
    ++nic_count[{ha, a ? a->nic : ""}];
    ++nic_count[{hb, b ? b->nic : ""}];
    host_pairs.insert(std::minmax(ha, hb));
  }
  const int n = static_cast<int>(slow.size());
  if (host_pairs.size() >= 2) {
    for (const auto& [nic, count] : nic_count) {
      if (count != n || nic.first.empty()) continue;
      // Every slow link touches this NIC: blame it.
      const SlowLink& l = slow.front();
      const Member* a = MemberOf(c, l.src);
      const int32_t rank = (a && a->host == nic.first) ? l.src : l.dst;
      v1::Suspect* s = f->add_suspects();
      *s = MemberSuspect(c, rank, v1::SUSPECT_LEVEL_NIC, 0.8);
      s->set_nic(nic.second);
      return absl::StrCat("nic:", nic.first, ":", nic.second);
    }
  }
  if (host_pairs.size() == 1) {
    const SlowLink& l = slow.front();
    v1::Suspect* s = f->add_suspects();
    *s = MemberSuspect(c, l.src, v1::SUSPECT_LEVEL_LINK, 0.8);
    const v1::Suspect peer = MemberSuspect(c, l.dst, v1::SUSPECT_LEVEL_LINK, 0);
    s->set_peer_comm_rank(l.dst);
    s->set_peer_global_rank(peer.global_rank());
    s->set_peer_host(peer.host());
    return absl::StrCat("hosts:", host_pairs.begin()->first, "|",
                        host_pairs.begin()->second);
  }
  std::string target = "links";
  for (size_t i = 0; i < slow.size() && i < kMaxLinkSuspects; ++i) {
    const SlowLink& l = slow[i];
    v1::Suspect* s = f->add_suspects();
    *s = MemberSuspect(c, l.src, v1::SUSPECT_LEVEL_LINK, 0.5);
    const v1::Suspect peer = MemberSuspect(c, l.dst, v1::SUSPECT_LEVEL_LINK, 0);
    s->set_peer_comm_rank(l.dst);
    s->set_peer_global_rank(peer.global_rank());
    s->set_peer_host(peer.host());
    absl::StrAppend(&target, ":", l.src, ">", l.dst);
  }
  return absl::StrFormat("%s@%x", target, c.comm_hash);
}

}  // namespace

CommSlowVerdict DetectCommSlow(CommState* comm, const v1::JobPolicy& policy,
                               bool straggler_hit) {
  CommSlowVerdict v;
  if (comm->collectives_joined < policy.warmup_collectives() ||
      comm->window.collectives < 2) {
    return v;
  }
  const double growth = WindowGrowth(*comm);
  const bool slowed = growth >= 1.0 + policy.min_effect();
  const std::vector<SlowLink> slow = FindSlowLinks(*comm, policy.min_effect());
  // A straggler's window is judged too: growth compares the last
  // arriver's duration (no wait in it) with the baseline, and links are
  // judged on the time their data moved (net of each rank's wait,
  // comm_state.cc), so a slow NIC in the straggler's ring is not hidden by
  // it. Such a window is no baseline sample, though.
  if (slow.empty()) {
    if (!slowed) {
      if (!straggler_hit) UpdateBaselines(comm);
    } else if (comm->window.collectives_with_connections == 0) {
      v.want_profiling = true;
    }
    return v;
  }
  v.hit = true;
  v.extra_ns = ExtraNs(*comm);
  v1::Fault& f = v.fault;
  FillFaultHeader(*comm, v1::FAULT_CLASS_COMM_SLOW, "comm_slow", &f);
  const std::string target = Localise(*comm, slow, &f);
  v.key = absl::StrCat("commslow/", comm->job_id, "/", target);
  v1::Evidence* e = f.add_evidence();
  e->set_comm_hash(comm->comm_hash);
  auto& values = *e->mutable_values();
  values["growth_vs_baseline"] = growth;
  values["collectives"] = comm->window.collectives;
  values["collectives_with_connections"] =
      comm->window.collectives_with_connections;
  std::string links;
  for (const SlowLink& l : slow) {
    values[absl::StrCat("throughput_ratio/", l.src, ">", l.dst)] = l.ratio;
    absl::StrAppend(&links, links.empty() ? "" : ", ", l.src, "->", l.dst,
                    absl::StrFormat(" (%.0f%%)", l.ratio * 100));
  }
  e->set_text(absl::StrFormat(
      "inter-node links %s moved data at the given share of the median "
      "connection of the same collectives in %u collectives; collective "
      "duration %.2fx baseline",
      links, comm->window.collectives_with_connections, growth));
  AddVictims(*comm, {}, &f);
  f.set_summary(absl::StrFormat("comm-slow: %s is slow (%zu slow link(s))",
                                target, slow.size()));
  return v;
}

}  // namespace pitstop::controller
