#include "src/controller/detect/mismatch.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

bool IsP2p(int32_t func) {
  return func == v1::COLL_FUNC_SEND || func == v1::COLL_FUNC_RECV ||
         func == v1::COLL_FUNC_SEND_RECV;
}

// The op `rank` is blocked in: its oldest incomplete op over the non-P2P
// functions (a grouped launch can leave several open; the oldest is the one
// the others queue behind). nullopt when it has nothing open.
std::optional<IssuedOp> BlockedOp(const CommState& comm, int32_t rank) {
  std::optional<IssuedOp> best;
  uint64_t best_age = 0;
  for (const auto& [func, fp] : comm.progress) {
    if (IsP2p(func)) continue;
    const RankProgressState& rp = fp.RankAt(rank);
    if (!rp.reported || rp.enqueued <= rp.completed) continue;
    IssuedOp op;
    op.func = func;
    // Imports number collectives across functions (Flight Recorder's
    // collective_seq_id): the reported oldest op is the blocked one then.
    op.seq = rp.oldest_incomplete_seq > rp.completed ? rp.oldest_incomplete_seq
                                                     : rp.completed + 1;
    // Count and datatype describe the reported oldest op only.
    if (rp.oldest_incomplete_seq == op.seq) {
      op.count = rp.oldest_incomplete_count;
      op.datatype = rp.oldest_incomplete_datatype;
    }
    if (!best || rp.oldest_incomplete_age_ns > best_age) {
      best = op;
      best_age = rp.oldest_incomplete_age_ns;
    }
  }
  return best;
}

// Same collective as far as what is known tells: unknown sizes match.
bool SameCollective(const IssuedOp& a, const IssuedOp& b) {
  if (a.func != b.func) return false;
  if (a.count != 0 && b.count != 0 && a.count != b.count) return false;
  if (a.datatype != 0 && b.datatype != 0 && a.datatype != b.datatype) {
    return false;
  }
  return true;
}

std::string EnumText(const std::string& name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(name, prefix));
}

std::string Describe(const IssuedOp& op) {
  std::string s = absl::StrCat(
      EnumText(v1::CollFunc_Name(static_cast<v1::CollFunc>(op.func)),
               "COLL_FUNC_"),
      " seq ", op.seq);
  if (op.count != 0 || op.datatype != 0) {
    absl::StrAppend(
        &s, " (", op.count != 0 ? absl::StrCat(op.count) : "?", " x ",
        op.datatype != 0 ? EnumText(v1::DataType_Name(
                                        static_cast<v1::DataType>(op.datatype)),
                                    "DATA_TYPE_")
                         : "?",
        ")");
  }
  return s;
}

}  // namespace

// Whether every member of `waiter` never enqueued what `x` is blocked in:
// `waiter` cannot be on its way to it, so the two sides wait for each other.
bool NeverIssued(const CommState& comm, const Mismatch::Group& x,
                 const Mismatch::Group& waiter) {
  auto fp = comm.progress.find(x.op.func);
  for (int32_t r : waiter.ranks) {
    if (fp != comm.progress.end() &&
        fp->second.RankAt(r).enqueued >= x.op.seq) {
      return false;
    }
  }
  return true;
}

std::optional<Mismatch> FindMismatch(const CommState& comm,
                                     const std::set<int32_t>& judged) {
  if (judged.size() < 2) return std::nullopt;
  Mismatch m;
  for (int32_t r : judged) {
    std::optional<IssuedOp> op = BlockedOp(comm, r);
    if (!op) return std::nullopt;  // a member not blocked: not a desync
    for (const Mismatch::Group& g : m.groups) {
      // One function at two points: a member stalled behind the others
      // (the hang detector's case), whatever the sizes say.
      if (g.op.func == op->func && g.op.seq != op->seq) return std::nullopt;
    }
    auto g = std::find_if(
        m.groups.begin(), m.groups.end(),
        [&](const Mismatch::Group& x) { return SameCollective(x.op, *op); });
    if (g == m.groups.end()) {
      m.groups.push_back({*op, {r}});
      continue;
    }
    // Fill in what this member knows and the group did not.
    if (g->op.count == 0) g->op.count = op->count;
    if (g->op.datatype == 0) g->op.datatype = op->datatype;
    g->ranks.insert(r);
  }
  if (m.groups.size() < 2) return std::nullopt;
  // Members blocked in different functions are a desync only when each
  // side never issued what the other waits in; a member that already went
  // past the other's collective (completed it) is waiting for a stalled
  // peer, not desynchronised from it.
  for (const Mismatch::Group& x : m.groups) {
    for (const Mismatch::Group& y : m.groups) {
      if (x.op.func != y.op.func && !NeverIssued(comm, x, y)) {
        return std::nullopt;
      }
    }
  }
  // Majority first; among equals, the group holding the lowest rank.
  std::stable_sort(m.groups.begin(), m.groups.end(),
                   [](const Mismatch::Group& a, const Mismatch::Group& b) {
                     if (a.ranks.size() != b.ranks.size()) {
                       return a.ranks.size() > b.ranks.size();
                     }
                     return *a.ranks.begin() < *b.ranks.begin();
                   });
  m.tie = m.groups[0].ranks.size() == m.groups[1].ranks.size();
  return m;
}

void BuildMismatchFault(const CommState& comm, const Mismatch& m,
                        int64_t stuck_ns, v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_MISMATCH, "hang", f);
  const Mismatch::Group& major = m.groups[0];
  f->set_func(static_cast<v1::CollFunc>(major.op.func));
  f->set_seq_number(static_cast<uint64_t>(major.op.seq));
  v1::Evidence* e =
      f->evidence_size() > 0 ? f->mutable_evidence(0) : f->add_evidence();
  e->set_comm_hash(comm.comm_hash);
  auto& values = *e->mutable_values();
  values["stuck_ns"] = static_cast<double>(stuck_ns);
  values["majority_func"] = major.op.func;
  values["majority_seq"] = static_cast<double>(major.op.seq);
  values["majority_count"] = static_cast<double>(major.op.count);
  values["majority_datatype"] = major.op.datatype;
  values["majority_ranks"] = static_cast<double>(major.ranks.size());
  values["groups"] = static_cast<double>(m.groups.size());
  std::set<int32_t> differing;
  std::string who;
  for (size_t i = 1; i < m.groups.size(); ++i) {
    const Mismatch::Group& g = m.groups[i];
    std::string ranks;
    for (int32_t r : g.ranks) {
      differing.insert(r);
      *f->add_suspects() =
          MemberSuspect(comm, r, v1::SUSPECT_LEVEL_RANK, m.tie ? 0.5 : 0.8);
      values[absl::StrCat("issued_func/rank", r)] = g.op.func;
      values[absl::StrCat("issued_seq/rank", r)] =
          static_cast<double>(g.op.seq);
      values[absl::StrCat("issued_count/rank", r)] =
          static_cast<double>(g.op.count);
      values[absl::StrCat("issued_datatype/rank", r)] = g.op.datatype;
      if (f->suspects_size() <= 8) {
        absl::StrAppend(&ranks, ranks.empty() ? "" : ", ",
                        DescribeRank(comm, r));
      }
    }
    absl::StrAppend(&who, who.empty() ? "" : "; ", ranks, " issued ",
                    Describe(g.op));
  }
  values["differing_ranks"] = static_cast<double>(differing.size());
  AddVictims(comm, differing, f);
  f->set_summary(absl::StrFormat(
      "mismatch: the members of %s issued different collectives at one "
      "point and wait for each other (an application desync, not a hardware "
      "fault), blocked %.1f s: %s, where %s %zu rank(s) issued %s",
      CommLabel(comm), stuck_ns / 1e9, who,
      m.tie ? "(no majority) the other" : "the other", major.ranks.size(),
      Describe(major.op)));
  e->set_text(f->summary());
}

}  // namespace pitstop::controller
