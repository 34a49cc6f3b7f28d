// BuildKinetoJob: communicators, cross-rank matching and records for Kineto
// traces (see kineto_reader.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/importers/import_util.h"
#include "src/importers/kineto_reader.h"

namespace pitstop::importers {
namespace {

struct CommGroup {
  std::string name;
  uint64_t hash = 0;
  std::vector<int32_t> members;  // global ranks (comm rank = index)
  bool inferred = false;         // membership from the traces, not stated
  // trace index -> kernel indices
  std::map<size_t, std::vector<size_t>> kernels;
};

double End(const KinetoKernel& k) { return k.ts_us + k.dur_us; }

using CommGroups = std::map<std::string, CommGroup>;
// Per trace: its ops, and each kernel's op (index into them).
struct OpTable {
  std::vector<std::vector<ImportedOp>> ops;
  std::vector<std::vector<int64_t>> op_of;
};

// Sorts the traces by rank; InvalidArgument naming both files when two
// trace one rank. Fills the world size, warnings and the ranks present.
absl::Status CheckRanks(std::vector<KinetoTrace>* traces, ImportedJob* job,
                        std::set<int32_t>* present) {
  std::sort(traces->begin(), traces->end(),
            [](const KinetoTrace& a, const KinetoTrace& b) {
              return a.rank < b.rank;
            });
  for (size_t k = 0; k < traces->size(); ++k) {
    const KinetoTrace& t = (*traces)[k];
    if (!present->insert(t.rank).second) {
      return absl::InvalidArgumentError(absl::StrCat(t.file, ": rank ", t.rank,
                                                     " also traced by ",
                                                     (*traces)[k - 1].file));
    }
    job->world_size = std::max(job->world_size, t.world_size);
    for (const std::string& w : t.warnings) job->warnings.push_back(w);
  }
  return absl::OkStatus();
}

// One communicator per process group the kernels name (else per stream),
// with each trace's kernels of it.
CommGroups GroupCommunicators(const std::vector<KinetoTrace>& traces) {
  CommGroups comms;
  for (size_t t = 0; t < traces.size(); ++t) {
    for (size_t i = 0; i < traces[t].kernels.size(); ++i) {
      const KinetoKernel& k = traces[t].kernels[i];
      std::string key;
      if (!k.pg_name.empty() && !k.pg_ranks.empty()) {
        key =
            absl::StrCat("pg|", k.pg_name, "|", absl::StrJoin(k.pg_ranks, ","));
      } else {
        key = absl::StrCat("stream|", k.stream);
      }
      CommGroup& g = comms[key];
      if (g.hash == 0) {
        g.hash = StableHash(absl::StrCat("kineto|", key));
        if (!k.pg_name.empty() && !k.pg_ranks.empty()) {
          g.members = k.pg_ranks;
          g.name = k.pg_desc.empty()
                       ? absl::StrCat("pg ", k.pg_name)
                       : absl::StrCat(k.pg_desc, " (pg ", k.pg_name, ")");
        } else {
          g.inferred = true;
          g.name = absl::StrCat("stream ", k.stream);
        }
      }
      g.kernels[t].push_back(i);
    }
  }
  return comms;
}

// Members of groups the traces do not name (the ranks that use them), and
// the ranks expected but not traced.
void NoteMembership(const std::vector<KinetoTrace>& traces,
                    const std::set<int32_t>& present, CommGroups* comms,
                    ImportedJob* job) {
  std::set<int32_t> expected;
  for (auto& [key, g] : *comms) {
    if (g.inferred) {
      for (const auto& [t, idx] : g.kernels)
        g.members.push_back(traces[t].rank);
      std::sort(g.members.begin(), g.members.end());
      job->warnings.push_back(absl::StrCat(
          g.name,
          ": the traces do not name its process group; members taken "
          "as the ranks whose traces use it (",
          absl::StrJoin(g.members, ","), ")"));
    }
    expected.insert(g.members.begin(), g.members.end());
  }
  for (int32_t r = 0; r < job->world_size; ++r) expected.insert(r);
  for (int32_t r : expected) {
    if (!present.count(r)) job->missing_ranks.push_back(r);
  }
  if (!job->missing_ranks.empty()) {
    job->warnings.push_back(absl::StrCat(
        "no trace for rank(s) ", RankRanges(job->missing_ranks), " of ",
        std::max<size_t>(job->world_size, expected.size()),
        ": analysis covers rank(s) ",
        absl::StrJoin(std::vector<int32_t>(present.begin(), present.end()),
                      ",")));
  }
}

// One imported rank per trace; returns trace index by global rank.
std::map<int32_t, size_t> AddRanks(const std::vector<KinetoTrace>& traces,
                                   const KinetoJobOptions& options,
                                   ImportedJob* job) {
  std::map<int32_t, size_t> rank_index;
  for (size_t t = 0; t < traces.size(); ++t) {
    ImportedRank r;
    r.global_rank = traces[t].rank;
    r.file = traces[t].file;
    r.pid = traces[t].pid;
    r.host = SyntheticHost("kineto-", r.global_rank, options.ranks_per_node);
    rank_index[r.global_rank] = t;
    job->ranks.push_back(std::move(r));
  }
  return rank_index;
}

// The record of one kernel of `g` on rank `comm_rank` (no sequence number
// yet: matching gives it).
ImportedOp OpOfKernel(const KinetoKernel& k, size_t i, const CommGroup& g,
                      int32_t comm_rank) {
  ImportedOp op;
  v1::OpRecord& rec = op.record;
  rec.set_op_id(i + 1);
  rec.set_comm_hash(g.hash);
  rec.set_rank(comm_rank);
  v1::CollFunc func = ParseCollFunc(k.coll_name.empty() ? k.name : k.coll_name);
  rec.set_func(func);
  rec.set_kind(func == v1::COLL_FUNC_SEND || func == v1::COLL_FUNC_RECV
                   ? v1::OP_KIND_P2P
                   : v1::OP_KIND_COLLECTIVE);
  uint32_t size = 1;
  rec.set_datatype(ParseDataType(k.dtype, &size));
  rec.set_count(k.in_nelems);
  rec.set_bytes(k.in_nelems > 0 ? k.in_nelems * size : k.msg_bytes);
  rec.set_root(-1);
  rec.set_peer(-1);
  uint64_t start = static_cast<uint64_t>(
      std::max<int64_t>(0, SaturatingInt(k.ts_us * 1000)));
  uint64_t end =
      static_cast<uint64_t>(std::max<int64_t>(0, SaturatingInt(End(k) * 1000)));
  uint64_t cpu = k.cpu_ts_us > 0 ? static_cast<uint64_t>(std::max<int64_t>(
                                       0, SaturatingInt(k.cpu_ts_us * 1000)))
                                 : start;
  rec.set_api_cpu_ns(cpu);
  rec.set_enqueue_start_cpu_ns(cpu);
  rec.set_enqueue_stop_cpu_ns(cpu);
  op.state = v1::OP_STATE_COMPLETED;
  op.start_ns = start;
  op.end_ns = end;
  op.name = k.name.substr(0, k.name.find('('));
  op.track = absl::StrCat("stream ", k.stream);
  op.for_detection = false;  // until matched
  return op;
}

// Each member trace's communicator info and one op per kernel of `g`, in
// end-time order.
void AddOps(const std::vector<KinetoTrace>& traces, CommGroup* g,
            ImportedJob* job, OpTable* table) {
  for (auto& [t, idx] : g->kernels) {
    auto pos = std::find(g->members.begin(), g->members.end(), traces[t].rank);
    if (pos == g->members.end()) continue;
    v1::CommunicatorInfo info;
    info.set_comm_hash(g->hash);
    info.set_comm_name(g->name);
    info.set_n_ranks(static_cast<int32_t>(g->members.size()));
    info.set_rank(static_cast<int32_t>(pos - g->members.begin()));
    for (int32_t m : g->members) info.add_global_ranks(m);
    info.set_host(job->ranks[t].host);
    info.set_job_id(job->job_id);
    info.set_source(v1::CommunicatorInfo::SOURCE_IMPORTED);
    job->ranks[t].comms.push_back(info);
    const std::vector<KinetoKernel>& kernels = traces[t].kernels;
    std::sort(idx.begin(), idx.end(), [&kernels](size_t a, size_t b) {
      return End(kernels[a]) < End(kernels[b]);
    });
    for (size_t i : idx) {
      table->op_of[t][i] = static_cast<int64_t>(table->ops[t].size());
      table->ops[t].push_back(OpOfKernel(kernels[i], i, *g, info.rank()));
    }
  }
}

// The trace indices of `g`'s members that have traces; empty (with a
// warning) when some member has none or fewer than two do.
std::vector<size_t> ComparableMembers(const std::vector<KinetoTrace>& traces,
                                      const CommGroup& g,
                                      const std::map<int32_t, size_t>& index,
                                      ImportedJob* job) {
  std::vector<size_t> tr;
  for (int32_t m : g.members) {
    auto it = index.find(m);
    if (it != index.end() && g.kernels.count(it->second))
      tr.push_back(it->second);
  }
  if (tr.size() >= g.members.size() && tr.size() >= 2) return tr;
  std::vector<int32_t> have;
  for (size_t t : tr) have.push_back(traces[t].rank);
  job->warnings.push_back(absl::StrCat(
      g.name, ": only rank(s) ",
      have.empty() ? "none" : absl::StrJoin(have, ","), " of its ",
      g.members.size(),
      " members have traces; its collectives are shown in the timeline "
      "but cannot be compared"));
  return {};
}

// Matches `g`'s kernels across its members on end time (each anchor
// kernel of the first member with the nearest unused one of every other
// within the tolerance): a sequence number and a MatchedCollective each.
void MatchAcrossRanks(const std::vector<KinetoTrace>& traces,
                      const std::vector<size_t>& tr, CommGroup* g,
                      const KinetoJobOptions& options, OpTable* table,
                      ImportedJob* job) {
  std::vector<std::vector<bool>> used(tr.size());
  // Per member: (end time, index in its kernel list), sorted, so each
  // anchor looks only at the kernels within the tolerance: O(n log n).
  std::vector<std::vector<std::pair<double, size_t>>> by_end(tr.size());
  for (size_t m = 0; m < tr.size(); ++m) {
    const std::vector<size_t>& list = g->kernels[tr[m]];
    used[m].assign(list.size(), false);
    for (size_t j = 0; j < list.size(); ++j)
      by_end[m].emplace_back(End(traces[tr[m]].kernels[list[j]]), j);
    std::sort(by_end[m].begin(), by_end[m].end());
  }
  uint64_t seq = 0;
  const std::vector<size_t>& anchor = g->kernels[tr[0]];
  for (size_t a = 0; a < anchor.size(); ++a) {
    double end = End(traces[tr[0]].kernels[anchor[a]]);
    std::vector<size_t> pick(tr.size(), SIZE_MAX);
    pick[0] = a;
    bool all = true;
    for (size_t m = 1; m < tr.size() && all; ++m) {
      const auto& sorted = by_end[m];
      double best = options.match_tolerance_us;
      auto it = std::lower_bound(
          sorted.begin(), sorted.end(),
          std::make_pair(end - options.match_tolerance_us, size_t{0}));
      for (; it != sorted.end() && it->first <= end + best; ++it) {
        double d = std::fabs(it->first - end);
        // Ties go to the earlier kernel in the trace, as before.
        if (!used[m][it->second] &&
            (d < best ||
             (d == best && (pick[m] == SIZE_MAX || it->second < pick[m])))) {
          best = d;
          pick[m] = it->second;
        }
      }
      all = pick[m] != SIZE_MAX;
    }
    if (!all) continue;
    ++seq;
    MatchedCollective mc;
    mc.comm_name = g->name;
    mc.comm_hash = g->hash;
    mc.seq_number = seq;
    double min_dur = 1e300, max_dur = 0;
    for (size_t m = 0; m < tr.size(); ++m) {
      used[m][pick[m]] = true;
      size_t ki = g->kernels[tr[m]][pick[m]];
      const KinetoKernel& k = traces[tr[m]].kernels[ki];
      ImportedOp& op = table->ops[tr[m]][table->op_of[tr[m]][ki]];
      op.record.set_seq_number(seq);
      op.for_detection = true;
      mc.global_ranks.push_back(traces[tr[m]].rank);
      mc.duration_us.push_back(k.dur_us);
      mc.end_us.push_back(End(k));
      if (k.dur_us < min_dur) {
        min_dur = k.dur_us;
        mc.late_rank = traces[tr[m]].rank;
      }
      max_dur = std::max(max_dur, k.dur_us);
    }
    mc.max_wait_us = max_dur - min_dur;
    job->matched.push_back(std::move(mc));
  }
  size_t unmatched = 0;
  for (size_t m = 0; m < tr.size(); ++m) {
    for (bool u : used[m]) unmatched += !u;
  }
  job->notes.push_back(absl::StrFormat(
      "%s: %d collectives matched across ranks %s on end time (tolerance "
      "%.0f us); %d kernels without a partner (sampling) kept for the "
      "timeline only",
      g->name, seq, absl::StrJoin(g->members, ","), options.match_tolerance_us,
      unmatched));
}

// Who waited for whom. Equal durations (within Kineto's 1 us precision)
// are ties: nobody started last.
void NoteWhoWaited(ImportedJob* job) {
  constexpr double kTieUs = 1.0;
  std::map<int32_t, int> late_count;
  size_t ties = 0;
  std::vector<std::string> per_collective;
  for (MatchedCollective& mc : job->matched) {
    if (mc.max_wait_us < kTieUs) {
      mc.late_rank = -1;
      ++ties;
      continue;
    }
    ++late_count[mc.late_rank];
    std::vector<std::string> waiters;
    double min_dur =
        *std::min_element(mc.duration_us.begin(), mc.duration_us.end());
    for (size_t m = 0; m < mc.global_ranks.size(); ++m) {
      if (mc.global_ranks[m] == mc.late_rank) continue;
      waiters.push_back(absl::StrFormat("rank %d waited %.3f ms",
                                        mc.global_ranks[m],
                                        (mc.duration_us[m] - min_dur) / 1000));
    }
    per_collective.push_back(
        absl::StrFormat("%s #%d: late rank %d; %s", mc.comm_name, mc.seq_number,
                        mc.late_rank, absl::StrJoin(waiters, ", ")));
  }
  if (!late_count.empty()) {
    auto best = std::max_element(
        late_count.begin(), late_count.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    job->notes.push_back(absl::StrFormat(
        "overall: rank %d started last in %d of %d matched collectives (the "
        "others waited for it)%s",
        best->first, best->second, job->matched.size(),
        ties > 0
            ? absl::StrFormat("; %d ties (no wait >= 1 us) not counted", ties)
            : ""));
  } else if (ties > 0) {
    job->notes.push_back(absl::StrFormat(
        "overall: all %d matched collectives are ties (no rank waited >= 1 "
        "us): nobody started last",
        ties));
  }
  for (std::string& n : per_collective) job->notes.push_back(std::move(n));
}

}  // namespace

absl::StatusOr<ImportedJob> BuildKinetoJob(std::vector<KinetoTrace> traces,
                                           const KinetoJobOptions& options) {
  ImportedJob job;
  job.format = "kineto";
  job.job_id = options.job_id;
  if (traces.empty())
    return absl::InvalidArgumentError("no Kineto traces given");
  std::set<int32_t> present;
  if (absl::Status s = CheckRanks(&traces, &job, &present); !s.ok()) return s;
  CommGroups comms = GroupCommunicators(traces);
  NoteMembership(traces, present, &comms, &job);
  const std::map<int32_t, size_t> rank_index = AddRanks(traces, options, &job);
  // Ops: one per kernel; seq from cross-rank matching.
  OpTable table;
  table.ops.resize(traces.size());
  table.op_of.resize(traces.size());
  for (size_t t = 0; t < traces.size(); ++t) {
    table.op_of[t].assign(traces[t].kernels.size(), -1);
  }
  for (auto& [key, g] : comms) {
    AddOps(traces, &g, &job, &table);
    const std::vector<size_t> tr =
        ComparableMembers(traces, g, rank_index, &job);
    if (tr.empty()) continue;
    MatchAcrossRanks(traces, tr, &g, options, &table, &job);
  }
  for (size_t t = 0; t < traces.size(); ++t)
    job.ranks[t].ops = std::move(table.ops[t]);
  NoteWhoWaited(&job);
  return job;
}

}  // namespace pitstop::importers
