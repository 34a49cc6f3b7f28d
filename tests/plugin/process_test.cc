// The library in real processes: clean finalize, exit without finalize,
// crash; LD_PRELOAD into an unchanged program over a fake libnccl.so.2;
// the interposer without NCCL; exported symbols.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <array>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/agent/shm_ingest_server.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

using ::testing::UnorderedElementsAreArray;

// ASan builds: our library is preloaded ahead of the ASan runtime, which
// ASan refuses by default; tell it that this order is intended.
std::string AsanOptionsForPreload() {
  const char* v = std::getenv("ASAN_OPTIONS");
  return std::string(v != nullptr ? v : "") + ":verify_asan_link_order=0";
}

// Generous flush bound: sanitizer builds connect slowly on a loaded machine.
constexpr char kFlushBoundMs[] = "20000";

std::vector<ReceivedStream> RunRank(const std::string& end, int* status,
                                    const std::string& linger_ms = "0") {
  const std::string sock = TempSocketPath("proc");
  auto receiver = TelemetryReceiver::Start(sock);
  EXPECT_TRUE(receiver.ok()) << receiver.status();
  if (!receiver.ok()) return {};
  *status = RunChild({PITSTOP_EMULATED_RANK, "--ops", "12", "--end", end,
                      "--linger-ms", linger_ms},
                     {{"PITSTOP_AGENT_SOCKET", sock},
                      {"PITSTOP_FINALIZE_TIMEOUT_MS", kFlushBoundMs},
                      {"RANK", "7"},
                      {"PITSTOP_HOST", "node-b"}});
  // The child is gone, but its last connection may not be accepted yet:
  // under load a stream can break and the library reconnects (what the
  // agent had not read is counted as dropped, the rest goes on the new
  // connection, goodbye included). Waiting for "the last stream ended"
  // returned while the last connection sat in the listen backlog: 11 of 12
  // ops and no goodbye. So a clean end waits for its goodbye, and every
  // end for every accepted connection to have ended.
  const v1::ProcessGoodbye::Reason reason =
      end == "finalize" ? v1::ProcessGoodbye::REASON_FINALIZE
                        : v1::ProcessGoodbye::REASON_EXIT;
  TelemetryReceiver* r = receiver->get();
  EXPECT_TRUE(r->WaitFor(
      [&](const std::vector<ReceivedStream>& s) {
        if (s.empty() || r->server()->connections() != 0) return false;
        for (const ReceivedStream& x : s) {
          if (!x.ended) return false;
        }
        return end == "crash" || HasGoodbye(s, reason);
      },
      absl::Seconds(30)));
  std::vector<ReceivedStream> streams = r->Streams();
  if (streams.size() > 1) {
    std::printf("the rank reconnected: %zu streams\n", streams.size());
  }
  return streams;
}

size_t Ops(const std::vector<ReceivedStream>& s) { return AllOps(s).size(); }

TEST(ProcessTest, FinalizeEndsStreamWithGoodbye) {
  int status = 0;
  const auto s = RunRank("finalize", &status);
  EXPECT_TRUE(ExitedWith(status, 0));
  EXPECT_EQ(Ops(s), 12u);
  EXPECT_TRUE(HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s[0].batches[0].hello().host(), "node-b");
  EXPECT_EQ(s[0].batches[0].hello().global_rank(), 7);
}

TEST(ProcessTest, ExitWithoutFinalizeFlushesAndSaysExit) {
  int status = 0;
  const auto s = RunRank("exit", &status);
  EXPECT_TRUE(ExitedWith(status, 0));
  EXPECT_EQ(Ops(s), 12u);
  EXPECT_TRUE(HasGoodbye(s, v1::ProcessGoodbye::REASON_EXIT));
  EXPECT_FALSE(HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE));
}

// Valid settings whose rings do not fit the address space: init fails
// cleanly (NCCL would go on without us) instead of std::terminate.
TEST(ProcessTest, RingsThatDoNotFitFailInitInsteadOfAborting) {
#if defined(PITSTOP_ASAN) || defined(PITSTOP_TSAN)
  GTEST_SKIP() << "SKIPPED: sanitizer runtimes reserve terabytes of address "
                  "space, so `ulimit -v` cannot be used; runs in the "
                  "default build";
#endif
  const std::string sock = TempSocketPath("oom");
  // 32 rings x 2^18 records: within the 1 GiB cap, beyond a 600 MB limit.
  const int status =
      RunChild({"/bin/sh", "-c", "ulimit -v 600000 && exec \"$0\" --ops 2",
                PITSTOP_EMULATED_RANK},
               {{"PITSTOP_AGENT_SOCKET", sock},
                {"PITSTOP_MAX_THREADS", "32"},
                {"PITSTOP_RING_CAPACITY", "262144"}});
  EXPECT_TRUE(ExitedWith(status, 3)) << "status " << status;  // 3: init failed
}

TEST(ProcessTest, CrashEndsStreamWithoutGoodbye) {
  int status = 0;
  // Linger so the exporter has opened its stream before the crash.
  const auto s = RunRank("crash", &status, "500");
  EXPECT_TRUE(ExitedWith(status, 0));
  EXPECT_FALSE(HasGoodbye(s, v1::ProcessGoodbye::REASON_EXIT));
  EXPECT_FALSE(HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE));
  EXPECT_LE(Ops(s), 12u);
}

TEST(InterposerTest, PreloadedIntoUnchangedProgram) {
  const std::string sock = TempSocketPath("pre");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const int status = RunChild({PITSTOP_INTERPOSER_DRIVER},
                              {{"LD_PRELOAD", BuiltPluginPath()},
                               {"ASAN_OPTIONS", AsanOptionsForPreload()},
                               {"-NCCL_PROFILER_PLUGIN", ""},
                               {"PITSTOP_AGENT_SOCKET", sock},
                               {"PITSTOP_FINALIZE_TIMEOUT_MS", kFlushBoundMs},
                               {"RANK", "3"}});
  ASSERT_TRUE(ExitedWith(status, 0)) << status;
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(30)));
  const auto s = (*receiver)->Streams();
  const auto& hello = s[0].batches[0].hello();
  EXPECT_EQ(hello.load_mode(), "both");
  EXPECT_EQ(hello.nccl_version(), 22809u);
  uint64_t world = 0, child = 0;
  bool child_aborted = false, world_finalized = false, world_device = false;
  for (const auto& ev : AllCommEvents(s)) {
    const auto& info = ev.info();
    EXPECT_EQ(info.source(), v1::CommunicatorInfo::SOURCE_INTERPOSER)
        << ev.DebugString();
    if (ev.kind() == v1::CommunicatorEvent::KIND_INIT && info.n_ranks() == 8) {
      world = info.comm_hash();
      EXPECT_EQ(info.parent_comm_hash(), 0u);
      ASSERT_EQ(info.global_ranks_size(), 8);
      EXPECT_EQ(info.global_ranks(3), 3);
    }
    if (ev.kind() == v1::CommunicatorEvent::KIND_INIT && info.n_ranks() == 4) {
      child = info.comm_hash();
      EXPECT_EQ(info.parent_comm_hash(), world);
    }
    if (ev.kind() == v1::CommunicatorEvent::KIND_UPDATE &&
        info.comm_hash() == world) {
      world_device = info.cuda_device() == 3;  // fake: rank % 8
    }
    if (ev.kind() == v1::CommunicatorEvent::KIND_ABORT) {
      child_aborted = info.comm_hash() == child;
    }
    if (ev.kind() == v1::CommunicatorEvent::KIND_FINALIZE) {
      world_finalized |= info.comm_hash() == world;
      EXPECT_NE(info.comm_hash(), child) << "abort is not overridden";
    }
  }
  EXPECT_NE(world, 0u);
  EXPECT_NE(child, 0u);
  EXPECT_TRUE(world_device);
  EXPECT_TRUE(child_aborted);
  EXPECT_TRUE(world_finalized);
}

// NVIDIA/nccl#426's shape: ncclCommInitRank fails (a transport error at
// creation). The process has no communicator, yet the agent hears the
// call, its result and NCCL's last error, then an orderly exit.
TEST(InterposerTest, FailedCommCreationIsReportedWithNcclsError) {
  const std::string sock = TempSocketPath("fail");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const int status = RunChild({PITSTOP_INTERPOSER_DRIVER, "fail"},
                              {{"LD_PRELOAD", BuiltPluginPath()},
                               {"ASAN_OPTIONS", AsanOptionsForPreload()},
                               {"-NCCL_PROFILER_PLUGIN", ""},
                               {"PITSTOP_AGENT_SOCKET", sock},
                               {"PITSTOP_FINALIZE_TIMEOUT_MS", kFlushBoundMs},
                               {"RANK", "3"}});
  ASSERT_TRUE(ExitedWith(status, 3)) << status;
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_EXIT);
      },
      absl::Seconds(30)));
  std::vector<v1::CommInitFailure> failures;
  int32_t hello_rank = -2;
  for (const ReceivedStream& st : (*receiver)->Streams()) {
    for (const v1::StreamTelemetryRequest& b : st.batches) {
      if (b.has_hello()) hello_rank = b.hello().global_rank();
      for (const v1::CommInitFailure& f : b.init_failures()) {
        failures.push_back(f);
      }
    }
  }
  EXPECT_EQ(hello_rank, 3);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].call(), "ncclCommInitRank");
  EXPECT_EQ(failures[0].result(), 2);
  EXPECT_EQ(failures[0].error(), "NET/IB : No device found.");
  EXPECT_EQ(failures[0].n_ranks(), 8);
  EXPECT_EQ(failures[0].rank(), 3);
  EXPECT_GT(failures[0].time_cpu_ns(), 0u);
}

TEST(InterposerTest, UserChoiceOfProfilerIsKept) {
  const std::string sock = TempSocketPath("own");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  // The user picked another profiler (absent here): NCCL must not load us,
  // and the forwarded API still works.
  const int status = RunChild({PITSTOP_INTERPOSER_DRIVER},
                              {{"LD_PRELOAD", BuiltPluginPath()},
                               {"ASAN_OPTIONS", AsanOptionsForPreload()},
                               {"NCCL_PROFILER_PLUGIN", "someone-else"},
                               {"PITSTOP_AGENT_SOCKET", sock}});
  EXPECT_TRUE(ExitedWith(status, 0)) << status;
  EXPECT_TRUE((*receiver)->Streams().empty());
}

TEST(InterposerTest, WithoutNcclReturnsAnErrorInsteadOfCrashing) {
  ASSERT_EQ(dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY), nullptr)
      << "this test process must not have NCCL loaded";
  void* lib = dlopen(BuiltPluginPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using InitRank = int (*)(void**, int, std::array<char, 128>, int);
  auto init = reinterpret_cast<InitRank>(dlsym(lib, "ncclCommInitRank"));
  ASSERT_NE(init, nullptr);
  void* comm = nullptr;
  EXPECT_EQ(init(&comm, 2, {}, 0), 2);  // ncclSystemError
  EXPECT_EQ(comm, nullptr);
  using Destroy = int (*)(void*);
  auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "ncclCommDestroy"));
  ASSERT_NE(destroy, nullptr);
  EXPECT_EQ(destroy(nullptr), 2);
}

// Every interposed entry point and the NCCL release that has it (the
// communicator-management functions, then those that take a communicator:
// communicator virtualisation must see them all).
struct Interposed {
  const char* name;
  int since;  // NCCL version code
};
const Interposed kInterposed[] = {{"ncclCommInitRank", 0},
                                  {"ncclCommInitRankConfig", 0},
                                  {"ncclCommInitAll", 0},
                                  {"ncclCommInitRankScalable", 22300},
                                  {"ncclCommSplit", 0},
                                  {"ncclCommShrink", 22700},
                                  {"ncclCommFinalize", 0},
                                  {"ncclCommDestroy", 0},
                                  {"ncclCommAbort", 0},
                                  {"ncclCommRevoke", 22807},
                                  {"ncclAllReduce", 0},
                                  {"ncclAllGather", 0},
                                  {"ncclReduceScatter", 0},
                                  {"ncclBroadcast", 0},
                                  {"ncclBcast", 0},
                                  {"ncclReduce", 0},
                                  {"ncclAlltoAll", 22800},
                                  {"ncclGather", 22800},
                                  {"ncclScatter", 22800},
                                  {"ncclSend", 0},
                                  {"ncclRecv", 0},
                                  {"ncclGroupStart", 0},
                                  {"ncclGroupEnd", 0},
                                  {"ncclGroupSimulateEnd", 22200},
                                  {"ncclCommCount", 0},
                                  {"ncclCommUserRank", 0},
                                  {"ncclCommCuDevice", 0},
                                  {"ncclCommGetAsyncError", 0},
                                  {"ncclGetLastError", 0},
                                  {"ncclRedOpCreatePreMulSum", 0},
                                  {"ncclRedOpDestroy", 0},
                                  {"ncclCommRegister", 0},
                                  {"ncclCommDeregister", 0},
                                  {"ncclCommWindowRegister", 22700},
                                  {"ncclCommWindowDeregister", 22700}};

TEST(InterposerTest, RealLibncclHasTheForwardedEntryPoints) {
  void* nccl = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (nccl == nullptr) {
    GTEST_SKIP() << "SKIPPED LOUDLY: libnccl.so.2 is not installed on this "
                    "machine, so the interposer cannot be checked against the "
                    "real NCCL symbols ("
                 << dlerror() << ")";
  }
  int version = 0;
  auto get_version =
      reinterpret_cast<int (*)(int*)>(dlsym(nccl, "ncclGetVersion"));
  ASSERT_NE(get_version, nullptr);
  get_version(&version);
  for (const Interposed& e : kInterposed) {
    if (version < e.since) continue;
    const std::string n = e.name;
    EXPECT_NE(dlsym(nccl, ("p" + n).c_str()), nullptr) << "p" << n;
    EXPECT_NE(dlsym(nccl, e.name), nullptr) << e.name;
  }
}

TEST(SymbolsTest, OnlyNcclSymbolsAreExported) {
  const std::string cmd =
      "nm -D --defined-only --format=posix " + BuiltPluginPath();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::set<std::string> names;
  char line[4096];
  while (fgets(line, sizeof(line), p) != nullptr) {
    std::string s(line);
    names.insert(s.substr(0, s.find(' ')));
  }
  ASSERT_EQ(pclose(p), 0) << cmd;
  std::vector<std::string> want = {"ncclProfiler_v3", "ncclProfiler_v4",
                                   "ncclProfiler_v5", "ncclProfiler_v6"};
  for (const Interposed& e : kInterposed) want.push_back(e.name);
  // The trainer C API (include/pitstop/trainer.h).
  for (const char* name :
       {"pitstop_trainer_register_state", "pitstop_trainer_poll",
        "pitstop_trainer_join", "pitstop_trainer_recover",
        "pitstop_trainer_resume", "pitstop_trainer_last_error"}) {
    want.push_back(name);
  }
  EXPECT_THAT(names, UnorderedElementsAreArray(want));
}

}  // namespace
}  // namespace pitstop::emu
