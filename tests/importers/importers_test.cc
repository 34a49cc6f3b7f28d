// Importer tests on files made here (no ../shared/data needed): bad input,
// the Inspector format, the Flight Recorder JSON form, the timeline.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/importers/analysis.h"
#include "src/importers/import_util.h"
#include "src/importers/importer.h"
#include "src/importers/input_file.h"
#include "src/importers/timeline.h"
#include "tests/harness/run_command.h"
#include "tests/importers/fr_test_util.h"
#include "tests/importers/temp_dir.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(compressBound(data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = data.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string KinetoTrace(int rank, int world,
                        const std::vector<std::pair<double, double>>& k) {
  json events = json::array();
  for (const auto& [ts, dur] : k) {
    events.push_back(
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"},
         {"pid", 0},
         {"tid", 7},
         {"ts", ts},
         {"dur", dur},
         {"args", {{"stream", 7}, {"device", rank}, {"correlation", 1}}}});
  }
  json doc = {{"schemaVersion", 1},
              {"distributedInfo",
               {{"backend", "nccl"}, {"rank", rank}, {"world_size", world}}},
              {"traceEvents", events}};
  return doc.dump();
}

TEST(InputFileTest, TruncatedGzipNamesFileAndOffset) {
  TempDir dir;
  std::string gz = Gzip(KinetoTrace(0, 2, {{1000, 50}, {2000, 50}}));
  std::string p = dir.Write("rank-0.json.gz", gz.substr(0, gz.size() / 2));
  auto text = ReadInputFile(p);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr(p));
  EXPECT_THAT(text.status().message(), HasSubstr("truncated gzip"));
  EXPECT_THAT(text.status().message(),
              HasSubstr(absl::StrCat("offset ", gz.size() / 2)));
  auto job = ImportPaths({p}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("truncated gzip"));
}

TEST(InputFileTest, GzipRoundTripAndPlainPassThrough) {
  std::string data(300000, 'x');
  for (size_t i = 0; i < data.size(); i += 7)
    data[i] = static_cast<char>('a' + i % 26);
  auto back = MaybeGunzip(Gzip(data), "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
  EXPECT_EQ(*MaybeGunzip("plain", "mem"), "plain");
}

// Issue #33: a gzip bomb is refused at the caps, naming the file and the
// compressed offset, before the memory is spent.
TEST(InputFileTest, DecompressionCapsStopABomb) {
  const std::string zeros(8 << 20, '\0');
  const std::string bomb = Gzip(zeros);  // ~1000:1
  absl::StatusOr<std::string> r = MaybeGunzip(bomb, "bomb.gz");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("bomb.gz: decompression ratio"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("limit hit at compressed byte offset"));
  // The ratio is checked once 1 MiB is out: the refusal comes early.
  DecompressLimits size_only{.max_bytes = 2 << 20, .max_ratio = 1 << 20};
  r = MaybeGunzip(bomb, "bomb.gz", size_only);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("decompression size limit"));
  // Within both caps it inflates; an uncompressed input is held to the size.
  DecompressLimits loose{.max_bytes = 8 << 20, .max_ratio = 1 << 20};
  r = MaybeGunzip(bomb, "bomb.gz", loose);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), zeros.size());
  EXPECT_FALSE(MaybeGunzip(zeros, "plain", size_only).ok());
  // A small file of repeated text stays under the ratio grace.
  EXPECT_TRUE(MaybeGunzip(Gzip(std::string(512 << 10, 'a')), "small").ok());
}

TEST(ImporterTest, MalformedJsonNamesFileAndByte) {
  TempDir dir;
  std::string good = KinetoTrace(0, 1, {{1000, 50}});
  std::string p =
      dir.Write("trace-0.json", good.substr(0, good.size() - 5) + "@@");
  auto job = ImportPaths({p}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr(p));
  EXPECT_THAT(job.status().message(), HasSubstr("malformed JSON at byte"));
}

TEST(ImporterTest, EmptyAndUnknownFilesAreClearErrors) {
  TempDir dir;
  std::string empty = dir.Write("_dump_0", "");
  auto job = ImportPaths({empty}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr(empty + ": empty file"));
  std::string text = dir.Write("notes.txt", "hello");
  job = ImportPaths({text}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("not a recognised format"));
  EXPECT_FALSE(ImportPaths({dir.path() + "/nope"}, ImportOptions()).ok());
}

TEST(ImporterTest, ForbiddenPickleOpcodeInADumpIsRefused) {
  TempDir dir;
  std::string evil =
      std::string("\x80\x02", 2) + "cposix\nsystem\nX\x02\x00\x00\x00id\x85R.";
  std::string p = dir.Write("_dump_3", evil);
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr(p + ": offset 2"));
  EXPECT_THAT(job.status().message(), HasSubstr("'GLOBAL' refused"));
}

// A 4-rank job in Flight Recorder's JSON form: rank 2 never enqueues seq 8
// of the all-reduce group that the others wait in.
TEST(ImporterTest, FlightRecorderJsonFormNonCommHang) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    json entries = json::array();
    int last = r == 2 ? 7 : 8;
    for (int seq = 6; seq <= last; ++seq) {
      entries.push_back({{"record_id", seq},
                         {"pg_id", 0},
                         {"process_group", {"0", "default_pg"}},
                         {"collective_seq_id", seq},
                         {"p2p_seq_id", 0},
                         {"profiling_name", "nccl:all_reduce"},
                         {"input_sizes", {{1024}}},
                         {"input_dtypes", {"Float"}},
                         {"state", seq <= 7 ? "completed" : "scheduled"},
                         {"time_created_ns", 1000 * seq},
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
                    {"last_started_collective", -1},
                    {"last_completed_collective", 7}}}}},
                {"entries", entries}};
    dir.Write(absl::StrCat("_dump_", r, ".json"), doc.dump());
  }
  dir.Write("README", "not a dump");  // skipped with a note
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->format, "flight-recorder");
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
  EXPECT_EQ(result->verdict.victims, (std::vector<int32_t>{0, 1, 3}));
  ASSERT_EQ(result->verdict.hung_collectives.size(), 1u);
  EXPECT_THAT(result->verdict.hung_collectives[0],
              HasSubstr("all_reduce seq 8"));
  EXPECT_THAT(result->verdict.hung_collectives[0],
              HasSubstr("default_pg (pg 0)"));
}

bool AnyWarning(const ImportedJob& job, absl::string_view a,
                absl::string_view b) {
  for (const std::string& w : job.warnings) {
    if (absl::StrContains(w, a) && absl::StrContains(w, b)) return true;
  }
  return false;
}

TEST(ImporterTest, MalformedGroupInOneDumpBlamesNoRankOfIt) {
  TempDir dir;
  for (int r = 0; r < 5; ++r) {
    std::string ranks0 = r == 0 ? "[0, -5, 99999999999]" : AllRanks(5);
    dir.Write(absl::StrCat("_dump_", r, ".json"),
              FrDoc(5, r == 2 ? 7 : 8, ranks0).dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(AnyWarning(*job, "_dump_0.json", "pg_config['0'].ranks"));
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
  for (const v1::Fault& f : result->faults) {
    for (const v1::Suspect& s : f.suspects()) EXPECT_NE(s.global_rank(), 0);
  }
}

TEST(ImporterTest, CorruptCounterIsWarnedByItsFileAndBlamesNoOneElse) {
  TempDir dir;
  for (int r = 0; r < 5; ++r) {
    int64_t last = r == 2 ? 7 : r == 3 ? (int64_t{1} << 62) : 8;
    dir.Write(absl::StrCat("_dump_", r, ".json"),
              FrDoc(5, last, AllRanks(5)).dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(AnyWarning(*job, "_dump_3.json", "corrupt counter"));
  EXPECT_FALSE(AnyWarning(*job, "_dump_0.json", "corrupt counter"));
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
}

TEST(ImporterTest, MissingRanksAreRangesAndNeverVictimsOrGpu0) {
  TempDir dir;
  // World of 64 in group 0, only ranks 0..4 dumped (group 1 is 0..4).
  for (int r = 0; r < 5; ++r) {
    dir.Write(absl::StrCat("_dump_", r, ".json"),
              FrDoc(5, r == 2 ? 7 : 8, AllRanks(64)).dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(AnyWarning(*job, "no dump for rank(s) 5-63", ""));
  for (const ImportedRank& r : job->ranks) {
    for (const v1::CommunicatorInfo& c : r.comms) {
      EXPECT_EQ(c.cuda_device(), -1) << "rank " << r.global_rank;
    }
  }
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
  EXPECT_EQ(result->verdict.victims, (std::vector<int32_t>{0, 1, 3, 4}));
  std::string table = FormatVerdictTable(*job, result->faults, result->verdict);
  EXPECT_THAT(table, Not(HasSubstr("GPU 0")));
}

// NVIDIA/nccl#795's shape post-mortem: rank 3 wrote no dump while ranks 0-2
// all wait in the all_reduce it never joined. It is the suspect (its process
// died), not "no suspect at all"; with a measured suspect elsewhere it would
// not be (MissingRanksAreRangesAndNeverVictimsOrGpu0).
TEST(ImporterTest, RankThatLeftNoDumpWhileItsPeersWaitIsTheSuspect) {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    dir.Write(absl::StrCat("_dump_", r, ".json"),
              FrDoc(4, 8, AllRanks(4)).dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(AnyWarning(*job, "no dump for rank(s) 3", ""));
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_PROCESS_DIED);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{3});
  EXPECT_EQ(result->verdict.victims, (std::vector<int32_t>{0, 1, 2}));
  ASSERT_FALSE(result->verdict.hung_collectives.empty());
  EXPECT_THAT(result->verdict.hung_collectives[0], HasSubstr("seq 8"));
}

TEST(ImporterTest, TooManyRanksWithoutADumpIsAClearError) {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    dir.Write(absl::StrCat("_dump_", r, ".json"),
              FrDoc(3, 8, AllRanks(kMaxAbsentRanks + 10)).dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr(absl::StrCat("at most ", kMaxAbsentRanks)));
}

TEST(ImporterTest, TopLevelListAndEmptyDictDumpsSaySo) {
  TempDir dir;
  // Pickle protocol 2 of an empty list: PROTO 2, EMPTY_LIST, BINPUT 0, STOP.
  std::string list = dir.Write("_dump_0", std::string("\x80\x02]q\x00.", 6));
  auto a = ImportPaths({list}, ImportOptions());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("a list"));
  TempDir dir2;
  std::string empty = dir2.Write("_dump_0.json", "{}");
  auto b = ImportPaths({empty}, ImportOptions());
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("_dump_0.json"));
}

TEST(ImportUtilTest, RankListsAndRanges) {
  std::vector<int32_t> v;
  EXPECT_TRUE(ParseRankList(json("[0, 3, 2]"), &v));
  EXPECT_EQ(v, (std::vector<int32_t>{0, 3, 2}));
  EXPECT_FALSE(ParseRankList(json("[0, -5]"), &v));
  EXPECT_FALSE(ParseRankList(json("[0, 99999999999]"), &v));
  EXPECT_FALSE(ParseRankList(json("[0, 1048576]"), &v));
  EXPECT_FALSE(ParseRankList(json("[1, 1]"), &v));
  EXPECT_FALSE(ParseRankList(json::array({0, -1}), &v));
  EXPECT_EQ(RankRanges({0, 1, 2, 3, 7, 9, 10, 11}), "0-3,7,9-11");
  EXPECT_EQ(RankRanges({5}), "5");
  EXPECT_EQ(RankRanges({}), "");
}

v1::Fault MadeUpFault(const std::string& id, v1::FaultClass c,
                      std::vector<int32_t> suspects,
                      std::vector<int32_t> victims, const std::string& comm) {
  v1::Fault f;
  f.set_fault_id(id);
  f.set_fault_class(c);
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  f.set_comm_name(comm);
  f.set_func(v1::COLL_FUNC_ALL_TO_ALL);
  f.set_seq_number(20);
  f.set_summary(absl::StrCat(id, " evidence (deep profiling asked)"));
  for (int32_t s : suspects) f.add_suspects()->set_global_rank(s);
  for (int32_t v : victims) f.add_victims()->set_global_rank(v);
  return f;
}

TEST(VerdictTableTest, PrimaryFirstAndConsequencesSummedUp) {
  ImportedJob job;
  job.format = "flight-recorder";
  for (int r = 0; r < 8; ++r) {
    ImportedRank rank;
    rank.global_rank = r;
    rank.absent = r == 7;
    job.ranks.push_back(rank);
  }
  std::vector<v1::Fault> faults = {
      MadeUpFault("F1", v1::FAULT_CLASS_COMM_HANG, {}, {0, 1}, "pg A"),
      MadeUpFault("F2", v1::FAULT_CLASS_COMM_HANG, {5}, {4}, "pg B"),
      MadeUpFault("F3", v1::FAULT_CLASS_COMM_HANG, {}, {2, 3}, "pg C"),
      MadeUpFault("F4", v1::FAULT_CLASS_NON_COMM_HANG, {5, 6}, {4, 7},
                  "pg KEY")};
  Verdict v = VerdictFromFaults(faults, {7});
  EXPECT_EQ(v.fault_class, v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(v.suspects, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(v.victims, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(v.hung_collectives.size(), 2u);
  EXPECT_THAT(v.hung_collectives[0], HasSubstr("pg KEY"));
  std::string table = FormatVerdictTable(job, faults, v);
  EXPECT_THAT(table, HasSubstr("2 fault(s) without suspects (2 comm-hang)"));
  EXPECT_THAT(table, Not(HasSubstr("F1:")));
  EXPECT_THAT(table, HasSubstr("F4: F4 evidence"));
  EXPECT_THAT(table, Not(HasSubstr("deep profiling")));
  EXPECT_LT(table.find("F4 "), table.find("F2 "));
  // Absent rank 7 is not a victim in F4's row.
  EXPECT_THAT(table, Not(HasSubstr("4,7")));
  std::string verbose = FormatVerdictTable(job, faults, v, "t", true);
  EXPECT_THAT(verbose, HasSubstr("F1: F1 evidence"));
  EXPECT_THAT(verbose, HasSubstr("F3: F3 evidence"));
  // The timeline uses the table's class names.
  std::string tl = BuildTimeline(job, faults).dump();
  EXPECT_THAT(tl, HasSubstr("non-comm-hang"));
  EXPECT_THAT(tl, Not(HasSubstr("FAULT_CLASS_")));
}

TEST(ImporterTest, KinetoMatchingOfManyKernelsCountsNoTies) {
  TempDir dir;
  // 3000 collectives 2 ms apart; rank 1 starts 40 us late in every 3rd
  // (its kernel is shorter), the rest are exact ties. Rank 0 has extra
  // unmatched kernels (sampling) in between.
  std::vector<std::pair<double, double>> k0, k1;
  for (int i = 0; i < 3000; ++i) {
    double ts = 1000 + 2000.0 * i;
    bool late = i % 3 == 0;
    k0.push_back({ts, 50});
    k1.push_back({late ? ts + 40 : ts, late ? 10 : 50});
    if (i % 500 == 0) k0.push_back({ts + 1000, 5});  // > 500 us off
  }
  dir.Write("trace-0.json", KinetoTrace(0, 2, k0));
  dir.Write("trace-1.json", KinetoTrace(1, 2, k1));
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->matched.size(), 3000u);
  int late = 0, ties = 0;
  for (const MatchedCollective& m : job->matched) {
    late += m.late_rank == 1;
    ties += m.late_rank == -1;
  }
  EXPECT_EQ(late, 1000);
  EXPECT_EQ(ties, 2000);
  bool overall = false;
  for (const std::string& n : job->notes) {
    overall |= absl::StrContains(n, "rank 1 started last in 1000 of 3000") &&
               absl::StrContains(n, "2000 ties");
  }
  EXPECT_TRUE(overall);
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  std::string table = FormatVerdictTable(*job, result->faults, result->verdict);
  EXPECT_THAT(table, HasSubstr("more note(s) (-v or -o json)"));
  EXPECT_THAT(table, HasSubstr("rank 1 started last"));
}

// A 4-rank job in Inspector's format (one JSONL file per process, real field
// names): rank 3 arrives late at every all-reduce, so its kernel time is the
// shortest (the others wait for it).
std::string InspectorLine(int rank, uint64_t sn, double exec_us, bool verbose) {
  json coll = {{"coll", "AllReduce"},
               {"coll_sn", sn},
               {"coll_msg_size_bytes", 1 << 24},
               {"coll_exec_time_us", exec_us},
               {"coll_timing_source", "kernel_gpu"},
               {"coll_algobw_gbs", 100.0},
               {"coll_busbw_gbs", 150.0}};
  uint64_t end = 1752867229235000 + sn * 100000;
  if (verbose) {
    coll["event_trace_sn"] = {{"coll_start_sn", 1}, {"coll_stop_sn", 2}};
    json kernel = {{"channel_id", 0},
                   {"kernel_start_ts", end - static_cast<uint64_t>(exec_us)},
                   {"kernel_stop_ts", end},
                   {"kernel_record_ts", end}};
    coll["event_trace_ts"] = {{"coll_start_ts", end - 1000},
                              {"coll_stop_ts", end - 990},
                              {"kernel_events", json::array({kernel})}};
  }
  json line = {{"header",
                {{"id", "0x7f8c496ae9f661"},
                 {"rank", rank},
                 {"n_ranks", 4},
                 {"nnodes", 2}}},
               {"metadata",
                {{"inspector_output_format_version", "v4.0"},
                 {"git_rev", ""},
                 {"rec_mechanism", "profiler_plugin"},
                 {"dump_timestamp_us", end + 500},
                 {"hostname", absl::StrCat("node", rank / 2)},
                 {"pid", 4000 + rank}}},
               {"coll_perf", coll}};
  return line.dump();
}

TEST(InspectorTest, StragglerFromAMadeUpMultiRankJob) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    std::string body;
    for (uint64_t sn = 1; sn <= 30; ++sn) {
      double exec = r == 3 ? 2000 : 6000 + 100 * r;
      body += InspectorLine(r, sn, exec, sn % 2 == 0) + "\n";
    }
    dir.Write(absl::StrCat("node", r / 2, "-pid", 4000 + r, ".log"), body);
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->format, "inspector");
  ASSERT_EQ(job->ranks.size(), 4u);
  EXPECT_EQ(job->ranks[1].host, "node0");
  EXPECT_EQ(job->ranks[3].host, "node1");
  EXPECT_EQ(job->ranks[3].ops.size(), 30u);
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_NON_COMM_SLOW);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{3});
  EXPECT_TRUE(ValidateTraceEvents(BuildTimeline(*job, result->faults)).ok());
}

TEST(InspectorTest, MissingProcessFileIsPartialAndBadLineNamed) {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    std::string body;
    for (uint64_t sn = 1; sn <= 5; ++sn)
      body += InspectorLine(r, sn, 5000, false) + "\n";
    dir.Write(absl::StrCat("p", r, ".log"), body);
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->missing_ranks, std::vector<int32_t>{3});
  EXPECT_THAT(job->warnings.back(), HasSubstr("rank(s) 3"));
  dir.Write("p0.log", InspectorLine(0, 1, 5000, false) + "\n{\"header\": {\n");
  auto bad = ImportPaths({dir.path() + "/p0.log"}, ImportOptions());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("p0.log: line 2"));
}

TEST(TimelineTest, KinetoPairTimelineIsValidAndAnnotated) {
  TempDir dir;
  // Rank 1 starts 3 ms late each time; both end together.
  std::vector<std::pair<double, double>> k0, k1;
  for (int i = 0; i < 6; ++i) {
    double end = 1e6 + i * 20000;
    k0.push_back({end - 8000, 8000});
    k1.push_back({end - 5000 + 20, 5000 - 20});
  }
  std::string p0 = dir.Write("trace-0.json.gz", Gzip(KinetoTrace(0, 2, k0)));
  std::string p1 = dir.Write("trace-1.json", KinetoTrace(1, 2, k1));
  auto job = ImportPaths({p0, p1}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->matched.size(), 6u);
  for (const MatchedCollective& m : job->matched) EXPECT_EQ(m.late_rank, 1);
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{1});
  std::string out = dir.path() + "/timeline.json";
  ASSERT_TRUE(WriteTimeline(*job, result->faults, out).ok());
  auto text = ReadInputFile(out);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text);
  ASSERT_TRUE(ValidateTraceEvents(doc).ok()) << ValidateTraceEvents(doc);
  int slices = 0, faults = 0, procs = 0;
  for (const json& e : doc["traceEvents"]) {
    slices += e["ph"] == "X";
    faults += e.value("cat", "") == "fault";
    procs += e["ph"] == "M" && e["name"] == "process_name";
  }
  EXPECT_EQ(slices, 12);
  EXPECT_EQ(procs, 2);
  EXPECT_GE(faults, 2);  // a global marker and one on the suspect
  // The validator catches what Perfetto would reject.
  json broken = doc;
  broken["traceEvents"].push_back({{"ph", "X"},
                                   {"name", "x"},
                                   {"pid", 0},
                                   {"tid", 1},
                                   {"ts", -1},
                                   {"dur", 1}});
  EXPECT_FALSE(ValidateTraceEvents(broken).ok());
}

using ::pitstop::harness::RunCommand;

TEST(CliTest, AnalyzeExitCodesAndJson) {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  if (bin_dir == nullptr) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set (run through ctest)";
  }
  std::string pitstop = std::string(bin_dir) + "/tools/pitstop/pitstop";
  TempDir dir;
  std::string empty = dir.Write("_dump_0", "");
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " analyze " + empty, &out), 2);
  EXPECT_THAT(out, HasSubstr(empty + ": empty file"));
  // Two ranks that agree: no fault, exit 0.
  std::vector<std::pair<double, double>> k = {
      {1000, 50}, {2000, 50}, {3000, 50}};
  dir.Write("trace-0.json", KinetoTrace(0, 2, k));
  dir.Write("trace-1.json", KinetoTrace(1, 2, k));
  std::remove(empty.c_str());
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " analyze -q -o json " + dir.path(), &out), 0)
      << out;
  json doc = json::parse(out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << out;
  EXPECT_EQ(doc["format"], "kineto");
  EXPECT_EQ(doc["verdict"]["fault_class"], "none");
  EXPECT_EQ(doc["matched"].size(), 3u);
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " analyze --bogus-flag " + dir.path(), &out),
            2);
}

// Flight Recorder dumps of an application desync (pytorch-lightning#19106's
// shape): at collective 8 of one group, rank `odd` issued `odd_name` with
// `odd_elems` elements where the others issued an all_reduce of 1024.
void WriteDesyncDumps(TempDir& dir, int odd, const std::string& odd_name,
                      int64_t odd_elems) {
  for (int r = 0; r < 4; ++r) {
    json entries = json::array();
    for (int seq = 6; seq <= 8; ++seq) {
      const bool differs = r == odd && seq == 8;
      entries.push_back(
          {{"record_id", seq},
           {"pg_id", 0},
           {"process_group", {"0", "default_pg"}},
           {"collective_seq_id", seq},
           {"p2p_seq_id", 0},
           {"profiling_name", differs ? odd_name : "nccl:all_reduce"},
           {"input_sizes", {{differs ? odd_elems : 1024}}},
           {"input_dtypes", {"Float"}},
           {"state", seq <= 7 ? "completed" : "scheduled"},
           {"time_created_ns", 1000 * seq},
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
                   {{"last_enqueued_collective", 8},
                    {"last_started_collective", -1},
                    {"last_completed_collective", 7}}}}},
                {"entries", entries}};
    dir.Write(absl::StrCat("_dump_", r, ".json"), doc.dump());
  }
}

// Post-mortem and live agree: the engine behind `pitstop analyze` is the
// controller's, fed from the dumps.
TEST(ImporterTest, DesyncInFlightRecorderDumpsIsAMismatchNamingTheOddRank) {
  TempDir dir;
  WriteDesyncDumps(dir, 2, "nccl:all_gather", 1024);
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
  EXPECT_EQ(result->verdict.victims, (std::vector<int32_t>{0, 1, 3}));
  ASSERT_FALSE(result->verdict.hung_collectives.empty());
  bool named = false;
  for (const v1::Fault& f : result->faults) {
    named |= f.fault_class() == v1::FAULT_CLASS_MISMATCH &&
             absl::StrContains(f.summary(), "all_gather seq 8");
  }
  EXPECT_TRUE(named) << "the fault says what the odd rank issued";
}

TEST(ImporterTest, AnotherSizeInFlightRecorderDumpsIsAMismatch) {
  TempDir dir;
  WriteDesyncDumps(dir, 1, "nccl:all_reduce", 512);
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{1});
}

// NVIDIA/nccl#426, post-mortem: the job's NCCL log (NCCL_DEBUG=INFO, with
// torchrun's rank prefixes) shows ncclCommInitRank failing on two ranks
// with a transport error; a third rank's creation completed. No dump was
// written (no collective ever ran), so the log is all there is.
constexpr char kInitFailureLog[] =
    "[rank0]:node0:4001:4001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    "[rank0]:node0:4001:4001 [0] NCCL INFO ncclCommInitRank comm 0x55a1 rank 0 "
    "nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9d2f - Init START\n"
    "[rank1]:node0:4002:4002 [1] NCCL INFO ncclCommInitRank comm 0x55b2 rank 1 "
    "nranks 4 cudaDev 1 nvmlDev 1 busId 2000 commId 0x9d2f - Init START\n"
    "[rank2]:node1:5001:5001 [0] NCCL INFO ncclCommInitRank comm 0x66c3 rank 2 "
    "nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9d2f - Init START\n"
    "[rank0]:node0:4001:4010 [0] transport/net_ib.cc:621 NCCL WARN NET/IB : "
    "No device found.\n"
    "[rank0]:node0:4001:4010 [0] NCCL INFO transport/net.cc:112 -> 2\n"
    "[rank0]:node0:4001:4001 [0] NCCL INFO init.cc:1266 -> 2\n"
    "[rank1]:node0:4002:4012 [1] misc/socket.cc:484 NCCL WARN "
    "socketStartConnect: "
    "Connect to 10.0.0.9<43211> failed : Connection refused\n"
    "[rank1]:node0:4002:4002 [1] NCCL INFO bootstrap.cc:77 -> 2\n"
    "[rank2]:node1:5001:5001 [0] NCCL INFO ncclCommInitRank comm 0x66c3 rank 2 "
    "nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9d2f - Init COMPLETE\n"
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: "
    "ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external "
    "library call failed or device error.\n";

TEST(ImporterTest, NcclLogWithFailedCommCreationIsAConfigFault) {
  TempDir dir;
  dir.Write("train-job.log", kInitFailureLog);
  dir.Write("README", "notes");
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->format, "nccl-log");
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_CONFIG);
  EXPECT_EQ(result->verdict.suspects, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(result->faults.size(), 1u);
  const v1::Fault& f = result->faults[0];
  EXPECT_THAT(f.summary(), HasSubstr("NET/IB : No device found."));
  EXPECT_THAT(f.summary(), HasSubstr("Connection refused"));
  EXPECT_THAT(f.summary(), HasSubstr("ncclSystemError"));
  EXPECT_THAT(f.summary(), HasSubstr("not a hardware fault"));
  for (const v1::Suspect& s : f.suspects()) {
    EXPECT_EQ(s.level(), v1::SUSPECT_LEVEL_RANK);
    EXPECT_EQ(s.host(), "node0");
  }
  const std::string table = FormatVerdictTable(
      *job, result->faults, result->verdict, "analyze", false);
  EXPECT_THAT(table, HasSubstr("VERDICT: config"));
}

// A log of a job whose creation completed and which failed later (a
// runtime network error) is no configuration fault.
TEST(ImporterTest, NcclLogOfALaterFailureIsNoConfigFault) {
  TempDir dir;
  dir.Write("rank-3.log",
            "node3:7001:7001 [3] NCCL INFO ncclCommInitRank comm 0x1 rank 3 "
            "nranks 4 cudaDev 3 - Init START\n"
            "node3:7001:7001 [3] NCCL INFO ncclCommInitRank comm 0x1 rank 3 "
            "nranks 4 cudaDev 3 - Init COMPLETE\n"
            "node3:7001:7050 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : "
            "Got completion from peer with error 12\n"
            "node3:7001:7050 [3] NCCL INFO transport/net.cc:1031 -> 6\n");
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->faults.empty());
}

// NVIDIA/nccl#1730, post-mortem: Flight Recorder dumps of a broadcast
// group in which rank 2's completions stopped at 10 while it kept
// enqueuing (to 30) and the others completed up to 40.
TEST(ImporterTest, SilentDivergenceInFlightRecorderDumpsNamesTheStalledRank) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    const bool stalled = r == 2;
    const int completed = stalled ? 10 : 40;
    const int enqueued = stalled ? 30 : 42;
    json entries = json::array();
    for (int seq = completed - 1; seq <= enqueued; ++seq) {
      entries.push_back(
          {{"record_id", seq},
           {"pg_id", 0},
           {"process_group", {"0", "default_pg"}},
           {"collective_seq_id", seq},
           {"p2p_seq_id", 0},
           {"profiling_name", "nccl:broadcast"},
           {"input_sizes", {{4096}}},
           {"input_dtypes", {"Float"}},
           {"state", seq <= completed ? "completed" : "scheduled"},
           {"time_created_ns", 1000 * seq},
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
                   {{"last_enqueued_collective", enqueued},
                    {"last_started_collective", -1},
                    {"last_completed_collective", completed}}}}},
                {"entries", entries}};
    dir.Write(absl::StrCat("_dump_", r, ".json"), doc.dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{2});
  bool divergence = false;
  for (const v1::Fault& f : result->faults) {
    divergence |= absl::StrContains(f.summary(), "silent divergence");
  }
  EXPECT_TRUE(divergence);
}

// dlrover#1749, post-mortem: dumps taken while every rank paused (a
// checkpoint) with nothing pending say nothing is wrong.
TEST(ImporterTest, DumpsOfAnIdleJobAreNoHang) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    json entries = json::array();
    for (int seq = 18; seq <= 20; ++seq) {
      entries.push_back({{"record_id", seq},
                         {"pg_id", 0},
                         {"process_group", {"0", "default_pg"}},
                         {"collective_seq_id", seq},
                         {"p2p_seq_id", 0},
                         {"profiling_name", "nccl:all_reduce"},
                         {"input_sizes", {{4096}}},
                         {"input_dtypes", {"Float"}},
                         {"state", "completed"},
                         {"time_created_ns", 1000 * seq},
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
                   {{"last_enqueued_collective", 20},
                    {"last_started_collective", 20},
                    {"last_completed_collective", 20}}}}},
                {"entries", entries}};
    dir.Write(absl::StrCat("_dump_", r, ".json"), doc.dump());
  }
  auto job = ImportPaths({dir.path()}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->faults.empty()) << result->faults[0].summary();
}

}  // namespace
}  // namespace pitstop::importers
