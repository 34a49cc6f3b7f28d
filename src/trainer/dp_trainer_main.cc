// pitstop-dp-trainer: the deterministic data-parallel trainer
// (src/trainer/dp_trainer.h) as one rank per process, over whichever
// libnccl.so.2 the loader finds (the CPU backend from this tree by default;
// LD_PRELOAD the pitstop library to watch it).
//
//   ID=$(pitstop-dp-trainer --make-unique-id)
//   for r in 0 1 2 3; do
//     pitstop-dp-trainer --rank $r --nranks 4 --unique-id $ID --out w$r.bin &
//   done; wait
//
// Prints one line per --log-every steps ("step S loss L ms T") and at the end
// "final steps=N fingerprint=HEX" (FNV-1a of the weights' bytes). --out
// writes the final weights as raw little-endian float32. --save-at S --save F
// checkpoints the state after step S-1; --resume F continues a new job from
// it, ending bit-identical to an uninterrupted run. --step-log F appends
// "step S ms T" for every step this process ran.
//
// Migration (docs/migration.md, with the pitstop library preloaded and
// PITSTOP_VIRTUALIZE_COMMS=1): the weights and the next step are the state
// a joiner needs; a rank the migration moves away prints "left before step
// S" and exits 0 without --out. --join (a process started with
// PITSTOP_MIGRATION_ROLE=joiner and the job's original --unique-id and
// --rank) waits for that state and trains from there. When an all-reduce
// fails (a peer died), the rank waits up to --recover-timeout-ms for the
// library's recovery, redoes the step it names on the new communicator and
// prints "recovered: step S failed, redoing step R"; --step-log then lists
// the completed steps in the order run (a step this rank completed before
// the failure and redid appears twice, the failed one once, when redone).
//
// --shadow-steps N (with --join, PITSTOP_SHADOW_DIR naming a stayer's
// PITSTOP_SHADOW_RECORD directory) first runs N steps in the sandbox and
// prints "shadow: N steps in the sandbox (T ms)", or why it skipped them.
//
// Exit status: 0 done (or left), 1 a collective, the communicator, a join
// or a checkpoint write failed, 2 bad usage or an unreadable checkpoint.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "pitstop/trainer.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "src/trainer/dp_trainer.h"

namespace {

std::string Hex(const ncclUniqueId& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

bool ParseHex(const std::string& hex, ncclUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// Joiner: the state arrives into buffers shaped like the job's (the
// leaver's); Train then continues from the step it says.
bool JoinMigration(int rank, const pitstop::trainer::TrainOptions& o,
                   int64_t timeout_ms, pitstop::trainer::TrainState* start) {
  start->params = pitstop::trainer::InitialParameters(o.shape, o.seed);
  uint64_t next_step = 0;
  pitstop_try_register_state("params", start->params.data(),
                             start->params.size() * sizeof(float));
  pitstop_try_register_state("next_step", &next_step, sizeof(next_step));
  uint64_t first = 0;
  if (pitstop_try_join(&first, timeout_ms) != 0) {
    std::fprintf(stderr, "pitstop-dp-trainer: rank %d: join failed: %s\n", rank,
                 pitstop_try_last_error());
    return false;
  }
  start->next_step = static_cast<int>(first);
  std::fprintf(stderr, "pitstop-dp-trainer: rank %d joined before step %d\n",
               rank, start->next_step);
  return true;
}

// --shadow-steps: the joiner warms up (allocations, caches) on its sandbox
// communicator, whose all-reduces pitstop answers from a stayer's recorded
// outputs (PITSTOP_SHADOW_DIR), then throws that state away: the join
// brings the leaver's. A warm-up that cannot run is skipped with a message,
// never fatal: the migration does not need it.
void RunShadowSteps(ncclComm_t comm, int rank, pitstop::trainer::TrainOptions o,
                    int steps) {
  if (dlsym(RTLD_DEFAULT, "pitstop_trainer_join") == nullptr) {
    std::fprintf(stderr,
                 "pitstop-dp-trainer: rank %d: shadow: skipped: the pitstop "
                 "library is not loaded\n",
                 rank);
    return;
  }
  o.steps = steps;
  o.sandbox = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto result = pitstop::trainer::Train(comm, o, {}, nullptr);
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  if (!result.ok()) {
    std::fprintf(stderr,
                 "pitstop-dp-trainer: rank %d: shadow: skipped after %.3f ms "
                 "(joining without warm-up): %s\n",
                 rank, ms, result.status().ToString().c_str());
    return;
  }
  // The fingerprint lets a test check the sandbox computed what the job
  // did in those steps (every replica holds the same weights).
  std::fprintf(stderr,
               "pitstop-dp-trainer: rank %d: shadow: %d steps in the sandbox "
               "(%.3f ms), fingerprint=%016llx\n",
               rank, steps, ms,
               static_cast<unsigned long long>(
                   pitstop::trainer::Fingerprint(result->params)));
}

struct Args {
  bool make_id = false;
  int rank = -1, nranks = 0, log_every = 10;
  std::string id_hex, out, resume, save;
  int save_at = -1;
  bool join = false;
  int64_t join_timeout_ms = 120000;
  int shadow_steps = 0;
  std::string step_log;
  pitstop::trainer::TrainOptions o;
};

void AddFlags(CLI::App* app, Args* a) {
  pitstop::trainer::TrainOptions& o = a->o;
  app->add_flag("--make-unique-id", a->make_id,
                "print a new unique id (hex) for --unique-id and exit");
  app->add_option("--rank", a->rank, "this process's rank")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--nranks", a->nranks, "number of ranks")
      ->check(CLI::PositiveNumber);
  app->add_option("--unique-id", a->id_hex, "unique id from --make-unique-id");
  app->add_option("--steps", o.steps, "SGD steps")->capture_default_str();
  app->add_option("--seed", o.seed, "data and initialisation seed")
      ->capture_default_str();
  app->add_option("--batch", o.batch_per_rank, "samples per rank per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--hidden", o.shape.hidden, "hidden units")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--lr", o.learning_rate, "learning rate")
      ->capture_default_str();
  app->add_option("--log-every", a->log_every,
                  "print a step line every N steps (0: none)")
      ->capture_default_str();
  app->add_option("--out", a->out, "write the final weights (float32) here");
  app->add_option("--save", a->save, "checkpoint file written at --save-at");
  app->add_option("--save-at", a->save_at,
                  "write --save once step N-1 is done (state: next step N)");
  app->add_option(
      "--resume", a->resume,
      "start from this checkpoint (its next step) instead of step 0");
  app->add_option("--step-log", a->step_log,
                  "append 'step S ms T' for every step run to this file");
  app->add_flag("--join", a->join,
                "migration joiner (PITSTOP_MIGRATION_ROLE=joiner): wait for "
                "the leaver's state, then train from its step");
  app->add_option("--shadow-steps", a->shadow_steps,
                  "with --join: first run N steps in the sandbox, answered "
                  "from recorded collectives (PITSTOP_SHADOW_DIR), and "
                  "discard them")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--join-timeout-ms", a->join_timeout_ms,
                  "how long --join waits for the state")
      ->capture_default_str();
  app->add_option("--recover-timeout-ms", o.recover_timeout_ms,
                  "after a failed all-reduce, how long to wait for pitstop's "
                  "recovery migration")
      ->capture_default_str();
  app->add_option("--compute-ms", o.compute_ms,
                  "emulated accelerator time per step (ms), slept before the "
                  "all-reduce; never changes the weights")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--slow-from-step", o.slow_from_step,
                  "a degraded GPU: from this step on, --compute-ms x "
                  "--slow-factor (-1: never)")
      ->capture_default_str();
  app->add_option("--slow-factor", o.slow_factor,
                  "how much slower the degraded GPU computes")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
}

int PrintUniqueId() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "pitstop-dp-trainer: ncclGetUniqueId: %s\n",
                 ncclGetLastError(nullptr));
    return 1;
  }
  std::printf("%s\n", Hex(id).c_str());
  return 0;
}

// 0, or the exit status of bad usage (2), said why.
int CheckUsage(const Args& a, ncclUniqueId* id) {
  if (a.rank < 0 || a.nranks < 1 || a.rank >= a.nranks ||
      !ParseHex(a.id_hex, id)) {
    std::fprintf(stderr,
                 "pitstop-dp-trainer: need --rank R --nranks N (R < N) and "
                 "--unique-id (256 hex digits from --make-unique-id)\n");
    return 2;
  }
  if (a.shadow_steps > 0 && !a.join) {
    std::fprintf(stderr, "pitstop-dp-trainer: --shadow-steps needs --join\n");
    return 2;
  }
  if ((a.save_at >= 0) != !a.save.empty()) {
    std::fprintf(stderr,
                 "pitstop-dp-trainer: --save and --save-at go together\n");
    return 2;
  }
  return 0;
}

// What each finished step does: the migration error, the step log, the
// checkpoint at --save-at and the step line.
struct StepPrinter {
  const Args& a;
  FILE* log = nullptr;
  bool save_failed = false;

  void operator()(const pitstop::trainer::StepReport& s) {
    if (!s.migration_error.empty()) {
      std::fprintf(stderr,
                   "pitstop-dp-trainer: rank %d: migration failed before "
                   "step %d: %s\n",
                   a.rank, s.step, s.migration_error.c_str());
    }
    if (log != nullptr) {
      std::fprintf(log, "step %d ms %.3f\n", s.step,
                   static_cast<double>(s.step_ns) / 1e6);
      std::fflush(log);
    }
    if (s.step + 1 == a.save_at && s.params != nullptr) {
      const absl::Status st =
          pitstop::trainer::SaveCheckpoint(a.save, a.o, {a.save_at, *s.params});
      if (!st.ok()) {
        std::fprintf(stderr, "pitstop-dp-trainer: %s\n", st.ToString().c_str());
        save_failed = true;
      }
    }
    if (a.log_every > 0 &&
        (s.step % a.log_every == 0 || s.step + 1 == a.o.steps)) {
      std::printf("step %d loss %.6f ms %.3f\n", s.step, s.loss,
                  static_cast<double>(s.step_ns) / 1e6);
      std::fflush(stdout);
    }
  }
};

// The final line and --out; the exit status.
int Finish(const Args& a, const std::vector<float>& params, bool save_failed) {
  if (save_failed) return 1;
  std::printf(
      "final steps=%d fingerprint=%016llx\n", a.o.steps,
      static_cast<unsigned long long>(pitstop::trainer::Fingerprint(params)));
  if (a.out.empty()) return 0;
  std::ofstream f(a.out, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(params.data()),
          static_cast<std::streamsize>(params.size() * sizeof(float)));
  if (!f) {
    std::fprintf(stderr, "pitstop-dp-trainer: cannot write %s\n",
                 a.out.c_str());
    return 1;
  }
  return 0;
}

// Trains this rank on `comm` from `start`; the exit status.
int Train(const Args& a, ncclComm_t comm, pitstop::trainer::TrainState start) {
  if (a.shadow_steps > 0) RunShadowSteps(comm, a.rank, a.o, a.shadow_steps);
  if (a.join && !JoinMigration(a.rank, a.o, a.join_timeout_ms, &start)) {
    ncclCommDestroy(comm);
    return 1;
  }
  StepPrinter printer{a};
  if (!a.step_log.empty() &&
      (printer.log = std::fopen(a.step_log.c_str(), "a")) == nullptr) {
    std::fprintf(stderr, "pitstop-dp-trainer: cannot open %s\n",
                 a.step_log.c_str());
    return 2;
  }
  auto result = pitstop::trainer::Train(
      comm, a.o, start,
      [&printer](const pitstop::trainer::StepReport& s) { printer(s); });
  if (printer.log != nullptr) std::fclose(printer.log);
  if (!result.ok()) {
    std::fprintf(stderr, "pitstop-dp-trainer: rank %d: %s\n", a.rank,
                 result.status().ToString().c_str());
    ncclCommAbort(comm);
    return 1;
  }
  // Also after leaving: the old communicator's other members free it too.
  ncclCommFinalize(comm);
  ncclCommDestroy(comm);
  if (result->left) {
    std::printf("left before step %d\n", result->next_step);
    return 0;
  }
  return Finish(a, result->params, printer.save_failed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "pitstop-dp-trainer: deterministic data-parallel SGD of a small MLP on "
      "synthetic data, gradients all-reduced through NCCL; same arguments, "
      "same rank count -> bit-identical final weights",
      "pitstop-dp-trainer");
  Args a;
  AddFlags(&app, &a);
  CLI11_PARSE(app, argc, argv);
  if (a.make_id) return PrintUniqueId();
  ncclUniqueId id;
  if (int usage = CheckUsage(a, &id); usage != 0) return usage;
  pitstop::trainer::TrainState start;
  if (!a.resume.empty()) {
    auto loaded = pitstop::trainer::LoadCheckpoint(a.resume, a.o);
    if (!loaded.ok()) {
      std::fprintf(stderr, "pitstop-dp-trainer: %s\n",
                   loaded.status().ToString().c_str());
      return 2;
    }
    start = std::move(*loaded);
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, a.nranks, id, a.rank);
      r != ncclSuccess) {
    std::fprintf(stderr,
                 "pitstop-dp-trainer: rank %d: ncclCommInitRank: %s: %s\n",
                 a.rank, ncclGetErrorString(r), ncclGetLastError(nullptr));
    return 1;
  }
  return Train(a, comm, std::move(start));
}
