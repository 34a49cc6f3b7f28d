// Post-mortem judgement of logs that simply end (issue #31).
//
// Tools that flush at intervals (NCCL Inspector writes every dump interval)
// or dump on demand (Flight Recorder) leave, at the ordinary end of a
// healthy run, ranks whose last records differ by a few collectives: each
// file stops at its own last flush. A rank whose records of a communicator
// end below what its peers completed there, with nothing of its own pending,
// took part in those later collectives (a collective completes on no rank
// without every member), so its missing records say only that its file
// ended, not that it stopped. "Peers" here means what they completed. Whether
// it stopped *reporting* for long (a stalled process: the controller's
// GPU-level hang) needs evidence that time passed: how much later, in wall
// time, its peers' records go on past the end of its file, against the dump
// interval and the hang timeout:
//
//   gap = latest time of a peer's record of that communicator and function
//         above the rank's last sequence number - the rank's log end (its
//         file's last dump time; Flight Recorder: its latest entry time, a
//         lower bound of the dump's own time, which the dump does not carry)
//   gap <= 1.25 x dump interval (or <= 0)      ordinary end: not judged
//   interval known, gap > interval + timeout   stuck: left to detection
//   else (or times unknown)                    cannot tell: not judged
//
// Judged per (communicator, function): NCCL numbers collectives per function
// (Inspector's coll_sn is comm->seqNumber[func]) and detection keeps
// progress per function.
//
// Left to detection as before: members with something pending (waiting, or
// completions stopped while enqueuing went on: the GPU-stall shape), and
// lagging members when some member waits in a collective above their end
// (who is waited for is detection's question).
//
// "Not judged" means the records above the lowest such rank's last
// sequence number are kept from detection (SeqCuts), so the engine sees
// every member end at the same point. A (communicator, function) with a
// stuck rank is not cut. The timeout is the engine's: max(floor, multiplier
// x the longest collective of the communicator in the data).
//
// Sampled records: Inspector writes, per communicator and dump tick, only
// the latest collective completed since the previous tick, so with
// collectives more frequent than the interval each file holds a different
// subset of sequence numbers, and a member's last record at or below the
// cut may lie below it. In a collective that needs every member, a
// completed record of sequence S on any member means every member completed
// S; such members get a derived completed op at S (the cut, or with a
// stuck rank the highest any member completed: the other members did
// complete it), so that only a stuck rank ends below its peers (fills).
#ifndef PITSTOP_IMPORTERS_LOG_ENDS_H_
#define PITSTOP_IMPORTERS_LOG_ENDS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/importers/imported_job.h"

namespace pitstop::importers {

enum class LogEndJudgement { kOrdinaryEnd, kCannotTell, kStuck };

// "ordinary end", "cannot tell", "stuck".
const char* LogEndJudgementName(LogEndJudgement j);

// One rank whose records of one communicator end before its peers'.
struct LogEnd {
  int32_t global_rank = -1;
  uint64_t comm_hash = 0;
  v1::CollFunc func = v1::COLL_FUNC_UNSPECIFIED;
  std::string comm_name;
  uint64_t last_seq = 0;        // the rank's last in the communicator
  uint64_t peers_last_seq = 0;  // the highest any peer reached
  bool times_known = false;     // both ends of the gap have a time
  int64_t gap_ns = 0;           // see above
  int64_t interval_ns = 0;      // 0 = unknown or on demand
  int64_t timeout_ns = 0;
  LogEndJudgement judgement = LogEndJudgement::kCannotTell;
};

// "rank 3's all_reduce records of comm 0x.. end at seq 118, 2 collective(s)
// before its peers' (seq 120); their records go on 0.6 s past its end (dump
// interval 100 ms, hang timeout 1 s): cannot tell ..."
std::string DescribeLogEnd(const LogEnd& e);

struct LogEndOptions {
  int64_t hang_timeout_floor_ns = 1'000'000'000;
  double hang_timeout_multiplier = 10;
};

// A completed op a member took part in but whose record its file lacks
// (sampled records, see above): appended to job.ranks[rank_index].
struct LogEndFill {
  size_t rank_index = 0;
  ImportedOp op;
};

struct LogEndReport {
  // Sorted by communicator and function, then rank.
  std::vector<LogEnd> ends;
  // Collective sequence numbers above these are kept from detection.
  SeqCuts cuts;
  std::vector<LogEndFill> fills;
};

LogEndReport JudgeLogEnds(const ImportedJob& job, const LogEndOptions& options);

// Applies the report to `job` (the one it was judged on): the cuts
// (ApplySeqCuts) and the fills.
void ApplyLogEnds(const LogEndReport& report, ImportedJob* job);

// Lines for the verdict table: "  cannot tell: ..." and "  stuck: ..." for
// each such end (at most 10 unless `verbose`), and the ordinary ends summed
// up in one "  log ends: ..." line (each unless `verbose` is false).
std::string FormatLogEnds(const std::vector<LogEnd>& ends, bool verbose);

// [{"rank", "communicator", "function", "last_seq", "peers_last_seq", "gap_ms"
// (null when unknown), "dump_interval_ms" (null when unknown),
// "hang_timeout_ms", "judgement", "text"}].
nlohmann::json LogEndsJson(const std::vector<LogEnd>& ends);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_LOG_ENDS_H_
