// The node-failure path of a migration (docs/migration.md "Two-phase
// rebuild and state transfer (library)", "Failure path"), end to end over
// real processes: three ranks of the deterministic trainer and one joiner
// over the CPU NCCL backend, libnccl-profiler-pitstop.so LD_PRELOADed with
// PITSTOP_VIRTUALIZE_COMMS=1. Rank 2 is SIGKILLed mid-run; ranks 0 and 1
// see their all-reduce fail and wait in pitstop_trainer_recover. The test
// is the agent and the controller: MAKE_IDS to the joiner, PREPARE with
// from_replica (rank 0 is the replica: it gets the transfer id), READY
// from all three with each stayer's failed step, SWITCH_AT at the lowest
// one (the step every rank redoes), SWITCHED, COMMIT. The job must end
// byte-identical to an undisturbed run.
//
// Nothing is timed: every wait is for an answer, and the ranks' deadline
// (RunRanks) kills whatever is stuck. The recovery's downtime is printed.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pitstop/nic_plan.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/nccl/rank_group.h"

namespace pitstop::testing {
namespace {

using Directive = v1::RankMigrationDirective;
using Acks = std::map<std::string, v1::RankMigrationAck>;

constexpr int kRanks = 3;
constexpr int kDead = 2;
constexpr int kSteps = 1500;
constexpr size_t kKillAfterSteps = 300;  // steps rank 2 logged first
constexpr int kDeadlineS = 300;
constexpr absl::Duration kWait = absl::Seconds(120);

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The "step S ms T" lines of a --step-log file.
std::vector<std::pair<int, double>> StepLog(const std::string& path) {
  std::vector<std::pair<int, double>> steps;
  std::istringstream in(Read(path));
  std::string word;
  int step = 0;
  double ms = 0;
  while (in >> word >> step >> word >> ms) steps.emplace_back(step, ms);
  return steps;
}

std::vector<int> Steps(const std::vector<std::pair<int, double>>& log) {
  std::vector<int> s;
  for (const auto& [step, ms] : log) s.push_back(step);
  return s;
}
std::vector<int> Range(int from, int to) {  // [from, to)
  std::vector<int> s;
  for (int i = from; i < to; ++i) s.push_back(i);
  return s;
}

uint64_t HashOf(const ncclUniqueId& id) {
  return nicplan::CommHashOfUniqueId(id.internal, sizeof(id.internal));
}

// "r2" is the rank that dies; the joiner takes its rank. r0 is the replica.
struct Proc {
  std::string name;
  Directive::Role role;
  int rank;
};
const Proc kProcs[] = {{"r0", Directive::ROLE_STAYER, 0},
                       {"r1", Directive::ROLE_STAYER, 1},
                       {"r2", Directive::ROLE_LEAVER, kDead},
                       {"joiner", Directive::ROLE_JOINER, kDead}};
const std::vector<std::string> kSurvivors = {"r0", "r1", "joiner"};
const std::vector<std::string> kStayers = {"r0", "r1"};
constexpr char kReplica[] = "r0";

class MigrationFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-fail-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("PITSTOP_CPU_NCCL_STORE_DIR", dir_.c_str(), 1);
    auto r = emu::TelemetryReceiver::Start(dir_ + "/agent.sock");
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = std::move(*r);
    ASSERT_EQ(ncclGetUniqueId(&reference_world_), ncclSuccess);
    ASSERT_EQ(ncclGetUniqueId(&world_), ncclSuccess);
  }
  void TearDown() override {
    if (runner_.joinable()) runner_.join();
    receiver_.reset();
    const std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }

  std::map<std::string, std::string> Env() const {
    const char* asan = std::getenv("ASAN_OPTIONS");
    return {{"LD_PRELOAD", PITSTOP_PLUGIN_PATH},
            {"ASAN_OPTIONS", std::string(asan != nullptr ? asan : "") +
                                 ":verify_asan_link_order=0"},
            {"PITSTOP_VIRTUALIZE_COMMS", "1"},
            {"PITSTOP_AGENT_SOCKET", dir_ + "/agent.sock"},
            {"PITSTOP_FLUSH_INTERVAL_MS", "2"},
            {"PITSTOP_CPU_NCCL_TIMEOUT_MS", "60000"}};
  }

  std::vector<std::string> Argv(const std::string& tag, const Proc& p) const {
    std::vector<std::string> argv = {"/usr/bin/env",
                                     absl::StrCat("RANK=", p.rank),
                                     "PITSTOP_HOST=" + p.name};
    if (p.role == Directive::ROLE_JOINER) {
      argv.push_back("PITSTOP_MIGRATION_ROLE=joiner");
    }
    for (const char* a : {PITSTOP_DP_TRAINER, "--nranks", "3", "--batch", "8",
                          "--log-every", "0", "--join-timeout-ms", "200000",
                          "--recover-timeout-ms", "200000"}) {
      argv.push_back(a);
    }
    const ncclUniqueId& id = tag == "ref" ? reference_world_ : world_;
    argv.insert(
        argv.end(),
        {"--rank", absl::StrCat(p.rank), "--unique-id",
         UniqueIdHex(&id, sizeof(id)), "--steps", absl::StrCat(kSteps), "--out",
         Path(tag, p.name, "bin"), "--step-log", Path(tag, p.name, "steps")});
    if (p.role == Directive::ROLE_JOINER) argv.push_back("--join");
    return argv;
  }
  std::string Path(const std::string& tag, const std::string& who,
                   const char* ext) const {
    return absl::StrCat(dir_, "/", tag, "-", who, ".", ext);
  }

  std::string ReferenceWeights() {
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < kRanks; ++r) argv.push_back(Argv("ref", kProcs[r]));
    const auto results = RunRanks(kRanks, argv, Env(), dir_, kDeadlineS);
    EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
    return Read(Path("ref", "r0", "bin"));
  }

  void Start(const std::string& tag) {
    std::vector<std::vector<std::string>> argv;
    for (const Proc& p : kProcs) argv.push_back(Argv(tag, p));
    first_stream_ = receiver_->Streams().size();  // not the reference's
    runner_ = std::thread([this, argv] {
      results_ = RunRanks(4, argv, Env(), dir_, kDeadlineS);
    });
  }

  // Stream index and pid of each process (its hello's host and pid).
  bool FindStreams() {
    return receiver_->WaitFor(
        [&](const std::vector<emu::ReceivedStream>& streams) {
          index_.clear();
          for (size_t i = first_stream_; i < streams.size(); ++i) {
            for (const auto& b : streams[i].batches) {
              if (!b.has_hello()) continue;
              index_[b.hello().host()] = i;
              pid_[b.hello().host()] = static_cast<pid_t>(b.hello().pid());
            }
          }
          return index_.size() == 4;
        },
        kWait);
  }

  // SIGKILL rank 2 once its step log shows kKillAfterSteps steps.
  ::testing::AssertionResult KillRank2(const std::string& tag) {
    const absl::Time deadline = absl::Now() + kWait;
    while (StepLog(Path(tag, "r2", "steps")).size() < kKillAfterSteps) {
      if (absl::Now() > deadline) {
        return ::testing::AssertionFailure() << "rank 2 never got far";
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (kill(pid_["r2"], SIGKILL) != 0) {
      return ::testing::AssertionFailure() << "kill " << pid_["r2"];
    }
    killed_at_ = absl::Now();
    return ::testing::AssertionSuccess();
  }

  Directive Make(Directive::Phase phase, const Proc& p) const {
    Directive d;
    d.set_phase(phase);
    d.set_migration_id("F1");
    d.set_epoch(1);
    d.set_role(p.role);
    d.set_global_rank(p.rank);
    d.set_from_replica(true);
    auto* c = d.add_comms();
    c->set_old_comm_hash(HashOf(world_));
    d.set_switch_comm_hash(HashOf(world_));
    if (phase == Directive::PHASE_MAKE_IDS) {
      d.set_make_comm_ids(true);
      return d;
    }
    c->set_new_comm_id(new_world_);
    // The joiner receives from transfer rank 0: the replica.
    if (p.role == Directive::ROLE_JOINER || p.name == kReplica) {
      d.set_transfer_comm_id(transfer_);
    }
    return d;
  }
  void Send(Directive::Phase phase, const std::vector<std::string>& who,
            uint64_t switch_seq = 0) {
    for (const Proc& p : kProcs) {
      if (std::find(who.begin(), who.end(), p.name) == who.end()) continue;
      Directive d = Make(phase, p);
      d.set_switch_seq(switch_seq);
      receiver_->SendDirective(index_[p.name], d);
    }
  }
  // Waits until each named process answered `phase`; the answers (all ok,
  // else false) into *acks.
  bool WaitOk(Directive::Phase phase, const std::vector<std::string>& who,
              Acks* acks) {
    const bool all = receiver_->WaitFor(
        [&](const std::vector<emu::ReceivedStream>& streams) {
          for (const std::string& name : who) {
            bool got = false;
            for (const auto& a : emu::AllMigrationAcks(streams[index_[name]])) {
              if (a.phase() != phase) continue;
              got = true;
              (*acks)[name] = a;
            }
            if (!got) return false;
          }
          return true;
        },
        kWait);
    if (!all) return false;
    for (const auto& [who, a] : *acks) {
      if (!a.ok()) return false;
    }
    return true;
  }
  std::string AckText(const Acks& acks) const {
    std::string s;
    for (const auto& [who, a] : acks) {
      absl::StrAppend(&s, who, ": phase ", a.phase(), " ok=", a.ok(),
                      " progress=", a.progress_seq(), " error='", a.error(),
                      "'\n");
    }
    return s;
  }

  // MAKE_IDS to the joiner: its library makes the new ids (real NCCL ids
  // hold their maker's address).
  ::testing::AssertionResult MakeIdsAtJoiner() {
    Acks made;
    Send(Directive::PHASE_MAKE_IDS, {"joiner"});
    if (!WaitOk(Directive::PHASE_MAKE_IDS, {"joiner"}, &made) ||
        made["joiner"].made_comms_size() != 1) {
      return ::testing::AssertionFailure() << "MAKE_IDS:\n" << AckText(made);
    }
    new_world_ = made["joiner"].made_comms(0).new_comm_id();
    transfer_ = made["joiner"].made_transfer_id();
    return ::testing::AssertionSuccess();
  }

  std::string dir_;
  std::unique_ptr<emu::TelemetryReceiver> receiver_;
  ncclUniqueId reference_world_, world_;
  std::string new_world_, transfer_;
  std::map<std::string, size_t> index_;
  std::map<std::string, pid_t> pid_;
  size_t first_stream_ = 0;
  absl::Time killed_at_;
  std::thread runner_;
  std::vector<RankResult> results_;
};

// Rank 2 dies; a replica's state brings the joiner in at the step every
// rank redoes, and the job ends as if nothing happened.
TEST_F(MigrationFailureTest, AReplicaBringsTheJoinerInAfterARankDies) {
  const std::string reference = ReferenceWeights();
  ASSERT_EQ(reference.size(), 577 * sizeof(float));
  Start("fail");
  Acks ready, switched, committed;
  uint64_t redo = 0;
  absl::Duration kill_to_switched;
  auto drive = [&]() -> ::testing::AssertionResult {
    if (!FindStreams()) return ::testing::AssertionFailure() << "no hellos";
    if (auto made = MakeIdsAtJoiner(); !made) return made;
    if (auto killed = KillRank2("fail"); !killed) return killed;
    Send(Directive::PHASE_PREPARE, kSurvivors);
    if (!WaitOk(Directive::PHASE_PREPARE, kSurvivors, &ready)) {
      return ::testing::AssertionFailure() << "READY:\n" << AckText(ready);
    }
    // Every rank redoes the lowest step that failed anywhere.
    redo = std::min(ready["r0"].progress_seq(), ready["r1"].progress_seq());
    Send(Directive::PHASE_SWITCH_AT, kSurvivors, redo);
    if (!WaitOk(Directive::PHASE_SWITCH_AT, kSurvivors, &switched)) {
      return ::testing::AssertionFailure() << "SWITCHED:\n"
                                           << AckText(switched);
    }
    kill_to_switched = absl::Now() - killed_at_;
    Send(Directive::PHASE_COMMIT, kSurvivors);
    if (!WaitOk(Directive::PHASE_COMMIT, kSurvivors, &committed)) {
      return ::testing::AssertionFailure() << "COMMIT:\n" << AckText(committed);
    }
    return ::testing::AssertionSuccess();
  };
  const auto driven = drive();
  runner_.join();
  ASSERT_TRUE(driven) << Describe(results_);
  ASSERT_EQ(results_.size(), 4u);
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(results_[i].status, 0) << Describe(results_);
  }
  EXPECT_TRUE(WIFSIGNALED(results_[2].status) &&
              WTERMSIG(results_[2].status) == SIGKILL)
      << Describe(results_);

  for (const char* who : {"r0", "r1", "joiner"}) {
    EXPECT_TRUE(Read(Path("fail", who, "bin")) == reference)
        << who << "'s weights differ from the undisturbed run";
  }
  // r0 and r1 log each step they completed, in the order run: [0, F) up
  // to the step F that failed there (never logged), then [redo, end). A
  // rank that completed step redo before the failure logs it twice.
  for (int r : {0, 1}) {
    const std::string& who = kProcs[r].name;
    const int failed = static_cast<int>(ready[who].progress_seq());
    EXPECT_TRUE(failed == static_cast<int>(redo) ||
                failed == static_cast<int>(redo) + 1)
        << who << " failed in step " << failed << ", redo " << redo;
    std::vector<int> want = Range(0, failed);
    for (int s : Range(static_cast<int>(redo), kSteps)) want.push_back(s);
    EXPECT_EQ(Steps(StepLog(Path("fail", who, "steps"))), want) << who;
    EXPECT_NE(results_[r].stderr_text.find(absl::StrCat(
                  "recovered: step ", failed, " failed, redoing step ", redo)),
              std::string::npos)
        << results_[r].stderr_text;
  }
  // Rank 2's place: the dead process ran [0, D), the joiner [redo, end);
  // together every step, the joiner starting exactly at the redo step.
  const auto dead = Steps(StepLog(Path("fail", "r2", "steps")));
  const auto joiner = Steps(StepLog(Path("fail", "joiner", "steps")));
  EXPECT_EQ(dead, Range(0, static_cast<int>(dead.size())));
  EXPECT_EQ(joiner, Range(static_cast<int>(redo), kSteps));
  // A step is logged after its all-reduce: killed in between, rank 2 took
  // part in step redo-1 without logging it.
  EXPECT_GE(dead.size() + 1, redo) << "steps neither rank 2 nor the joiner ran";
  EXPECT_NE(
      results_[3].stderr_text.find(absl::StrCat("joined before step ", redo)),
      std::string::npos)
      << results_[3].stderr_text;

  // Measured, not asserted: r0's redone step's time starts where its failed
  // step started (failure, recovery, transfer, redo), less the median step.
  const auto r0 = StepLog(Path("fail", "r0", "steps"));
  std::vector<double> sorted;
  for (const auto& [step, ms] : r0) sorted.push_back(ms);
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  double longest = 0;
  for (const auto& [step, ms] : r0) {
    if (step + 2 >= static_cast<int>(redo) &&
        step <= static_cast<int>(redo) + 2) {
      longest = std::max(longest, ms);
    }
  }
  std::printf(
      "recovery downtime: %.3f ms (longest step around the redo of step "
      "%llu: %.3f ms, median step %.3f ms; kill to SWITCHED seen by the "
      "controller: %.3f ms)\n",
      longest - median, static_cast<unsigned long long>(redo), longest, median,
      absl::ToDoubleMilliseconds(kill_to_switched));
}

}  // namespace
}  // namespace pitstop::testing
