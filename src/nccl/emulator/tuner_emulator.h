// NCCL tuner emulator: loads a tuner plugin (libnccl-tuner-pitstop.so) the
// way a given NCCL release does and calls it the way NCCL's collective
// planning does, without a GPU.
//
// What it does like NCCL (facts: ../shared/docs/nccl-plugin-abi.md sec. 15
// and sec. 2.1):
//   - resolves NCCL_TUNER_PLUGIN: the value verbatim, then
//     libnccl-tuner-<value>.so (unset: libnccl-tuner.so); dlopen
//     RTLD_NOW|RTLD_LOCAL;
//   - probes ncclTunerPlugin_vN newest first, as far as the emulated
//     release knows: 2.24-2.27 from v4, 2.28-2.29 from v5, 2.30 from v6;
//   - per communicator calls `init` with the version's arguments (v4: no
//     communicator id), `getCollInfo` with a float[7][3] cost table passed
//     as float** and *nChannels = 0, then picks the cheapest cell that is
//     not -1 (as topoGetAlgoInfo does), and `finalize` / `destroy`.
//
//   auto tuner = TunerEmulator::Create({.plugin = "pitstop",
//                                       .nccl_version = 22809});
//   auto comm = (*tuner)->InitComm({.comm_hash = 0xabc, .n_ranks = 16,
//                                   .n_nodes = 2});
//   CollDecision d = (*comm)->GetCollInfo(kAllReduce, 1 << 30,
//                                         DefaultCostTable());
//   // d.algo, d.proto, d.n_channels (0: NCCL decides), d.costs after
//   (*comm)->Finalize();
//
// Thread safety: TunerComm calls are not synchronised (NCCL plans one
// communicator's collectives at a time); different comms may be used from
// different threads. Destroy TunerComms before their TunerEmulator.
#ifndef PITSTOP_SRC_NCCL_EMULATOR_TUNER_EMULATOR_H_
#define PITSTOP_SRC_NCCL_EMULATOR_TUNER_EMULATOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pitstop::emu {

inline constexpr int kTunerAlgos = 7;   // TREE, RING, COLLNET_*, NVLS*, PAT
inline constexpr int kTunerProtos = 3;  // LL, LL128, SIMPLE
inline constexpr int kFuncAllReduce = 4;
inline constexpr int kFuncAllGather = 2;
using CostTable = std::array<std::array<float, kTunerProtos>, kTunerAlgos>;

// A plausible table for a large all-reduce on a multi-node job: every
// algorithm NCCL offers on such a job priced, TREE/SIMPLE cheapest, the
// rest -1 (not available).
CostTable DefaultCostTable();

struct TunerLoadOptions {
  // NCCL_TUNER_PLUGIN-style value: "pitstop" -> tries "pitstop", then
  // "libnccl-tuner-pitstop.so" through the loader's search path; or a path.
  // Empty: $NCCL_TUNER_PLUGIN, else libnccl-tuner.so.
  std::string plugin{};
  // The NCCL release to act as (code major*10000 + minor*100 + patch):
  // decides which symbols are probed.
  int nccl_version = 23007;
};

// Tuner ABI versions a release looks up, newest first (never below v2).
// Empty for releases without the tuner interface this emulator knows
// (before 2.24) or unknown ones (after 2.30).
std::vector<int> TunerVersionsOf(int nccl_version);

// Absolute path of the libnccl-tuner-pitstop.so built with this tree.
std::string BuiltTunerPath();

struct TunerCommSpec {
  uint64_t comm_hash = 0;  // v5+: commId
  size_t n_ranks = 1;
  size_t n_nodes = 1;
};

struct CollDecision {
  int result = 0;      // getCollInfo's ncclResult_t
  CostTable costs{};   // the table after the plugin
  int n_channels = 0;  // what the plugin left in *nChannels (0: NCCL's)
  int algo = -1;       // the cheapest cell not -1, as NCCL picks
  int proto = -1;
};

class TunerEmulator;

class TunerComm {
 public:
  ~TunerComm();  // Finalize() if not done
  TunerComm(const TunerComm&) = delete;
  TunerComm& operator=(const TunerComm&) = delete;

  CollDecision GetCollInfo(int func, size_t n_bytes, const CostTable& costs);
  // finalize (v5+) or destroy (v4), once. Returns its result code.
  int Finalize();
  void* context() const { return context_; }

 private:
  friend class TunerEmulator;
  TunerComm(TunerEmulator* emu, void* context) : emu_(emu), context_(context) {}
  TunerEmulator* emu_;
  void* context_;
  bool finalized_ = false;
};

class TunerEmulator {
 public:
  // Loads the plugin; NotFound naming every library name tried, or the
  // symbols probed when none is there.
  static absl::StatusOr<std::unique_ptr<TunerEmulator>> Create(
      const TunerLoadOptions& options);
  ~TunerEmulator();

  // The plugin's init; its failure code as an error.
  absl::StatusOr<std::unique_ptr<TunerComm>> InitComm(
      const TunerCommSpec& spec);

  int abi_version() const { return version_; }
  const std::string& library_path() const { return path_; }
  const char* plugin_name() const;
  // Lines the plugin logged through the emulated ncclDebugLog, in order.
  std::vector<std::string> log_lines() const;

 private:
  friend class TunerComm;
  TunerEmulator() = default;
  void* lib_ = nullptr;
  void* table_ = nullptr;
  int version_ = 0;
  std::string path_;
};

}  // namespace pitstop::emu

#endif  // PITSTOP_SRC_NCCL_EMULATOR_TUNER_EMULATOR_H_
