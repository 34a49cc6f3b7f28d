// BuildFlightRecorderJob: the cross-dump half of the Flight Recorder reader
// (see flight_recorder_reader.h for the mapping).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/importers/flight_recorder_reader.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

constexpr uint64_t kDerivedOpBit = uint64_t{1} << 62;

std::string CanonicalRanks(const std::vector<int32_t>& ranks) {
  return absl::StrJoin(ranks, ",");
}

// Parses "nccl:send 0->3" / "nccl:recv 3<-0": the peer's group rank.
int32_t PeerFromName(absl::string_view name) {
  size_t arrow = name.find("->");
  if (arrow == absl::string_view::npos) arrow = name.find("<-");
  if (arrow == absl::string_view::npos) return -1;
  int32_t peer = 0;
  bool any = false;
  for (size_t k = arrow + 2; k < name.size() && std::isdigit(name[k]); ++k) {
    peer = peer * 10 + (name[k] - '0');
    any = true;
  }
  return any ? peer : -1;
}

v1::OpState StateOf(absl::string_view s) {
  if (s == "completed") return v1::OP_STATE_COMPLETED;
  if (s == "started") return v1::OP_STATE_STARTED;
  return v1::OP_STATE_ENQUEUED;
}

struct GroupView {
  FrProcessGroup group;
  uint64_t comm_hash = 0;
  bool p2p = false;  // carries point-to-point traffic
  // seq -> an entry describing that collective (from any dump).
  std::map<int64_t, const FrEntry*> known;
};

// A pg_status counter far beyond what the other dumps say for the group
// (more than `window` past their median) is corrupt data, not progress:
// warned naming its file and replaced by the largest sane counter of the
// same dump (else the median), so one bad file does not make every other
// rank look stuck.
void SanitizeCounters(std::vector<FlightRecorderDump>* dumps, int64_t window,
                      std::vector<std::string>* warnings) {
  std::map<std::string, std::vector<int64_t>> values;
  for (const FlightRecorderDump& d : *dumps) {
    for (const auto& [name, st] : d.status) {
      values[name].push_back(st.last_completed);
    }
  }
  for (FlightRecorderDump& d : *dumps) {
    for (auto& [name, st] : d.status) {
      std::vector<int64_t>& v = values[name];
      if (v.size() < 3) continue;  // no majority to compare against
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      int64_t median = v[v.size() / 2];
      int64_t bound = median > INT64_MAX - window ? INT64_MAX : median + window;
      int64_t sane = -1;
      for (int64_t c : {st.last_completed, st.last_started, st.last_enqueued})
        if (c <= bound) sane = std::max(sane, c);
      if (sane < 0) sane = median;
      for (auto [field, c] : {std::pair<const char*, int64_t*>{
                                  "last_enqueued", &st.last_enqueued},
                              {"last_started", &st.last_started},
                              {"last_completed", &st.last_completed}}) {
        if (*c <= bound) continue;
        warnings->push_back(absl::StrCat(
            d.file, ": pg_status of group ", name, " says ", field, " ", *c,
            ", far beyond the other dumps (median last_completed ", median,
            "): corrupt counter, ", sane, " used instead"));
        *c = sane;
      }
    }
  }
}

using Groups = std::map<std::string, GroupView>;
using OpsBySeq = std::map<std::pair<std::string, int64_t>, size_t>;

// Sorts the dumps by rank; InvalidArgument naming both files when two dump
// one rank.
absl::Status CheckDumpRanks(std::vector<FlightRecorderDump>* dumps) {
  std::sort(dumps->begin(), dumps->end(),
            [](const FlightRecorderDump& a, const FlightRecorderDump& b) {
              return a.rank < b.rank;
            });
  for (size_t k = 1; k < dumps->size(); ++k) {
    if ((*dumps)[k].rank == (*dumps)[k - 1].rank) {
      return absl::InvalidArgumentError(
          absl::StrCat((*dumps)[k].file, ": rank ", (*dumps)[k].rank,
                       " also dumped by ", (*dumps)[k - 1].file));
    }
  }
  return absl::OkStatus();
}

// Groups described malformed by some dump: judged for no one (their
// members cannot be known for sure). Returns name -> first file.
std::map<std::string, std::string> DropMalformedGroups(
    std::vector<FlightRecorderDump>* dumps) {
  std::map<std::string, std::string> malformed;
  for (const FlightRecorderDump& d : *dumps) {
    for (const std::string& name : d.malformed_groups)
      malformed.emplace(name, d.file);
  }
  for (FlightRecorderDump& d : *dumps) {
    for (const auto& [name, file] : malformed) d.groups.erase(name);
  }
  return malformed;
}

// Every group, by name, as the dumps describe it, with the entries that
// describe its collectives; the ranks the groups name go to `expected`.
Groups CollectGroups(const std::vector<FlightRecorderDump>& dumps,
                     ImportedJob* job, std::set<int32_t>* expected) {
  Groups groups;
  for (const FlightRecorderDump& d : dumps) {
    for (const std::string& w : d.warnings) job->warnings.push_back(w);
    for (const auto& [name, g] : d.groups) {
      GroupView& view = groups[name];
      if (view.comm_hash == 0) {
        view.group = g;
        view.comm_hash = StableHash(
            absl::StrCat("fr-pg|", name, "|", CanonicalRanks(g.ranks)));
      }
      expected->insert(g.ranks.begin(), g.ranks.end());
      if (g.desc == "default_pg" || name == "0") {
        job->world_size =
            std::max(job->world_size, static_cast<int32_t>(g.ranks.size()));
      }
    }
    for (const FrEntry& e : d.entries) {
      auto it = groups.find(e.pg_name);
      if (it == groups.end()) continue;
      if (e.is_p2p) {
        it->second.p2p = true;
      } else {
        it->second.known.emplace(e.collective_seq_id, &e);
      }
    }
  }
  return groups;
}

void NoteMissingAndMalformed(
    const std::vector<FlightRecorderDump>& dumps, std::set<int32_t> expected,
    const std::map<std::string, std::string>& malformed, ImportedJob* job) {
  std::set<int32_t> present;
  for (const FlightRecorderDump& d : dumps) present.insert(d.rank);
  for (int32_t r = 0; r < job->world_size; ++r) expected.insert(r);
  for (int32_t r : expected) {
    if (!present.count(r)) job->missing_ranks.push_back(r);
  }
  for (const auto& [name, file] : malformed) {
    job->warnings.push_back(absl::StrCat("process group ", name,
                                         " is not judged: ", file,
                                         " describes it malformed"));
  }
  if (!job->missing_ranks.empty()) {
    job->warnings.push_back(absl::StrCat(
        "no dump for rank(s) ", RankRanges(job->missing_ranks),
        ": analysis is partial (their groups are judged from the others)"));
  }
}

// Groups whose counters cannot be collective sequence numbers: nothing
// pending on any member, yet members disagree (a collective cannot
// complete on one member without the others enqueuing it).
void MarkCountersNotCollective(const std::vector<FlightRecorderDump>& dumps,
                               Groups* groups) {
  for (auto& [name, view] : *groups) {
    if (view.p2p) continue;
    std::set<int64_t> values;
    bool pending = false;
    for (const FlightRecorderDump& d : dumps) {
      auto it = d.status.find(name);
      if (it == d.status.end()) continue;
      values.insert(it->second.last_completed);
      pending |= it->second.last_enqueued != it->second.last_completed;
    }
    if (!pending && values.size() > 1) view.p2p = true;
  }
}

// The dump's rank in each of its groups; its communicator infos go to
// `rank`. Returns pg name -> rank in it.
std::map<std::string, int32_t> AddComms(const FlightRecorderDump& d,
                                        Groups& groups, const ImportedJob& job,
                                        ImportedRank* rank) {
  std::map<std::string, int32_t> comm_rank;
  for (const auto& [name, g] : d.groups) {
    auto pos = std::find(g.ranks.begin(), g.ranks.end(), d.rank);
    if (pos == g.ranks.end()) continue;
    const GroupView& view = groups[name];
    v1::CommunicatorInfo info;
    info.set_comm_hash(view.comm_hash);
    info.set_comm_name(g.desc.empty()
                           ? absl::StrCat("pg ", name)
                           : absl::StrCat(g.desc, " (pg ", name, ")"));
    info.set_n_ranks(static_cast<int32_t>(g.ranks.size()));
    info.set_rank(static_cast<int32_t>(pos - g.ranks.begin()));
    for (int32_t r : g.ranks) info.add_global_ranks(r);
    info.set_host(rank->host);
    info.set_job_id(job.job_id);
    info.set_source(v1::CommunicatorInfo::SOURCE_IMPORTED);
    info.set_n_nodes(0);
    comm_rank[name] = info.rank();
    rank->comms.push_back(std::move(info));
  }
  return comm_rank;
}

// One op per entry of the dump; returns the collectives' ops by (group,
// seq).
OpsBySeq AddEntryOps(const FlightRecorderDump& d,
                     const std::map<std::string, int32_t>& comm_rank,
                     Groups& groups, ImportedRank* rank) {
  OpsBySeq by_seq;
  for (const FrEntry& e : d.entries) {
    auto cr = comm_rank.find(e.pg_name);
    if (cr == comm_rank.end()) continue;
    ImportedOp op;
    v1::OpRecord& r = op.record;
    r.set_op_id(static_cast<uint64_t>(e.record_id) + 1);
    r.set_comm_hash(groups[e.pg_name].comm_hash);
    r.set_rank(cr->second);
    r.set_kind(e.is_p2p ? v1::OP_KIND_P2P : v1::OP_KIND_COLLECTIVE);
    r.set_func(ParseCollFunc(e.profiling_name));
    r.set_seq_number(static_cast<uint64_t>(
        std::max<int64_t>(0, e.is_p2p ? e.p2p_seq_id : e.collective_seq_id)));
    uint32_t size = 1;
    r.set_datatype(ParseDataType(e.dtype, &size));
    r.set_count(e.elements);
    r.set_bytes(e.elements * size);
    r.set_root(-1);
    r.set_peer(e.is_p2p ? PeerFromName(e.profiling_name) : -1);
    r.set_enqueue_start_cpu_ns(e.time_created_ns);
    r.set_enqueue_stop_cpu_ns(e.time_created_ns);
    op.state = StateOf(e.state);
    op.start_ns = e.time_started_ns;
    op.end_ns = e.time_completed_ns;
    op.name = e.profiling_name;
    op.track = groups[e.pg_name].group.desc.empty()
                   ? absl::StrCat("pg ", e.pg_name)
                   : absl::StrCat(groups[e.pg_name].group.desc, " (pg ",
                                  e.pg_name, ")");
    if (!e.is_p2p) by_seq[{e.pg_name, e.collective_seq_id}] = rank->ops.size();
    rank->ops.push_back(std::move(op));
  }
  return by_seq;
}

// The pending window [lo, hi] of a group over every dump (at most
// max_window sequence numbers: the last ones, with a warning).
std::pair<int64_t, int64_t> PendingWindow(
    const FlightRecorderDump& d, const std::string& name,
    const std::vector<FlightRecorderDump>& dumps, const FrJobOptions& options,
    ImportedJob* job) {
  int64_t lo = INT64_MAX, hi = -1;
  for (const FlightRecorderDump& other : dumps) {
    auto it = other.status.find(name);
    if (it == other.status.end()) continue;
    lo = std::min(lo, it->second.last_completed);
    hi = std::max(hi, it->second.last_enqueued);
  }
  lo = std::max<int64_t>(lo, 1);
  if (hi - lo + 1 > options.max_window) {
    job->warnings.push_back(
        absl::StrCat(d.file, ": group ", name, " spans ", hi - lo + 1,
                     " pending sequence numbers; only the last ",
                     options.max_window, " are used"));
    lo = hi - options.max_window + 1;
  }
  return {lo, hi};
}

// FR numbers collectives per group across functions; pitstop keeps
// progress per (communicator, function). So every function F seen in the
// window gets a completed marker just below its first op there (or at this
// rank's last completed, if lower): every member had completed its F ops
// up to that point.
void AddProgressMarkers(const GroupView& view, const FrStatus& st, int64_t lo,
                        int64_t hi, int32_t comm_rank, uint64_t* next_derived,
                        ImportedRank* rank) {
  std::map<v1::CollFunc, int64_t> first_of;
  for (auto k = view.known.upper_bound(lo);
       k != view.known.end() && k->first <= hi; ++k) {
    first_of.emplace(ParseCollFunc(k->second->profiling_name), k->first);
  }
  if (lo < 1) return;
  for (const auto& [f, first] : first_of) {
    // Every op in (completed, first) is known and of another function:
    // then all F ops before `first` are complete.
    int64_t mark = std::min(first - 1, st.last_completed);
    bool others_only = true;
    for (int64_t q = st.last_completed + 1; q < first && others_only; ++q) {
      others_only = view.known.count(q) > 0;
    }
    if (others_only) mark = first - 1;
    if (mark < 1) continue;
    auto real = view.known.find(mark);
    if (real != view.known.end() &&
        ParseCollFunc(real->second->profiling_name) == f) {
      continue;  // a real op of F is at the mark
    }
    ImportedOp op;
    op.record.set_op_id(++*next_derived);
    op.record.set_comm_hash(view.comm_hash);
    op.record.set_rank(comm_rank);
    op.record.set_kind(v1::OP_KIND_COLLECTIVE);
    op.record.set_func(f);
    op.record.set_seq_number(static_cast<uint64_t>(mark));
    op.record.set_root(-1);
    op.record.set_peer(-1);
    op.state = v1::OP_STATE_COMPLETED;
    op.derived = true;
    op.for_detection = true;
    op.name = "(progress marker from pg_status)";
    rank->ops.push_back(std::move(op));
  }
}

// Every sequence number of the window: the entry's op moved to the state
// pg_status says, or an op derived from pg_status when no entry has it.
void AddWindowOps(const GroupView& view, const std::string& name,
                  const FrStatus& st, int64_t lo, int64_t hi, int32_t comm_rank,
                  const OpsBySeq& by_seq, uint64_t* next_derived,
                  ImportedRank* rank) {
  for (int64_t seq = lo; seq <= hi; ++seq) {
    v1::OpState state = seq <= st.last_completed  ? v1::OP_STATE_COMPLETED
                        : seq <= st.last_started  ? v1::OP_STATE_STARTED
                        : seq <= st.last_enqueued ? v1::OP_STATE_ENQUEUED
                                                  : v1::OP_STATE_UNSPECIFIED;
    auto have = by_seq.find({name, seq});
    if (have != by_seq.end()) {
      ImportedOp& op = rank->ops[have->second];
      if (state > op.state) op.state = state;
      continue;
    }
    if (state == v1::OP_STATE_UNSPECIFIED) continue;
    ImportedOp op;
    v1::OpRecord& r = op.record;
    r.set_op_id(++*next_derived);
    r.set_comm_hash(view.comm_hash);
    r.set_rank(comm_rank);
    r.set_kind(v1::OP_KIND_COLLECTIVE);
    r.set_seq_number(static_cast<uint64_t>(seq));
    r.set_root(-1);
    r.set_peer(-1);
    auto k = view.known.find(seq);
    if (k != view.known.end()) {
      r.set_func(ParseCollFunc(k->second->profiling_name));
      uint32_t size = 1;
      r.set_datatype(ParseDataType(k->second->dtype, &size));
      op.name = k->second->profiling_name;
    } else {
      r.set_func(v1::COLL_FUNC_OTHER);
      op.name = "(from pg_status)";
    }
    op.state = state;
    op.derived = true;
    rank->ops.push_back(std::move(op));
  }
}

// The imported rank of one dump: its communicators, its entries' ops, and
// ops derived from pg_status for the collective-only groups.
ImportedRank RankOfDump(const FlightRecorderDump& d,
                        const std::vector<FlightRecorderDump>& dumps,
                        Groups& groups, const FrJobOptions& options,
                        ImportedJob* job) {
  ImportedRank rank;
  rank.global_rank = d.rank;
  rank.file = d.file;
  rank.host = SyntheticHost("fr-", d.rank, options.ranks_per_node);
  const std::map<std::string, int32_t> comm_rank =
      AddComms(d, groups, *job, &rank);
  const OpsBySeq by_seq = AddEntryOps(d, comm_rank, groups, &rank);
  uint64_t next_derived = kDerivedOpBit;
  for (const auto& [name, st] : d.status) {
    auto cr = comm_rank.find(name);
    if (cr == comm_rank.end()) continue;
    const GroupView& view = groups[name];
    if (view.p2p) continue;
    const auto [lo, hi] = PendingWindow(d, name, dumps, options, job);
    AddProgressMarkers(view, st, lo, hi, cr->second, &next_derived, &rank);
    AddWindowOps(view, name, st, lo, hi, cr->second, by_seq, &next_derived,
                 &rank);
  }
  return rank;
}

}  // namespace

absl::StatusOr<ImportedJob> BuildFlightRecorderJob(
    std::vector<FlightRecorderDump> dumps, const FrJobOptions& options) {
  ImportedJob job;
  job.format = "flight-recorder";
  job.job_id = options.job_id;
  if (dumps.empty()) {
    return absl::InvalidArgumentError("no Flight Recorder dumps given");
  }
  if (absl::Status s = CheckDumpRanks(&dumps); !s.ok()) return s;
  const std::map<std::string, std::string> malformed =
      DropMalformedGroups(&dumps);
  SanitizeCounters(&dumps, options.max_window, &job.warnings);
  std::set<int32_t> expected;
  Groups groups = CollectGroups(dumps, &job, &expected);
  NoteMissingAndMalformed(dumps, std::move(expected), malformed, &job);
  MarkCountersNotCollective(dumps, &groups);
  for (const FlightRecorderDump& d : dumps) {
    job.ranks.push_back(RankOfDump(d, dumps, groups, options, &job));
  }
  job.notes.push_back(absl::StrCat(
      "flight recorder: ", dumps.size(), " dumps, format version ",
      dumps[0].version.empty() ? "?" : dumps[0].version,
      dumps[0].nccl_version.empty() ? "" : ", NCCL " + dumps[0].nccl_version,
      "; hosts are not in the dumps: ", options.ranks_per_node,
      " ranks per node assumed"));
  return job;
}

}  // namespace pitstop::importers
