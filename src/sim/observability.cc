#include "src/sim/observability.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pitstop::sim {
namespace {

constexpr size_t kListed = 4;  // names listed in a reason before "..."

int NodeOf(const Plan& p, int rank) { return p.ranks[rank].node; }

// "a, b, c" of at most kListed names, then ", ...".
std::string Listed(const std::set<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (out.size() == kListed) {
      out.push_back("...");
      break;
    }
    out.push_back(n);
  }
  return absl::StrJoin(out, ", ");
}

bool Crosses(const Plan& p, const RingConnection& c, const FaultSpec& f) {
  const RankPlan& a = p.ranks[c.src];
  const RankPlan& b = p.ranks[c.dst];
  if (a.node == b.node) return false;  // NVLink: no NIC, no network link
  switch (f.kind) {
    case FaultKind::kSlowLink:
      return (a.node == f.node && b.node == f.peer_node) ||
             (b.node == f.node && a.node == f.peer_node);
    case FaultKind::kCommHang:  // the stalled connection sends node -> peer
      return a.node == f.node && b.node == f.peer_node;
    case FaultKind::kSlowNic:
    case FaultKind::kFlappingNic:
      return (a.node == f.node && a.nic == f.nic) ||
             (b.node == f.node && b.nic == f.nic);
    default:
      return false;
  }
}

// The other nodes `node`'s ranks exchange data with (sending only, when
// `send_only`), and the communicators whose rings do it.
void NodeNeighbours(const Plan& p, const std::vector<RingConnection>& conns,
                    int node, bool send_only, std::set<std::string>* nodes,
                    std::set<std::string>* comms) {
  for (const RingConnection& c : conns) {
    const int a = NodeOf(p, c.src), b = NodeOf(p, c.dst);
    if (a == b) continue;
    if (a == node) nodes->insert(HostName(b));
    if (b == node && !send_only) nodes->insert(HostName(a));
    if (a == node || (b == node && !send_only)) {
      comms->insert(p.comms[c.comm].name);
    }
  }
}

// Why no connection crosses the node pair of a slow link or comm hang.
std::string PairWhy(const Plan& p, const std::vector<RingConnection>& conns,
                    const FaultSpec& f) {
  const bool hang = f.kind == FaultKind::kCommHang;
  std::set<std::string> nodes, comms;
  NodeNeighbours(p, conns, f.node, hang, &nodes, &comms);
  const std::string what =
      hang ? absl::StrCat("no ring connection sends from ", HostName(f.node),
                          " to ", HostName(f.peer_node))
           : absl::StrCat("no ring connection joins ", HostName(f.node),
                          " and ", HostName(f.peer_node));
  if (nodes.empty()) {
    return absl::StrCat(what, ": ", HostName(f.node), "'s ranks ",
                        hang ? "send" : "exchange data",
                        " to no other node (every ring they are in stays "
                        "inside the node)");
  }
  return absl::StrCat(what, ": ", HostName(f.node), "'s ranks ",
                      hang ? "send across nodes only to "
                           : "exchange data "
                             "only with ",
                      Listed(nodes), " (rings of ", Listed(comms), ")");
}

// Why no connection between nodes goes through a NIC.
std::string NicWhy(const Plan& p, const FaultSpec& f) {
  std::set<std::string> users, comms;
  for (const RankPlan& r : p.ranks) {
    if (r.node != f.node || r.nic != f.nic) continue;
    users.insert(absl::StrCat("rank ", r.rank));
    for (int ci : r.comms) comms.insert(p.comms[ci].name);
  }
  const std::string nic = absl::StrCat(HostName(f.node), "'s ", NicName(f.nic));
  if (users.empty()) {
    return absl::StrFormat(
        "no connection goes through %s: no GPU of %s has it as its rail NIC "
        "(GPU g uses mlx5_<g %% %d>; %d GPUs per node)",
        nic, HostName(f.node), p.scenario.nics_per_node,
        p.scenario.gpus_per_node);
  }
  return absl::StrCat("no connection between nodes goes through ", nic, ": ",
                      Listed(users), ", whose rail NIC it is, ",
                      comms.empty()
                          ? "are in no communicator"
                          : absl::StrCat("reach no other node (", Listed(comms),
                                         " stay inside the node)"));
}

// When the last transfer that moved data started (the model slows a
// connection by the faults active then), and whether some rank was stuck
// or dead for good in the run.
int64_t LastTransferStartNs(const Plan& p, bool* stopped) {
  int64_t last = 0;
  *stopped = false;
  for (const RankPlan& r : p.ranks) {
    if (r.crash_ns < p.duration_ns) *stopped = true;
    for (const OpPlan& op : r.ops) {
      if (op.end_ns() == kNever) *stopped = true;
      for (const ConnPlan& c : op.conns) {
        if (c.stop_ns != kNever) last = std::max(last, c.progress_ns);
      }
    }
  }
  return last;
}

// Why a fault that connections cross slowed none of them: they moved no
// data while it was active.
std::string IdleWhy(const Plan& p, const std::vector<RingConnection>& conns,
                    const FaultSpec& f) {
  const int64_t at_ns = static_cast<int64_t>(f.at_s * 1e9);
  if (at_ns >= p.duration_ns) {
    return absl::StrFormat("it starts at %g s, after the run's %g s", f.at_s,
                           p.scenario.duration_s);
  }
  bool stopped = false;
  const int64_t last = LastTransferStartNs(p, &stopped);
  if (stopped && at_ns > last) {
    return absl::StrFormat(
        "the job starts no transfer after t=%.1f s (its ranks are stuck or "
        "dead from then on), before it begins at %g s",
        last / 1e9, f.at_s);
  }
  std::set<std::string> crossing;
  for (const RingConnection& c : conns) {
    if (!Crosses(p, c, f)) continue;
    crossing.insert(absl::StrCat(p.comms[c.comm].name, " rank ", c.src,
                                 " -> rank ", c.dst));
  }
  return absl::StrCat("the connections that cross it (", Listed(crossing),
                      ") moved no data while it was active");
}

}  // namespace

std::vector<RingConnection> JobConnections(const Plan& plan) {
  std::vector<RingConnection> out;
  for (size_t ci = 0; ci < plan.comms.size(); ++ci) {
    const std::vector<int>& m = plan.comms[ci].members;
    for (size_t i = 0; i < m.size(); ++i) {
      out.push_back({static_cast<int>(ci), m[i], m[(i + 1) % m.size()]});
    }
  }
  return out;
}

bool IsConnectionFault(FaultKind kind) {
  return kind == FaultKind::kSlowLink || kind == FaultKind::kSlowNic ||
         kind == FaultKind::kFlappingNic || kind == FaultKind::kCommHang;
}

void MarkUnobservable(const std::vector<bool>& moved, Plan* plan) {
  const std::vector<RingConnection> conns = JobConnections(*plan);
  for (FaultTruth& t : plan->truths) {
    const FaultSpec& f = t.spec;
    if (!IsConnectionFault(f.kind)) continue;
    const bool crossed = std::any_of(
        conns.begin(), conns.end(),
        [&](const RingConnection& c) { return Crosses(*plan, c, f); });
    if (!crossed) {
      const bool nic =
          f.kind == FaultKind::kSlowNic || f.kind == FaultKind::kFlappingNic;
      t.not_observable = nic ? NicWhy(*plan, f) : PairWhy(*plan, conns, f);
    } else if (f.kind != FaultKind::kCommHang && !moved[t.index]) {
      t.not_observable = IdleWhy(*plan, conns, f);
    }
  }
}

}  // namespace pitstop::sim
