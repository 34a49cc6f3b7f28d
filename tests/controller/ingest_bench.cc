// Benchmark driver (not a test) of issue #15's "ingest off the lock": how
// long Controller::SubmitAgentBatch() holds its caller ("accept") and how
// long until the batch is joined into detection state ("joined") while
// detection cycles run and SQLite syncs (synchronous=FULL, a real file)
// happen, side by side in one run in four modes and a floor: batches
// waiting for the controller's lock (ingest_off_lock=false); the ingest
// inbox with cycles and syncs still holding the lock (join_off_lock=false,
// round 5); the inbox with cycles that let the lock go between
// communicators and syncs without the lock, detectors under it
// (detect_off_lock=false, round 6); the same with the detectors on the
// engine's copy, without the lock (all true, the default). N ranks, 8 per host,
// in the engine benchmark's layout (a tensor-parallel communicator per host, a
// data-parallel one per GPU index); every host sends one batch per iteration
// with its ranks' summaries (rank 3 slow); a writer thread drains and uncordons
// a node every 20 ms (each an fsync; under the lock unless join_off_lock). Real
// clock: windows close every second and the detection cycle runs every 100 ms.
//
// --standby 1 (issue #30): one standby node registered (every agent with the
// "emulated" migration data plane) and, before the streams start, the last
// host's ranks migrated to it; the agents never answer (NullSink), so the
// migration stays PREPARING for the whole run (its prepare timeout is far
// longer). Its phase is read at the end of each mode and printed; a run whose
// migration left PREPARING fails (exit 1). --standby 2: the same migration
// started by policy ACT instead of by hand (job "bench" ACT, a CONFIRMED GPU
// fault of the last host in the store when the controller starts), so the
// fault stays CONFIRMED while its migration runs, as in production. --mode runs
// one mode only (lock, inbox, copy, floor), so the old and the new binary can
// be run in turns.
//
//   controller_ingest_bench --ranks 2048 --seconds 5 [--cycles 0] [--writer 0]
//       [--standby 0|1|2] [--mode all|lock|inbox|copy|floor]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

struct Result {
  std::vector<double> latency_ms;  // the sender's thread held (accept)
  std::vector<double> joined_ms;   // until the batch's completion ran
  uint64_t stream_waits = 0;       // a host's previous batch not yet joined
  uint64_t queued = 0;
  uint64_t cycles = 0;
  double cycle_ms_max = 0;
  uint64_t syncs = 0;
  uint64_t faults = 0;
  uint64_t errors = 0;
  uint64_t joined = 0;
  // --standby: the migration's id and state at the end of the mode.
  std::string migration;
  v1::MigrationState migration_state = v1::MIGRATION_STATE_UNSPECIFIED;
};

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// What runs beside the streams (--cycles 0 / --writer 0 leave one out, to
// tell their costs apart).
bool g_cycles = true;
bool g_writer = true;
// --standby: a standby node and a migration in progress (issue #30), 2:
// started by policy ACT.
int g_standby = 0;

// --standby 2: a CONFIRMED GPU fault of `host` in job "bench", stored
// before the controller opens the store (as after a restart).
void SeedHardwareFault(const std::string& db, const std::string& host) {
  absl::StatusOr<std::unique_ptr<FaultStore>> store = FaultStore::Open(db);
  if (!store.ok()) {
    std::fprintf(stderr, "%s: %s\n", db.c_str(),
                 store.status().ToString().c_str());
    std::exit(1);
  }
  v1::Fault f;
  f.set_fault_id("F1");
  f.set_job_id("bench");
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.set_summary(absl::StrCat("GPU 2 of ", host, " is slow (bench)"));
  v1::Suspect* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_GPU);
  s->set_host(host);
  s->set_gpu_index(2);
  bool ignored = false;
  if (absl::StatusOr<v1::Fault> st = (*store)->Upsert(f, &ignored); !st.ok()) {
    std::fprintf(stderr, "seeding F1: %s\n", st.status().ToString().c_str());
    std::exit(1);
  }
}

// --standby 2: job "bench" ACT; the next cycle migrates the seeded fault's
// host. The migration, or "" when none started within 10 s.
std::string WaitForPolicyMigration(Controller* core) {
  v1::JobPolicy act;
  act.set_mode(v1::POLICY_MODE_ACT);
  if (auto p = core->ingest().SetPolicy("bench", act); !p.ok()) {
    std::fprintf(stderr, "policy ACT: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  for (int i = 0; i < 200; ++i) {
    std::vector<v1::Migration> ms =
        core->migration().ListMigrations("", /*include_finished=*/true);
    if (!ms.empty()) return ms[0].migration_id();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

// Registers standby node "spare0" and migrates `leaver`'s ranks to it; the
// migration waits in PREPARING for answers that never come. Exits on error.
std::string StartMigration(Controller* core, NullSink* sink,
                           const std::string& leaver) {
  v1::NodeRegistration reg;
  reg.set_host("spare0");
  reg.set_agent_id("agent-spare0");
  reg.set_standby(true);
  reg.set_migration_data_plane("emulated");
  for (int g = 0; g < 8; ++g) reg.add_gpus()->set_index(g);
  absl::StatusOr<uint64_t> session = core->AgentConnected(reg, sink);
  if (!session.ok()) {
    std::fprintf(stderr, "standby: %s\n", session.status().ToString().c_str());
    std::exit(1);
  }
  if (g_standby == 2) {
    const std::string id = WaitForPolicyMigration(core);
    if (id.empty()) {
      std::fprintf(stderr, "policy ACT started no migration of %s\n",
                   leaver.c_str());
      std::exit(1);
    }
    return id;
  }
  v1::MigrateNodeRequest req;
  req.set_host(leaver);
  req.set_to("spare0");
  req.set_who("bench");
  absl::StatusOr<v1::Migration> m = core->migration().MigrateNode(req);
  if (!m.ok() || m->state() != v1::MIGRATION_STATE_PREPARING) {
    std::fprintf(stderr, "migration of %s: %s\n", leaver.c_str(),
                 m.ok() ? v1::MigrationState_Name(m->state()).c_str()
                        : m.status().ToString().c_str());
    std::exit(1);
  }
  return m->migration_id();
}

Result Run(bool off_lock, bool join_off_lock, bool detect_off_lock, bool quiet,
           int32_t ranks, int seconds, const std::string& db) {
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  const int32_t hosts = ranks / 8;
  auto host_of = [](int32_t g) { return absl::StrCat("node", g / 8); };
  if (g_standby == 2) SeedHardwareFault(db, host_of((hosts - 1) * 8));
  Controller::Options o;
  o.db_path = db;
  // `quiet`: no cycle and no writer, only the streams themselves (the
  // machine's floor: what scheduling alone costs a queued batch).
  o.cycle_period =
      quiet || !g_cycles ? absl::Hours(1) : absl::Milliseconds(100);
  o.ingest_off_lock = off_lock;
  (void)join_off_lock;  // durable writes never hold the lock now
  o.detect_off_lock = detect_off_lock;
  // Never reached in a run: the migration must stay in progress.
  o.migrate.prepare_timeout = absl::Hours(1);
  auto core_or = Controller::Create(o);
  if (!core_or.ok()) {
    std::fprintf(stderr, "%s\n", core_or.status().ToString().c_str());
    std::exit(1);
  }
  Controller* core = core_or->get();
  // The engine benchmark's layout (docs/benchmarks.md): per host one
  // tensor-parallel communicator of its 8 ranks, per GPU index one
  // data-parallel communicator across all hosts.
  NullSink sink;
  std::vector<uint64_t> sessions;
  for (int32_t h = 0; h < hosts; ++h) {
    v1::NodeRegistration reg;
    reg.set_host(host_of(h * 8));
    reg.set_agent_id(absl::StrCat("agent-", h));
    // Every mode the same, so --standby adds only the standby and the
    // migration: agents with a data plane, and the global ranks of each
    // host's tensor-parallel communicator (as the interposer reports them).
    reg.set_migration_data_plane("emulated");
    for (int g = 0; g < 8; ++g) reg.add_gpus()->set_index(g);
    sessions.push_back(*core->AgentConnected(reg, &sink));
  }
  // Membership first: each host sends its ranks' infos.
  for (int32_t h = 0; h < hosts; ++h) {
    v1::ConnectRequest b;
    for (int32_t g = h * 8; g < h * 8 + 8; ++g) {
      for (int dp = 0; dp < 2; ++dp) {
        v1::CommunicatorInfo* info = b.add_communicators();
        info->set_comm_hash(dp ? 0x2000000 + g % 8 : 0x1000000 + h);
        info->set_n_ranks(dp ? hosts : 8);
        info->set_rank(dp ? h : g % 8);
        info->set_job_id("bench");
        info->set_host(host_of(g));
        info->set_pid(10000 + g);
        info->set_cuda_device(g % 8);
        if (!dp) {
          for (int32_t r = 0; r < 8; ++r) info->add_global_ranks(h * 8 + r);
        }
      }
    }
    (void)core->AgentBatch(sessions[h], b);
  }
  core->Start();
  Result res;
  if (g_standby) {
    res.migration = StartMigration(core, &sink, host_of((hosts - 1) * 8));
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> syncs{0};
  std::thread writer([&] {
    const std::string host = host_of(0);
    while (!quiet && g_writer && !stop.load()) {
      (void)core->nodes().Drain(host, "bench");
      (void)core->nodes().Uncordon(host);
      syncs += 2;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  // Host h's batch of iteration `it`: 4 TP and 2 DP all-reduces of its 8
  // ranks (rank 3 is 60% slower: a straggler to store and update).
  auto Batch = [&](int32_t h, uint64_t it) {
    v1::ConnectRequest b;
    for (int32_t g = h * 8; g < h * 8 + 8; ++g) {
      for (int dp = 0; dp < 2; ++dp) {
        for (int op = 0; op < (dp ? 2 : 4); ++op) {
          v1::CollectiveSummary* sum = b.add_summaries();
          sum->set_comm_hash(dp ? 0x2000000 + g % 8 : 0x1000000 + h);
          sum->set_rank(dp ? h : g % 8);
          sum->set_global_rank(g);
          sum->set_seq_number(it * (dp ? 2 : 4) + op + 1);
          sum->set_func(v1::COLL_FUNC_ALL_REDUCE);
          sum->set_state(v1::OP_STATE_COMPLETED);
          sum->set_bytes(64 << 20);
          sum->set_kernel_duration_ns((g == 3 ? 1'600'000 : 1'000'000) +
                                      (g * 7919 + op * 104729) % 20'000);
          sum->set_pid(10000 + g);
        }
      }
    }
    return b;
  };
  // Agents send concurrently, each host once per second (batch_ms 1000),
  // spread over the second; kFeeders threads stand for the agents' streams.
  // Like a stream, a host sends its next batch only once the previous one
  // was joined (its completion ran); "accept" is how long the sender's
  // thread was held, "joined" how long until its completion ran.
  constexpr int kFeeders = 8;
  struct Slot {
    v1::ConnectRequest batch;
    std::chrono::steady_clock::time_point t0;
    std::vector<double> joined_ms;  // written by the completion
    uint64_t errors = 0;            // written by the completion
    std::atomic<bool> busy{false};
  };
  std::vector<Slot> slots(hosts);
  std::vector<std::vector<double>> lat(kFeeders);
  std::vector<uint64_t> stream_waits(kFeeders, 0);
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<std::thread> feeders;
  for (int t = 0; t < kFeeders; ++t) {
    feeders.emplace_back([&, t] {
      for (uint64_t it = 0; it < static_cast<uint64_t>(seconds); ++it) {
        for (int32_t h = t; h < hosts; h += kFeeders) {
          std::this_thread::sleep_until(
              t_start + std::chrono::microseconds(it * 1'000'000 +
                                                  h * 1'000'000LL / hosts));
          Slot& slot = slots[h];
          if (slot.busy.load(std::memory_order_acquire)) ++stream_waits[t];
          while (slot.busy.load(std::memory_order_acquire)) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
          slot.batch = Batch(h, it);
          slot.busy.store(true, std::memory_order_relaxed);
          const auto t0 = std::chrono::steady_clock::now();
          slot.t0 = t0;
          core->SubmitAgentBatch(
              sessions[h], &slot.batch, [&slot](absl::Status s) {
                if (!s.ok()) ++slot.errors;
                slot.joined_ms.push_back(
                    std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - slot.t0)
                        .count());
                slot.busy.store(false, std::memory_order_release);
              });
          lat[t].push_back(std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - t0)
                               .count());
        }
      }
    });
  }
  for (std::thread& f : feeders) f.join();
  for (Slot& slot : slots) {
    while (slot.busy.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    res.joined_ms.insert(res.joined_ms.end(), slot.joined_ms.begin(),
                         slot.joined_ms.end());
    res.errors += slot.errors;
  }
  for (int t = 0; t < kFeeders; ++t) {
    res.latency_ms.insert(res.latency_ms.end(), lat[t].begin(), lat[t].end());
    res.stream_waits += stream_waits[t];
  }
  stop = true;
  writer.join();
  if (g_standby) {
    absl::StatusOr<v1::Migration> m =
        core->migration().GetMigration(res.migration);
    if (m.ok()) res.migration_state = m->state();
  }
  core->Stop();
  const v1::ControllerStatus st = core->Status();
  res.queued = core->input_stats().batches_queued;
  res.cycles = 0;
  res.cycle_ms_max = st.last_detection_cycle_ms();
  res.syncs = syncs.load();
  res.faults = st.open_faults();
  res.joined = st.collectives_joined();
  return res;
}

struct Mode {
  const char* key;  // --mode
  const char* name;
  bool ingest_off_lock;
  bool join_off_lock;
  bool detect_off_lock;
  bool quiet;
};
constexpr Mode kModeList[] = {
    {"lock", "waits for the lock", false, false, false, false},
    {"inbox", "inbox; syncs off the lock, detectors under it", true, true,
     false, false},
    {"copy", "inbox; detectors on a copy, off the lock", true, true, true,
     false},
    {"floor", "floor: no cycle, no writer", true, true, true, true},
};
constexpr int kModes = sizeof(kModeList) / sizeof(kModeList[0]);

// One row of the table; false when --standby's migration did not stay in
// progress.
bool PrintRow(const Mode& m, const Result& r) {
  std::printf(
      "| %s | %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %llu | "
      "%llu | %llu | %llu | %llu | %.1f |\n",
      m.name, r.latency_ms.size(), Pct(r.latency_ms, 0.5),
      Pct(r.latency_ms, 0.99), Pct(r.latency_ms, 0.999), Pct(r.latency_ms, 1.0),
      Pct(r.joined_ms, 0.5), Pct(r.joined_ms, 0.99), Pct(r.joined_ms, 1.0),
      static_cast<unsigned long long>(r.queued),
      static_cast<unsigned long long>(r.syncs),
      static_cast<unsigned long long>(r.faults),
      static_cast<unsigned long long>(r.joined),
      static_cast<unsigned long long>(r.errors), r.cycle_ms_max);
  if (r.stream_waits > 0) {
    std::printf("  (%llu batches waited for their host's previous one)\n",
                static_cast<unsigned long long>(r.stream_waits));
  }
  if (!g_standby) return true;
  const bool in_progress = r.migration_state == v1::MIGRATION_STATE_PREPARING;
  std::printf(
      "  migration %s at the end: %s%s\n", r.migration.c_str(),
      v1::MigrationState_Name(r.migration_state).c_str(),
      in_progress ? " (in progress)" : " (NOT in progress: run invalid)");
  return in_progress;
}

int Main(int argc, char** argv) {
  int32_t ranks = 2048;
  int seconds = 5;
  std::string only = "all";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--cycles")) g_cycles = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--writer")) g_writer = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--standby")) g_standby = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--mode")) only = argv[i + 1];
  }
  const bool known_mode =
      only == "all" ||
      std::any_of(std::begin(kModeList), std::end(kModeList),
                  [&](const Mode& m) { return only == m.key; });
  if (ranks < 16 || ranks % 8 != 0 || seconds < 1 || !known_mode ||
      g_standby < 0 || g_standby > 2) {
    std::fprintf(stderr,
                 "usage: %s --ranks N (multiple of 8) --seconds S "
                 "[--cycles 0|1] [--writer 0|1] [--standby 0|1|2] "
                 "[--mode all|lock|inbox|copy|floor]\n",
                 argv[0]);
    return 2;
  }
  const std::string db =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("pitstop-ingest-bench-", getpid(), ".db"))
          .string();
  std::printf(
      "%d ranks (%d hosts, 8 ranks each), %d s per mode, cycle 100 ms, "
      "db %s (synchronous=FULL)%s\n",
      ranks, ranks / 8, seconds, db.c_str(),
      g_standby == 0   ? ""
      : g_standby == 1 ? ", a standby node and a migration in progress"
                       : ", a standby node and a migration in progress "
                         "(policy ACT)");
  std::printf(
      "| mode | batches | p50 ms | p99 ms | p99.9 ms | max ms | joined p50 ms "
      "| joined p99 ms | joined max ms | queued | syncs | open faults | "
      "collectives joined | errors | last cycle ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool valid = true;
  double p99[kModes] = {};
  double joined_p99[kModes] = {};
  for (int i = 0; i < kModes; ++i) {
    const Mode& m = kModeList[i];
    if (only != "all" && only != m.key) continue;
    Result r = Run(m.ingest_off_lock, m.join_off_lock, m.detect_off_lock,
                   m.quiet, ranks, seconds, db);
    p99[i] = Pct(r.latency_ms, 0.99);
    joined_p99[i] = Pct(r.joined_ms, 0.99);
    valid &= PrintRow(m, r);
  }
  if (only == "all") {
    std::printf("accept p99 ratio (waiting / detectors off the lock): %.1fx\n",
                p99[2] > 0 ? p99[0] / p99[2] : 0.0);
    std::printf(
        "joined p99 ratio (detectors under the lock / on a copy off the "
        "lock): %.1fx\n",
        joined_p99[2] > 0 ? joined_p99[1] / joined_p99[2] : 0.0);
  }
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  return valid ? 0 : 1;
}

}  // namespace
}  // namespace pitstop::controller

int main(int argc, char** argv) {
  return pitstop::controller::Main(argc, argv);
}
