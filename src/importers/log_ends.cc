#include "src/importers/log_ends.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

// A member's end in one (communicator, function).
struct MemberEnd {
  size_t rank_index = 0;
  uint64_t last = 0;                   // highest seq of any record
  uint64_t last_completed = 0;         // highest completed seq
  bool pending = false;                // something enqueued and not completed
  std::vector<uint64_t> completed;     // seqs of completed records
  const ImportedOp* latest = nullptr;  // the record with the highest seq
};

struct CommView {
  std::string name;
  std::vector<MemberEnd> members;
  // seq -> the latest time of a member's completed record of it (0 = no
  // time).
  std::map<uint64_t, uint64_t> latest;
  // Lowest seq of a record some member has not completed (0 = none).
  uint64_t lowest_pending = 0;
  int64_t longest_ns = 0;
};

uint64_t OpTime(const ImportedOp& op) {
  return std::max({op.end_ns, op.start_ns,
                   static_cast<uint64_t>(op.record.enqueue_start_cpu_ns())});
}

bool Judged(const ImportedOp& op) {
  return op.for_detection && op.record.kind() == v1::OP_KIND_COLLECTIVE;
}

// Collectives that no member completes before every member has taken part
// (as hang_detector.cc's NeedsEveryMember).
bool NeedsEveryMember(v1::CollFunc func) {
  return func == v1::COLL_FUNC_ALL_REDUCE || func == v1::COLL_FUNC_ALL_GATHER ||
         func == v1::COLL_FUNC_REDUCE_SCATTER ||
         func == v1::COLL_FUNC_ALL_TO_ALL || func == v1::COLL_FUNC_BARRIER;
}

void AddRecord(const ImportedOp& op, CommView* c, MemberEnd* m) {
  const uint64_t seq = op.record.seq_number();
  if (m->latest == nullptr || seq >= m->last) m->latest = &op;
  m->last = std::max(m->last, seq);
  if (op.state != v1::OP_STATE_COMPLETED) {
    m->pending = true;
    if (c->lowest_pending == 0 || seq < c->lowest_pending) {
      c->lowest_pending = seq;
    }
    return;
  }
  m->last_completed = std::max(m->last_completed, seq);
  m->completed.push_back(seq);
  uint64_t& t = c->latest[seq];
  t = std::max(t, OpTime(op));
  if (op.start_ns > 0 && op.end_ns > op.start_ns) {
    c->longest_ns =
        std::max(c->longest_ns, static_cast<int64_t>(op.end_ns - op.start_ns));
  }
}

std::map<SeqKey, CommView> ViewComms(const ImportedJob& job) {
  std::map<SeqKey, CommView> comms;
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const ImportedRank& rank = job.ranks[i];
    if (rank.absent) continue;
    std::map<SeqKey, MemberEnd> mine;
    for (const ImportedOp& op : rank.ops) {
      if (!Judged(op)) continue;
      const SeqKey key = SeqKeyOf(op.record);
      MemberEnd& m = mine[key];
      m.rank_index = i;
      AddRecord(op, &comms[key], &m);
    }
    for (auto& [key, m] : mine) {
      std::sort(m.completed.begin(), m.completed.end());
      comms[key].members.push_back(std::move(m));
    }
    for (const v1::CommunicatorInfo& info : rank.comms) {
      for (auto it = comms.lower_bound({info.comm_hash(), 0});
           it != comms.end() && it->first.first == info.comm_hash(); ++it) {
        if (it->second.name.empty()) it->second.name = info.comm_name();
      }
    }
  }
  return comms;
}

// The rank's log end: its file's own time, or its latest record.
uint64_t LogEndOf(const ImportedRank& rank) {
  uint64_t end = rank.log_end_ns;
  for (const ImportedOp& op : rank.ops) end = std::max(end, OpTime(op));
  return end;
}

LogEndJudgement Judge(const LogEnd& e) {
  if (!e.times_known) return LogEndJudgement::kCannotTell;
  if (e.gap_ns <= e.interval_ns + e.interval_ns / 4) {
    return LogEndJudgement::kOrdinaryEnd;
  }
  if (e.interval_ns > 0 && e.gap_ns > e.interval_ns + e.timeout_ns) {
    return LogEndJudgement::kStuck;
  }
  return LogEndJudgement::kCannotTell;
}

// One lagging member's end, judged.
LogEnd JudgeMember(const ImportedJob& job, const SeqKey& key, const CommView& c,
                   const MemberEnd& m, uint64_t peers_last,
                   int64_t peers_interval, int64_t timeout, uint64_t own) {
  const ImportedRank& rank = job.ranks[m.rank_index];
  LogEnd e;
  e.global_rank = rank.global_rank;
  e.comm_hash = key.first;
  e.func = static_cast<v1::CollFunc>(key.second);
  e.comm_name = c.name;
  e.last_seq = m.last;
  e.peers_last_seq = peers_last;
  e.timeout_ns = timeout;
  e.interval_ns = rank.flush_interval_ns > 0
                      ? static_cast<int64_t>(rank.flush_interval_ns)
                      : peers_interval;
  uint64_t later = 0;
  for (auto it = c.latest.upper_bound(m.last); it != c.latest.end(); ++it) {
    later = std::max(later, it->second);
  }
  e.times_known = later > 0 && own > 0;
  if (e.times_known) {
    e.gap_ns = later >= own ? static_cast<int64_t>(later - own)
                            : -static_cast<int64_t>(own - later);
  }
  e.judgement = Judge(e);
  return e;
}

// Fills of the members of a collective that needs every member whose
// completed records stop below `target` (completed by some member), except
// members with something pending and those in `skip`.
void FillTo(const SeqKey& key, const CommView& c, uint64_t target,
            const std::set<size_t>& skip, std::vector<LogEndFill>* out) {
  if (!NeedsEveryMember(static_cast<v1::CollFunc>(key.second))) return;
  for (const MemberEnd& m : c.members) {
    if (m.pending || m.latest == nullptr || skip.count(m.rank_index)) continue;
    auto above =
        std::upper_bound(m.completed.begin(), m.completed.end(), target);
    if (above != m.completed.begin() && *std::prev(above) == target) continue;
    LogEndFill f;
    f.rank_index = m.rank_index;
    f.op.record = m.latest->record;
    f.op.record.set_seq_number(target);
    f.op.record.set_enqueue_start_cpu_ns(0);
    f.op.state = v1::OP_STATE_COMPLETED;
    f.op.derived = true;
    f.op.name =
        "(completed: a peer's record of it completed; this file "
        "ended or sampled past it)";
    f.op.track = m.latest->track;
    out->push_back(std::move(f));
  }
}

// Judges the members of one (communicator, function) that end below their
// peers; appends them to `report`, with its cut and fills.
void JudgeComm(const ImportedJob& job, const SeqKey& key, const CommView& c,
               const std::vector<uint64_t>& log_end,
               const LogEndOptions& options, LogEndReport* report) {
  uint64_t peers_last = 0;
  int64_t peers_interval = 0;
  for (const MemberEnd& m : c.members) {
    peers_last = std::max(peers_last, m.last_completed);
    peers_interval = std::max(
        peers_interval,
        static_cast<int64_t>(job.ranks[m.rank_index].flush_interval_ns));
  }
  const int64_t timeout = std::max<int64_t>(
      options.hang_timeout_floor_ns,
      static_cast<int64_t>(options.hang_timeout_multiplier *
                           static_cast<double>(c.longest_ns)));
  std::optional<uint64_t> cut;
  std::set<size_t> stuck;
  for (const MemberEnd& m : c.members) {
    // Only a member with nothing pending whose records end below what a
    // peer completed; and not when some member waits in a collective above
    // its end (then who is waited for is detection's question).
    if (m.pending || m.last >= peers_last) continue;
    if (c.lowest_pending > m.last) continue;
    LogEnd e = JudgeMember(job, key, c, m, peers_last, peers_interval, timeout,
                           log_end[m.rank_index]);
    if (e.judgement == LogEndJudgement::kStuck) stuck.insert(m.rank_index);
    cut = cut.has_value() ? std::min(*cut, m.last) : m.last;
    report->ends.push_back(std::move(e));
  }
  if (!cut.has_value()) return;
  if (stuck.empty()) report->cuts[key] = *cut;
  FillTo(key, c, stuck.empty() ? *cut : peers_last, stuck, &report->fills);
}

std::string Seconds(int64_t ns) {
  const double s = static_cast<double>(ns) / 1e9;
  if (std::abs(s) < 1) return absl::StrFormat("%.0f ms", s * 1e3);
  return absl::StrFormat("%.1f s", s);
}

}  // namespace

const char* LogEndJudgementName(LogEndJudgement j) {
  switch (j) {
    case LogEndJudgement::kOrdinaryEnd:
      return "ordinary end";
    case LogEndJudgement::kCannotTell:
      return "cannot tell";
    case LogEndJudgement::kStuck:
      return "stuck";
  }
  return "?";
}

std::string DescribeLogEnd(const LogEnd& e) {
  std::string out = absl::StrCat(
      "rank ", e.global_rank, "'s ", CollFuncName(e.func), " records of ",
      e.comm_name, " end at seq ", e.last_seq, ", ",
      e.peers_last_seq - e.last_seq, " collective(s) before its peers' (seq ",
      e.peers_last_seq, "); ");
  const std::string interval =
      e.interval_ns > 0 ? absl::StrCat("dump interval ", Seconds(e.interval_ns))
                        : "no dump interval in the files";
  if (!e.times_known) {
    absl::StrAppend(&out,
                    "the files give no time to its end or to its "
                    "peers' later records");
  } else if (e.gap_ns <= 0) {
    absl::StrAppend(&out,
                    "its own file was written as late as their later "
                    "records (",
                    Seconds(-e.gap_ns), " after)");
  } else {
    absl::StrAppend(&out, "their later records go on ", Seconds(e.gap_ns),
                    " past its file's end");
  }
  absl::StrAppend(&out, " (", interval, ", hang timeout ",
                  Seconds(e.timeout_ns), "): ");
  switch (e.judgement) {
    case LogEndJudgement::kOrdinaryEnd:
      absl::StrAppend(&out,
                      "the logs end within one dump interval of each other, "
                      "an ordinary end of interval-flushed logs; not a hang");
      break;
    case LogEndJudgement::kCannotTell:
      absl::StrAppend(&out,
                      "cannot tell whether it stopped or its log just ended; "
                      "not judged a fault");
      break;
    case LogEndJudgement::kStuck:
      absl::StrAppend(&out,
                      "it wrote nothing for longer than one dump interval + "
                      "the hang timeout while its peers went on; judged by "
                      "detection");
      break;
  }
  return out;
}

LogEndReport JudgeLogEnds(const ImportedJob& job,
                          const LogEndOptions& options) {
  LogEndReport report;
  const std::map<SeqKey, CommView> comms = ViewComms(job);
  std::vector<uint64_t> log_end(job.ranks.size(), 0);
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    log_end[i] = LogEndOf(job.ranks[i]);
  }
  for (const auto& [key, c] : comms) {
    JudgeComm(job, key, c, log_end, options, &report);
  }
  return report;
}

void ApplyLogEnds(const LogEndReport& report, ImportedJob* job) {
  ApplySeqCuts(report.cuts, job);
  std::vector<uint64_t> next_id(job->ranks.size(), 0);
  for (size_t i = 0; i < job->ranks.size(); ++i) {
    for (const ImportedOp& op : job->ranks[i].ops) {
      next_id[i] = std::max(next_id[i], op.record.op_id());
    }
  }
  for (const LogEndFill& f : report.fills) {
    if (f.rank_index >= job->ranks.size()) continue;
    ImportedOp op = f.op;
    op.record.set_op_id(++next_id[f.rank_index]);
    job->ranks[f.rank_index].ops.push_back(std::move(op));
  }
}

std::string FormatLogEnds(const std::vector<LogEnd>& ends, bool verbose) {
  std::string out;
  std::vector<int32_t> ordinary;
  uint64_t most = 0;
  int64_t interval = 0, widest = 0;
  size_t shown = 0;
  const size_t kMaxShown = 10;
  for (const LogEnd& e : ends) {
    if (e.judgement == LogEndJudgement::kOrdinaryEnd && !verbose) {
      ordinary.push_back(e.global_rank);
      most = std::max(most, e.peers_last_seq - e.last_seq);
      interval = std::max(interval, e.interval_ns);
      widest = std::max(widest, e.gap_ns);
      continue;
    }
    if (!verbose && ++shown > kMaxShown) continue;
    const char* head = e.judgement == LogEndJudgement::kCannotTell
                           ? "cannot tell"
                       : e.judgement == LogEndJudgement::kStuck ? "stuck"
                                                                : "log end";
    absl::StrAppend(&out, "  ", head, ": ", DescribeLogEnd(e), "\n");
  }
  if (shown > kMaxShown) {
    absl::StrAppend(&out, "  ... ", shown - kMaxShown,
                    " more (-v or -o json)\n");
  }
  if (!ordinary.empty()) {
    std::sort(ordinary.begin(), ordinary.end());
    ordinary.erase(std::unique(ordinary.begin(), ordinary.end()),
                   ordinary.end());
    absl::StrAppend(
        &out, "  log ends: the records of rank(s) ", RankRanges(ordinary),
        " end up to ", most, " collective(s) before their peers', within ",
        interval > 0
            ? absl::StrCat("one dump interval (", Seconds(interval), ")")
            : "no time",
        " of them (at most ", Seconds(std::max<int64_t>(widest, 0)),
        "): the ordinary end of interval-flushed logs, not a hang\n");
  }
  return out;
}

nlohmann::json LogEndsJson(const std::vector<LogEnd>& ends) {
  nlohmann::json out = nlohmann::json::array();
  for (const LogEnd& e : ends) {
    auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
    out.push_back(
        {{"rank", e.global_rank},
         {"communicator", e.comm_name},
         {"function", CollFuncName(e.func)},
         {"last_seq", e.last_seq},
         {"peers_last_seq", e.peers_last_seq},
         {"gap_ms", e.times_known ? nlohmann::json(ms(e.gap_ns)) : nullptr},
         {"dump_interval_ms",
          e.interval_ns > 0 ? nlohmann::json(ms(e.interval_ns)) : nullptr},
         {"hang_timeout_ms", ms(e.timeout_ns)},
         {"judgement", LogEndJudgementName(e.judgement)},
         {"text", DescribeLogEnd(e)}});
  }
  return out;
}

}  // namespace pitstop::importers
