// The fixture of the end-to-end migration tests (migration_test.cc,
// migration_shadow_test.cc): three ranks of the deterministic trainer and
// one joiner over the CPU NCCL backend, libnccl-profiler-pitstop.so
// LD_PRELOADed with PITSTOP_VIRTUALIZE_COMMS=1, the test playing agent and
// controller through its telemetry receiver.
#ifndef PITSTOP_TESTS_PLUGIN_MIGRATION_FIXTURE_H_
#define PITSTOP_TESTS_PLUGIN_MIGRATION_FIXTURE_H_

#include <stdlib.h>
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
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pitstop/nic_plan.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/nccl/rank_group.h"

namespace pitstop::testing {

using Directive = v1::RankMigrationDirective;

constexpr int kRanks = 3;
constexpr int kLeaver = 2;
constexpr int kSteps = 1500;
// Steps between the ranks' reported progress and the switch point: the
// directive's round trip (a few exporter ticks) must fit in it.
constexpr uint64_t kSwitchMargin = 300;
constexpr int kDeadlineS = 300;
constexpr absl::Duration kWait = absl::Seconds(120);

inline std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The "step S ms T" lines of a --step-log file.
inline std::vector<std::pair<int, double>> StepLog(const std::string& path) {
  std::vector<std::pair<int, double>> steps;
  std::istringstream in(Read(path));
  std::string word;
  int step = 0;
  double ms = 0;
  while (in >> word >> step >> word >> ms) steps.emplace_back(step, ms);
  return steps;
}

inline uint64_t HashOf(const ncclUniqueId& id) {
  return nicplan::CommHashOfUniqueId(id.internal, sizeof(id.internal));
}
inline uint64_t HashOf(const std::string& id) {
  return nicplan::CommHashOfUniqueId(id.data(), static_cast<int>(id.size()));
}
inline std::string Bytes(const ncclUniqueId& id) {
  return std::string(id.internal, sizeof(id.internal));
}

// The processes of one run: "r0", "r1", "r2" (the leaver) and "joiner".
struct Proc {
  std::string name;
  Directive::Role role;
  int rank;
};
const Proc kProcs[] = {{"r0", Directive::ROLE_STAYER, 0},
                       {"r1", Directive::ROLE_STAYER, 1},
                       {"r2", Directive::ROLE_LEAVER, kLeaver},
                       {"joiner", Directive::ROLE_JOINER, kLeaver}};

class MigrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-mig-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("PITSTOP_CPU_NCCL_STORE_DIR", dir_.c_str(), 1);
    auto r = emu::TelemetryReceiver::Start(dir_ + "/agent.sock");
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = std::move(*r);
    ASSERT_EQ(ncclGetUniqueId(&reference_world_), ncclSuccess);
    ASSERT_EQ(ncclGetUniqueId(&world_), ncclSuccess);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    new_world_ = Bytes(id);
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    transfer_ = Bytes(id);
  }
  void TearDown() override {
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

  // One process's command line (per-process variables through env(1)).
  std::vector<std::string> Argv(const std::string& tag, const Proc& p,
                                const std::string& hidden = "32") const {
    const std::string who = tag + "/" + p.name;
    std::vector<std::string> argv = Extra(prefix_, who);
    argv.insert(argv.end(), {"/usr/bin/env", absl::StrCat("RANK=", p.rank),
                             "PITSTOP_HOST=" + p.name});
    if (p.role == Directive::ROLE_JOINER) {
      argv.push_back("PITSTOP_MIGRATION_ROLE=joiner");
    }
    for (const std::string& e : Extra(env_, who)) argv.push_back(e);
    for (const char* a : {PITSTOP_DP_TRAINER, "--nranks", "3", "--batch", "8",
                          "--log-every", "0", "--join-timeout-ms", "200000"}) {
      argv.push_back(a);
    }
    const ncclUniqueId& id = tag == "ref" ? reference_world_ : world_;
    argv.insert(argv.end(),
                {"--rank", absl::StrCat(p.rank), "--unique-id",
                 UniqueIdHex(&id, sizeof(id)), "--steps", absl::StrCat(kSteps),
                 "--hidden", hidden, "--out", Path(tag, p.name, "bin"),
                 "--step-log", Path(tag, p.name, "steps")});
    if (p.role == Directive::ROLE_JOINER) argv.push_back("--join");
    for (const std::string& f : Extra(flags_, who)) argv.push_back(f);
    return argv;
  }
  static std::vector<std::string> Extra(
      const std::map<std::string, std::vector<std::string>>& m,
      const std::string& who) {
    auto it = m.find(who);
    return it == m.end() ? std::vector<std::string>{} : it->second;
  }
  std::string Path(const std::string& tag, const std::string& who,
                   const char* ext) const {
    return absl::StrCat(dir_, "/", tag, "-", who, ".", ext);
  }

  // The undisturbed 3-rank run the migrated one must match.
  std::string ReferenceWeights() {
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < kRanks; ++r) argv.push_back(Argv("ref", kProcs[r]));
    const auto results = RunRanks(kRanks, argv, Env(), dir_, kDeadlineS);
    EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
    return Read(Path("ref", "r0", "bin"));
  }

  // Starts the four processes on a thread (RunRanks waits for them).
  void Start(const std::string& tag, const std::string& joiner_hidden) {
    std::vector<std::vector<std::string>> argv;
    for (const Proc& p : kProcs) {
      argv.push_back(Argv(tag, p,
                          p.role == Directive::ROLE_JOINER
                              ? joiner_hidden
                              : std::string("32")));
    }
    first_stream_ = receiver_->Streams().size();  // not the reference's
    runner_ = std::thread([this, argv] {
      results_ = RunRanks(4, argv, Env(), dir_, kDeadlineS);
    });
  }
  void Finish() {
    if (runner_.joinable()) runner_.join();
  }

  // Stream index of each process (by its hello's host), once all said hello.
  bool FindStreams() {
    return receiver_->WaitFor(
        [&](const std::vector<emu::ReceivedStream>& streams) {
          index_.clear();
          for (size_t i = first_stream_; i < streams.size(); ++i) {
            for (const auto& b : streams[i].batches) {
              if (b.has_hello()) index_[b.hello().host()] = i;
            }
          }
          return index_.size() == 4;
        },
        kWait);
  }

  Directive Make(Directive::Phase phase, const Proc& p) const {
    Directive d;
    d.set_phase(phase);
    d.set_migration_id("M1");
    d.set_epoch(1);
    d.set_role(p.role);
    d.set_global_rank(p.rank);
    auto* c = d.add_comms();
    c->set_old_comm_hash(HashOf(world_));
    d.set_switch_comm_hash(HashOf(world_));
    if (phase == Directive::PHASE_MAKE_IDS) {
      d.set_make_comm_ids(true);  // the ids are what it answers
      return d;
    }
    c->set_new_comm_id(new_world_);
    if (p.role != Directive::ROLE_STAYER) d.set_transfer_comm_id(transfer_);
    return d;
  }
  // Sends `phase` to the named processes; false if a stream is closed.
  bool Send(Directive::Phase phase, const std::vector<std::string>& who,
            uint64_t switch_seq = 0, const std::string& reason = "") {
    bool all = true;
    for (const Proc& p : kProcs) {
      if (std::find(who.begin(), who.end(), p.name) == who.end()) continue;
      Directive d = Make(phase, p);
      d.set_switch_seq(switch_seq);
      d.set_reason(reason);
      all &= receiver_->SendDirective(index_[p.name], d);
    }
    return all;
  }
  // Waits until each named process answered `phase` `count` times; the
  // answers (the last of each) into *acks.
  bool WaitAcks(Directive::Phase phase, const std::vector<std::string>& who,
                size_t count,
                std::map<std::string, v1::RankMigrationAck>* acks) {
    return receiver_->WaitFor(
        [&](const std::vector<emu::ReceivedStream>& streams) {
          for (const std::string& name : who) {
            size_t n = 0;
            for (const auto& a : emu::AllMigrationAcks(streams[index_[name]])) {
              if (a.phase() != phase) continue;
              ++n;
              (*acks)[name] = a;
            }
            if (n < count) return false;
          }
          return true;
        },
        kWait);
  }
  // Every ack of every process, for failure messages.
  std::string AllAcks() {
    const auto streams = receiver_->Streams();
    std::string out;
    for (const auto& [who, i] : index_) {
      absl::StrAppend(&out, who, " (stream ", i, ", ",
                      streams[i].batches.size(), " batches):");
      for (const auto& a : emu::AllMigrationAcks(streams[i])) {
        absl::StrAppend(&out, " [phase ", a.phase(), " ok=", a.ok(), " '",
                        a.error(), "']");
      }
      absl::StrAppend(&out, "\n");
    }
    return out;
  }
  // INIT events of communicator `hash` on a process's stream.
  int Inits(const std::string& who, uint64_t hash) {
    const auto streams = receiver_->Streams();
    int n = 0;
    for (const auto& e : emu::AllCommEvents({streams[index_[who]]})) {
      n += e.kind() == v1::CommunicatorEvent::KIND_INIT &&
           e.info().comm_hash() == hash;
    }
    return n;
  }

  // PHASE_MAKE_IDS to the joiner (twice: the repeat must bring the same
  // ids, made once); its ids replace the test's for PREPARE.
  ::testing::AssertionResult MakeIdsAtJoiner() {
    std::map<std::string, v1::RankMigrationAck> made, again;
    Send(Directive::PHASE_MAKE_IDS, {"joiner"});
    if (!WaitAcks(Directive::PHASE_MAKE_IDS, {"joiner"}, 1, &made)) {
      return ::testing::AssertionFailure() << "MAKE_IDS:\n" << AllAcks();
    }
    Send(Directive::PHASE_MAKE_IDS, {"joiner"});
    if (!WaitAcks(Directive::PHASE_MAKE_IDS, {"joiner"}, 2, &again)) {
      return ::testing::AssertionFailure() << "MAKE_IDS again:\n" << AllAcks();
    }
    const v1::RankMigrationAck& a = made["joiner"];
    if (!a.ok() || a.made_comms_size() != 1 ||
        a.made_comms(0).old_comm_hash() != HashOf(world_) ||
        a.made_comms(0).new_comm_id().size() != 128 ||
        a.made_transfer_id().size() != 128 ||
        a.made_comms(0).new_comm_id() == a.made_transfer_id()) {
      return ::testing::AssertionFailure() << "MAKE_IDS: " << a.DebugString();
    }
    if (again["joiner"].SerializeAsString() != a.SerializeAsString()) {
      return ::testing::AssertionFailure()
             << "a repeated MAKE_IDS answered other ids:\n"
             << a.DebugString() << "\n"
             << again["joiner"].DebugString();
    }
    if (a.made_comms(0).new_comm_id() == new_world_ ||
        a.made_transfer_id() == transfer_) {
      return ::testing::AssertionFailure() << "the joiner's ids are the test's";
    }
    new_world_ = a.made_comms(0).new_comm_id();
    transfer_ = a.made_transfer_id();
    return ::testing::AssertionSuccess();
  }

  // Per process ("TAG/NAME", e.g. "mig/joiner"): words before env(1) (a
  // wrapper), NAME=VALUE variables, and trainer flags.
  std::map<std::string, std::vector<std::string>> prefix_, env_, flags_;
  std::string dir_;
  std::unique_ptr<emu::TelemetryReceiver> receiver_;
  // The undisturbed run's communicator and the migrated run's (a unique id
  // names one communicator only).
  ncclUniqueId reference_world_, world_;
  // The ids PREPARE carries: made here, or the joiner's (MakeIdsAtJoiner).
  std::string new_world_, transfer_;
  std::map<std::string, size_t> index_;
  size_t first_stream_ = 0;
  std::thread runner_;
  std::vector<RankResult> results_;
};

const std::vector<std::string> kAll = {"r0", "r1", "r2", "joiner"};
const std::vector<std::string> kStayers = {"r0", "r1"};

inline std::string AckText(
    const std::map<std::string, v1::RankMigrationAck>& acks) {
  std::string s;
  for (const auto& [who, a] : acks) {
    absl::StrAppend(&s, who, ": ok=", a.ok(), " progress=", a.progress_seq(),
                    " error='", a.error(), "'\n");
  }
  return s;
}

inline ::testing::AssertionResult AllOk(
    const std::map<std::string, v1::RankMigrationAck>& acks) {
  for (const auto& [who, a] : acks) {
    if (!a.ok()) return ::testing::AssertionFailure() << AckText(acks);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pitstop::testing

#endif  // PITSTOP_TESTS_PLUGIN_MIGRATION_FIXTURE_H_
