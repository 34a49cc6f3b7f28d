// Logs that simply end (issue #31): NCCL Inspector writes its records every
// dump interval, so at the ordinary end of a healthy run each rank's file
// stops at its own last flush and the ranks' last records differ by a few
// collectives. That is no hang; a rank whose file stops while its peers'
// records go on for longer than the dump interval and the hang timeout is.
// The files here are in Inspector's real format. FlushedJob writes every
// collective, each at the first dump tick of its process after it
// completed (one collective per communicator between ticks: the shape of a
// dump interval shorter than the gap between collectives). SampledJob
// writes as Inspector's dump thread does with a longer interval: per tick
// and communicator only the latest collective completed since the previous
// tick, with coll_sn counted per function. In both, what completed after a
// process's last tick is never written.
#include "src/importers/log_ends.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/importers/analysis.h"
#include "src/importers/importer.h"
#include "tests/importers/temp_dir.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr uint64_t kT0Us = 1752867229000000;  // job start, wall clock µs

// A data-parallel job: every step one all-reduce on the world communicator
// and one all-gather on the rank's node communicator.
struct FlushedJob {
  int world = 8;
  int ranks_per_node = 4;
  int steps = 200;
  int64_t step_us = 30000;       // one step every 30 ms
  int64_t exec_us = 5000;        // kernel time of each collective
  int64_t interval_us = 100000;  // NCCL_INSPECTOR_DUMP_THREAD_INTERVAL
  // Rank -> job time (µs) after which its dump thread writes nothing more.
  std::map<int, int64_t> stops;
};

std::string Line(const FlushedJob& j, int rank, bool world_comm, uint64_t sn,
                 uint64_t stop_us, uint64_t dump_us) {
  const int node = rank / j.ranks_per_node;
  const std::string id =
      world_comm ? "0x7f8c496ae9f661" : absl::StrCat("0x5e1f00", node, "0d");
  json kernel = {{"channel_id", 0},
                 {"kernel_start_ts", stop_us - j.exec_us},
                 {"kernel_stop_ts", stop_us},
                 {"kernel_record_ts", stop_us}};
  json coll = {{"coll", world_comm ? "AllReduce" : "AllGather"},
               {"coll_sn", sn},
               {"coll_msg_size_bytes", 1 << 24},
               {"coll_exec_time_us", j.exec_us},
               {"coll_timing_source", "kernel_gpu"},
               {"coll_algobw_gbs", 100.0},
               {"coll_busbw_gbs", 150.0},
               {"event_trace_sn", {{"coll_start_sn", 1}, {"coll_stop_sn", 2}}},
               {"event_trace_ts",
                {{"coll_start_ts", stop_us - j.exec_us - 20},
                 {"coll_stop_ts", stop_us - j.exec_us - 10},
                 {"kernel_events", json::array({kernel})}}}};
  json line = {{"header",
                {{"id", id},
                 {"rank", world_comm ? rank : rank % j.ranks_per_node},
                 {"n_ranks", world_comm ? j.world : j.ranks_per_node},
                 {"nnodes", world_comm ? j.world / j.ranks_per_node : 1}}},
               {"metadata",
                {{"inspector_output_format_version", "v4.0"},
                 {"git_rev", ""},
                 {"rec_mechanism", "profiler_plugin"},
                 {"dump_timestamp_us", dump_us},
                 {"hostname", absl::StrCat("node", node)},
                 {"pid", 5000 + rank}}},
               {"coll_perf", coll}};
  return line.dump();
}

// One process's file: each record written at the first tick of its dump
// thread (phase differs per process) at or after the collective completed;
// nothing after the last tick before the job ended (or the rank's stop).
std::string RankFile(const FlushedJob& j, int rank) {
  const int64_t phase = (static_cast<int64_t>(rank) * 7919) % j.interval_us;
  int64_t end = j.steps * j.step_us + j.step_us / 2;
  if (auto it = j.stops.find(rank); it != j.stops.end()) end = it->second;
  const int64_t last_tick =
      end < phase ? -1 : phase + (end - phase) / j.interval_us * j.interval_us;
  std::string out;
  for (int s = 1; s <= j.steps; ++s) {
    for (bool world_comm : {true, false}) {
      const int64_t done = s * j.step_us + (world_comm ? 0 : j.exec_us * 2);
      if (done > last_tick) continue;
      int64_t tick = phase;
      if (done > phase) {
        tick +=
            (done - phase + j.interval_us - 1) / j.interval_us * j.interval_us;
      }
      out += Line(j, rank, world_comm, s, kT0Us + done, kT0Us + tick) + "\n";
    }
  }
  return out;
}

void WriteJob(const FlushedJob& j, TempDir* dir) {
  for (int r = 0; r < j.world; ++r) {
    dir->Write(
        absl::StrCat("node", r / j.ranks_per_node, "-pid", 5000 + r, ".log"),
        RankFile(j, r));
  }
}

// The last sequence number of the records `of` takes, in each rank's file.
std::vector<uint64_t> LastSeqOf(
    const ImportedJob& job,
    const std::function<bool(const v1::OpRecord&)>& of) {
  std::vector<uint64_t> out;
  for (const ImportedRank& r : job.ranks) {
    uint64_t last = 0;
    for (const ImportedOp& op : r.ops) {
      if (of(op.record)) last = std::max(last, op.record.seq_number());
    }
    out.push_back(last);
  }
  return out;
}

std::vector<LogEnd> EndsOf(const Verdict& v, int32_t rank) {
  std::vector<LogEnd> out;
  for (const LogEnd& e : v.log_ends) {
    if (e.global_rank == rank) out.push_back(e);
  }
  return out;
}

// The files of a directory, imported and analyzed.
struct Analyzed {
  ImportedJob job;
  AnalysisResult result;
  std::string table;  // FormatVerdictTable
};

absl::StatusOr<Analyzed> AnalyzeDir(const TempDir& dir) {
  auto job = ImportPaths({dir.path()}, ImportOptions());
  if (!job.ok()) return job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  if (!result.ok()) return result.status();
  Analyzed a{std::move(*job), std::move(*result), ""};
  a.table = FormatVerdictTable(a.job, a.result.faults, a.result.verdict);
  return a;
}

// A rank that stopped reporting: a non-comm-hang naming it alone, each of
// its `n_ends` ends (communicator, function) stuck, more than 30 s before
// its peers' records end; every other rank's end is an ordinary one.
void ExpectStuckAlone(const Analyzed& a, int32_t rank, size_t n_ends) {
  EXPECT_EQ(a.result.verdict.fault_class, v1::FAULT_CLASS_NON_COMM_HANG)
      << a.table;
  EXPECT_EQ(a.result.verdict.suspects, std::vector<int32_t>{rank}) << a.table;
  const std::vector<LogEnd> ends = EndsOf(a.result.verdict, rank);
  ASSERT_EQ(ends.size(), n_ends) << a.table;
  for (const LogEnd& e : ends) {
    EXPECT_EQ(e.judgement, LogEndJudgement::kStuck) << DescribeLogEnd(e);
    EXPECT_GT(e.gap_ns, int64_t{30'000'000'000});
  }
  for (const LogEnd& e : a.result.verdict.log_ends) {
    if (e.global_rank != rank) {
      EXPECT_EQ(e.judgement, LogEndJudgement::kOrdinaryEnd)
          << DescribeLogEnd(e);
    }
  }
  EXPECT_THAT(a.table, HasSubstr(absl::StrCat("stuck: rank ", rank, "'s ")));
}

// No fault, and each of `rank`'s `n_ends` ends cannot be told from a stop:
// said so in the table and in JSON.
void ExpectCannotTell(const Analyzed& a, int32_t rank, size_t n_ends) {
  EXPECT_TRUE(a.result.faults.empty()) << a.table;
  EXPECT_TRUE(a.result.verdict.CannotTell()) << a.table;
  const std::vector<LogEnd> ends = EndsOf(a.result.verdict, rank);
  ASSERT_EQ(ends.size(), n_ends) << a.table;
  for (const LogEnd& e : ends) {
    EXPECT_EQ(e.judgement, LogEndJudgement::kCannotTell) << DescribeLogEnd(e);
  }
  EXPECT_THAT(a.table, HasSubstr("VERDICT: cannot tell"));
  EXPECT_THAT(a.table,
              HasSubstr(absl::StrCat("cannot tell: rank ", rank, "'s ")));
  json doc = VerdictJson(a.job, a.result.faults, a.result.verdict);
  EXPECT_EQ(doc["verdict"]["fault_class"], "none");
  EXPECT_EQ(doc["verdict"]["cannot_tell"], true);
}

class HealthyFlushedLogs : public ::testing::TestWithParam<int> {};

TEST_P(HealthyFlushedLogs, EndWithinOneDumpIntervalIsNoFault) {
  FlushedJob j;
  j.world = GetParam();
  TempDir dir;
  WriteJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->job.ranks.size(), static_cast<size_t>(j.world));
  // The shape under test: the ranks' last records differ by 1-3 collectives.
  std::vector<uint64_t> last = LastSeqOf(a->job, [](const v1::OpRecord& r) {
    return r.comm_hash() == 0x7f8c496ae9f661;
  });
  const auto [lo, hi] = std::minmax_element(last.begin(), last.end());
  ASSERT_GE(*hi - *lo, 1u);
  ASSERT_LE(*hi - *lo, 3u);
  EXPECT_EQ(a->result.verdict.fault_class, v1::FAULT_CLASS_UNSPECIFIED);
  EXPECT_TRUE(a->result.faults.empty()) << a->table;
  // Each lagging rank is named as an ordinary end, none as "cannot tell".
  ASSERT_FALSE(a->result.verdict.log_ends.empty());
  for (const LogEnd& e : a->result.verdict.log_ends) {
    EXPECT_EQ(e.judgement, LogEndJudgement::kOrdinaryEnd) << DescribeLogEnd(e);
    EXPECT_EQ(e.interval_ns, j.interval_us * 1000);
  }
  EXPECT_FALSE(a->result.verdict.CannotTell());
  EXPECT_THAT(a->table, HasSubstr("VERDICT: none"));
  EXPECT_THAT(a->table, HasSubstr("the ordinary end of interval-flushed logs"));
}

INSTANTIATE_TEST_SUITE_P(Ranks, HealthyFlushedLogs,
                         ::testing::Values(8, 16, 64));

// Rank 5's dump thread writes nothing after 5 s while its peers' records go
// on for 31 s more: far beyond one dump interval + the hang timeout. It
// stopped reporting (the controller's hang), and it alone is the suspect.
TEST(FlushedLogs, RankSilentLongerThanTheTimeoutIsAHangNamingIt) {
  FlushedJob j;
  j.world = 16;
  j.steps = 1200;
  j.stops[5] = 5'000'000;
  TempDir dir;
  WriteJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectStuckAlone(*a, 5, 2);  // world and node communicator
  EXPECT_THAT(a->table, HasSubstr("stuck: rank 5's all_reduce records"));
}

// Rank 3's file ends 0.5 s before the job's: more than one dump interval
// (100 ms), less than one interval + the hang timeout (1 s). The files
// cannot tell a stop from an end; it is said so, and is no fault.
TEST(FlushedLogs, EndBetweenOneIntervalAndTheTimeoutCannotBeTold) {
  FlushedJob j;
  j.stops[3] = j.steps * j.step_us - 500'000;
  TempDir dir;
  WriteJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectCannotTell(*a, 3, 2);
  EXPECT_THAT(a->table, HasSubstr("cannot tell: rank 3's all_reduce records"));
}

// Flight Recorder dumps taken on demand: rank 1's ring ends at collective
// 18, all of it completed, while the others completed 19 and 20 a few ms
// later. A dump carries no time of its own and no interval: cannot tell,
// not a fault.
TEST(FlushedLogs, FlightRecorderDumpEndingEarlyWithNothingPendingCannotBeTold) {
  TempDir dir;
  const uint64_t t0 = 1758610505000000000;
  for (int r = 0; r < 4; ++r) {
    const int last = r == 1 ? 18 : 20;
    json entries = json::array();
    for (int seq = 16; seq <= last; ++seq) {
      const uint64_t created = t0 + seq * 2'000'000;
      entries.push_back({{"record_id", seq},
                         {"pg_id", 0},
                         {"process_group", {"0", "default_pg"}},
                         {"collective_seq_id", seq},
                         {"p2p_seq_id", 0},
                         {"profiling_name", "nccl:all_reduce"},
                         {"input_sizes", {{4096}}},
                         {"input_dtypes", {"Float"}},
                         {"state", "completed"},
                         {"time_created_ns", created},
                         {"time_discovered_started_ns", created + 100'000},
                         {"time_discovered_completed_ns", created + 900'000},
                         {"timeout_ms", 600000},
                         {"is_p2p", false}});
    }
    json doc = {{"version", "2.9"},
                {"pg_config",
                 {{"0",
                   {{"name", "0"},
                    {"desc", "default_pg"},
                    {"ranks", "[0, 1, 2, 3]"}}}}},
                {"pg_status",
                 {{"0",
                   {{"last_enqueued_collective", last},
                    {"last_started_collective", last},
                    {"last_completed_collective", last}}}}},
                {"entries", entries}};
    dir.Write(absl::StrCat("_dump_", r, ".json"), doc.dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string table =
      FormatVerdictTable(*job, result->faults, result->verdict);
  EXPECT_TRUE(result->faults.empty()) << table;
  EXPECT_TRUE(result->verdict.CannotTell()) << table;
  const std::vector<LogEnd> ends = EndsOf(result->verdict, 1);
  ASSERT_EQ(ends.size(), 1u) << table;
  EXPECT_EQ(ends[0].last_seq, 18u);
  EXPECT_EQ(ends[0].peers_last_seq, 20u);
  EXPECT_EQ(ends[0].interval_ns, 0);
}

// Inspector as it really writes (ext-profiler/inspector in NVIDIA/nccl):
// each communicator keeps only its latest completed collective; the dump
// thread writes it once per tick if one completed since the last tick; and
// coll_sn is comm->seqNumber[func], counted per function. With collectives
// more frequent than the dump interval each file holds a different sample
// of sequence numbers. A step of this job: two all-gathers and two
// reduce-scatters on the world communicator (ZeRO / FSDP) and one
// all-reduce on the rank's node communicator.
struct SampledJob {
  int world = 8;
  int ranks_per_node = 4;
  int steps = 200;
  int64_t step_us = 37000;
  int64_t exec_us = 2000;
  int64_t interval_us = 100000;
  std::map<int, int64_t> stops;  // rank -> job time (µs) of its last tick
};

struct Completion {
  int64_t done_us;
  bool world_comm;
  const char* func;
  uint64_t sn;
};

std::vector<Completion> Completions(const SampledJob& j) {
  std::vector<Completion> out;
  for (int s = 0; s < j.steps; ++s) {
    const int64_t base = (s + 1) * j.step_us;
    const uint64_t sn = 2 * static_cast<uint64_t>(s);
    out.push_back({base, true, "AllGather", sn + 1});
    out.push_back({base + 3000, true, "AllGather", sn + 2});
    out.push_back({base + 6000, true, "ReduceScatter", sn + 1});
    out.push_back({base + 9000, true, "ReduceScatter", sn + 2});
    out.push_back({base + 15000, false, "AllReduce", s + 1ull});
  }
  return out;
}

std::string SampledLine(const SampledJob& j, int rank, const Completion& c,
                        uint64_t dump_us) {
  const int node = rank / j.ranks_per_node;
  const uint64_t stop = kT0Us + c.done_us;
  json kernel = {{"channel_id", 0},
                 {"kernel_start_sn", 2},
                 {"kernel_stop_sn", 4},
                 {"kernel_record_sn", 3},
                 {"kernel_start_ts", stop - j.exec_us},
                 {"kernel_stop_ts", stop},
                 {"kernel_record_ts", stop}};
  json coll = {{"coll", c.func},
               {"coll_sn", c.sn},
               {"coll_msg_size_bytes", 1 << 24},
               {"coll_exec_time_us", j.exec_us},
               {"coll_timing_source", "kernel_gpu"},
               {"coll_algobw_gbs", 100.0},
               {"coll_busbw_gbs", 150.0},
               {"event_trace_sn", {{"coll_start_sn", 1}, {"coll_stop_sn", 5}}},
               {"event_trace_ts",
                {{"coll_start_ts", stop - j.exec_us - 20},
                 {"coll_stop_ts", stop - j.exec_us - 10},
                 {"kernel_events", json::array({kernel})}}}};
  json header = {{"id", c.world_comm ? "0x7f8c496ae9f661"
                                     : absl::StrCat("0x5e1f00", node, "0d")},
                 {"rank", c.world_comm ? rank : rank % j.ranks_per_node},
                 {"n_ranks", c.world_comm ? j.world : j.ranks_per_node},
                 {"nnodes", c.world_comm ? j.world / j.ranks_per_node : 1}};
  json line = {{"header", header},
               {"metadata",
                {{"inspector_output_format_version", "v4.0"},
                 {"git_rev", ""},
                 {"rec_mechanism", "nccl_profiler_interface"},
                 {"dump_timestamp_us", kT0Us + dump_us},
                 {"hostname", absl::StrCat("node", node)},
                 {"pid", 5000 + rank}}},
               {"coll_perf", coll}};
  return line.dump();
}

// One process's file: at each tick of its dump thread (phase differs per
// process), per communicator, the latest collective completed since the
// previous tick; no tick after the job ended (or the rank's stop).
std::string SampledFile(const SampledJob& j, int rank,
                        const std::vector<Completion>& all) {
  const int64_t phase = (static_cast<int64_t>(rank) * 7919) % j.interval_us;
  int64_t end = (j.steps + 1) * j.step_us;
  if (auto it = j.stops.find(rank); it != j.stops.end()) end = it->second;
  std::string out;
  size_t next = 0;
  for (int64_t tick = phase; tick <= end; tick += j.interval_us) {
    const Completion* latest[2] = {nullptr, nullptr};  // node, world
    for (; next < all.size() && all[next].done_us <= tick; ++next) {
      latest[all[next].world_comm ? 1 : 0] = &all[next];
    }
    for (const Completion* c : {latest[1], latest[0]}) {
      if (c != nullptr) out += SampledLine(j, rank, *c, tick) + "\n";
    }
  }
  return out;
}

void WriteSampledJob(const SampledJob& j, TempDir* dir) {
  const std::vector<Completion> all = Completions(j);
  for (int r = 0; r < j.world; ++r) {
    dir->Write(
        absl::StrCat("node", r / j.ranks_per_node, "-pid", 5000 + r, ".log"),
        SampledFile(j, r, all));
  }
}

class HealthySampledLogs : public ::testing::TestWithParam<int> {};

// Healthy run, files as Inspector writes them: no fault, and no rank named
// anything but an ordinary end.
TEST_P(HealthySampledLogs, NoFault) {
  SampledJob j;
  j.world = GetParam();
  TempDir dir;
  WriteSampledJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->job.ranks.size(), static_cast<size_t>(j.world));
  // The shape under test: files sample different collectives and their
  // last records differ (by more collectives where a function is written
  // less often: a tick writes only the communicator's latest).
  for (v1::CollFunc f : {v1::COLL_FUNC_ALL_GATHER, v1::COLL_FUNC_ALL_REDUCE}) {
    std::vector<uint64_t> last =
        LastSeqOf(a->job, [f](const v1::OpRecord& r) { return r.func() == f; });
    const auto [lo, hi] = std::minmax_element(last.begin(), last.end());
    ASSERT_GE(*lo, 1u);
    ASSERT_GE(*hi - *lo, 1u);
  }
  const Verdict& v = a->result.verdict;
  EXPECT_EQ(v.fault_class, v1::FAULT_CLASS_UNSPECIFIED) << a->table;
  EXPECT_TRUE(a->result.faults.empty()) << a->table;
  EXPECT_FALSE(v.CannotTell()) << a->table;
  for (const LogEnd& e : v.log_ends) {
    EXPECT_EQ(e.judgement, LogEndJudgement::kOrdinaryEnd) << DescribeLogEnd(e);
  }
  EXPECT_THAT(a->table, HasSubstr("VERDICT: none"));
  json doc = VerdictJson(a->job, a->result.faults, v);
  EXPECT_EQ(doc["verdict"]["fault_class"], "none");
  EXPECT_EQ(doc["verdict"]["cannot_tell"], false);
}

INSTANTIATE_TEST_SUITE_P(Ranks, HealthySampledLogs,
                         ::testing::Values(8, 16, 64));

// Rank 6's dump thread writes nothing after 5 s while its peers' records go
// on for 31 s more: it stopped reporting, and it alone is the suspect
// (the other ranks' samples end a few collectives apart, as ever).
TEST(SampledLogs, RankSilentLongerThanTheTimeoutIsAHangNamingIt) {
  SampledJob j;
  j.world = 16;
  j.steps = 1200;
  j.stops[6] = 5'000'000;
  TempDir dir;
  WriteSampledJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectStuckAlone(*a, 6, 3);  // world: 2 functions; node: 1
}

// The same silence but short: rank 6's file ends 0.25 s before the job's,
// more than 1.25 dump intervals, less than an interval + the hang timeout.
// Cannot tell; said so in text and JSON, and no fault.
TEST(SampledLogs, ShortSilenceCannotBeTold) {
  SampledJob j;
  j.stops[6] = (j.steps + 1) * j.step_us - 250'000;
  TempDir dir;
  WriteSampledJob(j, &dir);
  auto a = AnalyzeDir(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectCannotTell(*a, 6, 3);
}

}  // namespace
}  // namespace pitstop::importers
