#include "src/importers/log_ends.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

// A member's end in one communicator.
struct MemberEnd {
  size_t rank_index = 0;
  uint64_t last = 0;            // highest seq of any record
  uint64_t last_completed = 0;  // highest completed seq
  bool pending = false;         // something enqueued and not completed
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

std::map<uint64_t, CommView> ViewComms(const ImportedJob& job) {
  std::map<uint64_t, CommView> comms;
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const ImportedRank& rank = job.ranks[i];
    if (rank.absent) continue;
    std::map<uint64_t, MemberEnd> mine;
    for (const ImportedOp& op : rank.ops) {
      if (!Judged(op)) continue;
      const uint64_t hash = op.record.comm_hash();
      CommView& c = comms[hash];
      MemberEnd& m = mine[hash];
      m.rank_index = i;
      m.last = std::max(m.last, op.record.seq_number());
      const uint64_t seq = op.record.seq_number();
      if (op.state != v1::OP_STATE_COMPLETED) {
        m.pending = true;
        if (c.lowest_pending == 0 || seq < c.lowest_pending) {
          c.lowest_pending = seq;
        }
        continue;
      }
      m.last_completed = std::max(m.last_completed, seq);
      uint64_t& t = c.latest[seq];
      t = std::max(t, OpTime(op));
      if (op.start_ns > 0 && op.end_ns > op.start_ns) {
        c.longest_ns = std::max(c.longest_ns,
                                static_cast<int64_t>(op.end_ns - op.start_ns));
      }
    }
    for (const auto& [hash, m] : mine) comms[hash].members.push_back(m);
    for (const v1::CommunicatorInfo& info : rank.comms) {
      auto it = comms.find(info.comm_hash());
      if (it != comms.end() && it->second.name.empty()) {
        it->second.name = info.comm_name();
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

// Judges the members of one communicator that end below its peers; appends
// them to `out` and returns the cut, if any.
std::optional<uint64_t> JudgeComm(const ImportedJob& job, uint64_t hash,
                                  const CommView& c,
                                  const std::vector<uint64_t>& log_end,
                                  const LogEndOptions& options,
                                  std::vector<LogEnd>* out) {
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
  bool stuck = false;
  for (const MemberEnd& m : c.members) {
    // Only a member with nothing pending whose records end below what a
    // peer completed; and not when some member waits in a collective above
    // its end (then who is waited for is detection's question).
    if (m.pending || m.last >= peers_last) continue;
    if (c.lowest_pending > m.last) continue;
    const ImportedRank& rank = job.ranks[m.rank_index];
    LogEnd e;
    e.global_rank = rank.global_rank;
    e.comm_hash = hash;
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
    const uint64_t own = log_end[m.rank_index];
    e.times_known = later > 0 && own > 0;
    if (e.times_known) {
      e.gap_ns = later >= own ? static_cast<int64_t>(later - own)
                              : -static_cast<int64_t>(own - later);
    }
    e.judgement = Judge(e);
    stuck |= e.judgement == LogEndJudgement::kStuck;
    cut = cut.has_value() ? std::min(*cut, m.last) : m.last;
    out->push_back(std::move(e));
  }
  if (stuck) return std::nullopt;
  return cut;
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
      "rank ", e.global_rank, "'s records of ", e.comm_name, " end at seq ",
      e.last_seq, ", ", e.peers_last_seq - e.last_seq,
      " collective(s) before its peers' (seq ", e.peers_last_seq, "); ");
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
  const std::map<uint64_t, CommView> comms = ViewComms(job);
  std::vector<uint64_t> log_end(job.ranks.size(), 0);
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    log_end[i] = LogEndOf(job.ranks[i]);
  }
  for (const auto& [hash, c] : comms) {
    const std::optional<uint64_t> cut =
        JudgeComm(job, hash, c, log_end, options, &report.ends);
    if (cut.has_value()) report.cuts[hash] = *cut;
  }
  return report;
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
