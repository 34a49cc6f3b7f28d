// NCCL emulator: drives the real libnccl-profiler-pitstop.so the way
// NCCL's loader and runtime do, without a GPU.
//
// What it does like NCCL (facts: ../shared/docs/nccl-plugin-abi.md):
//   - resolves the library by NCCL's rules (value verbatim, then
//     libnccl-profiler-<value>.so) and probes ncclProfiler_v6..v3 newest
//     first (or a forced version);
//   - one process-global activation mask that `init` writes and every
//     operation samples when it starts (parents implied by children);
//   - calls `init` with the version's argument order, emits each version's
//     descriptors: GroupApi/CollApi/P2pApi/KernelLaunch (v5+) and
//     Group/Coll/P2p on the calling ("user") thread, ProxyOp/ProxyStep/
//     KernelCh/NetPlugin on the emulator's proxy thread, and the host task of
//     CUDA-graph replays on a separate "CUDA-internal" thread;
//   - KernelCh carries scripted GPU timer values (GPU %globaltimer domain,
//     ns) on v4+; v3 has no timers.
//
// Usage (one emulated rank per process, as the simulator does):
//
//   #include "src/nccl/emulator/nccl_emulator.h"
//   using namespace pitstop::emu;
//   auto emu = Emulator::Create({.plugin = "pitstop"});   // or a path
//   if (!emu.ok()) ...;                     // library or symbol not found
//   auto comm = (*emu)->InitComm({.comm_hash = 0xabc, .name = "world",
//                                 .n_ranks = 8, .rank = 3, .n_nodes = 2});
//   if (!comm.ok()) ...;                    // the plugin's init failed
//   OpSpec spec;                            // AllReduce, 1 Mi floats, RING
//   spec.seq_number = 0;
//   (*comm)->RunCollective(spec, Timeline{});          // whole op, scripted
//   // or drive the phases yourself, at the real times you choose:
//   std::unique_ptr<Op> op = (*comm)->StartOp(spec);  // API call
//   op->EnqueueDone();                                // host task
//   int p = op->ProxyOpStart({.channel = 0, .peer = 4, .is_send = true});
//   op->KernelStart(/*channel=*/0, /*gpu_ns=*/1'000'000);
//   op->ProxyStep(p, /*step=*/0, /*bytes=*/1 << 20);
//   op->ProxyOpStop(p);
//   op->KernelStop(0, 1'250'000);           // last child: op completes
//   (*comm)->Finalize();
//   // SimulateCrash(1) instead of Finalize: _exit without any cleanup, so
//   // the agent sees a stream end without a ProcessGoodbye.
//
// The plugin reads its settings from the environment at first `init`:
// PITSTOP_AGENT_SOCKET, PITSTOP_HOST, PITSTOP_JOB_ID, RANK, ... (see
// docs/plugin.md); set them before Emulator::Create / InitComm.
//
// Lifetimes: destroy Ops and Comms before their Emulator.
//
// Thread safety: Emulator, Comm and Op are thread-safe; every call blocks
// until the plugin callbacks it makes have returned (proxy/graph-thread work
// is handed to that thread and waited for), so the caller controls timing.
#ifndef PITSTOP_SRC_NCCL_EMULATOR_NCCL_EMULATOR_H_
#define PITSTOP_SRC_NCCL_EMULATOR_NCCL_EMULATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pitstop::emu {

struct LoadOptions {
  // NCCL_PROFILER_PLUGIN-style value: a name ("pitstop" -> tries "pitstop",
  // then "libnccl-profiler-pitstop.so" via the loader's search path) or a
  // path. Empty: $NCCL_PROFILER_PLUGIN, else the plugin built with this tree.
  std::string plugin{};
  // 3..6 to load ncclProfiler_v<N> only; 0 probes v6, v5, v4, v3 like NCCL.
  int force_version = 0;
};

// Absolute path of the libnccl-profiler-pitstop.so built with this tree.
std::string BuiltPluginPath();

// Resolves `value` by NCCL's rules and dlopens it (RTLD_NOW|RTLD_LOCAL).
// Returns the dlopen handle; NotFound naming every name tried.
absl::StatusOr<void*> OpenPluginLibrary(const std::string& value);

struct CommSpec {
  uint64_t comm_hash = 0;
  std::string name{};  // ncclConfig_t.commName; empty passes NULL
  int n_ranks = 1;
  int rank = 0;
  int n_nodes = 1;
};

// One Coll or P2p task as NCCL describes it to the profiler.
struct OpSpec {
  bool p2p = false;
  std::string func = "AllReduce";  // NCCL's strings: "AllGather", "Send", ...
  size_t count = 1 << 20;          // elements
  std::string datatype = "ncclFloat32";
  int root = -1;  // collectives with a root, else -1
  int peer = -1;  // P2p peer (comm rank)
  std::string algo = "RING";
  std::string proto = "SIMPLE";
  int n_channels = 2;
  int n_warps = 8;
  uint64_t seq_number = 0;  // coll.seqNumber
  // The API call is recorded into a CUDA graph (host task runs at replay).
  bool graph_captured = false;
};

struct ProxyOpSpec {
  int channel = 0;
  int peer = 0;
  bool is_send = true;
  int n_steps = 1;
  int chunk_size = 1 << 19;
  // Originating process; 0 = this process. Another pid emulates PXN: NCCL
  // then passes a parent handle this process must not dereference.
  int pid = 0;
};

// Scripted timings for RunCollective (real sleeps, microseconds) and GPU
// timer values (ns, GPU clock domain).
struct Timeline {
  int api_to_enqueue_us = 0;
  int kernel_us = 50;  // real sleep between kernel start and stop
  uint64_t gpu_start_ns = 1'000'000'000;
  uint64_t gpu_duration_ns = 40'000;
  int steps_per_proxy_op = 1;  // 0: no ProxyStep events
  size_t step_bytes = 1 << 16;
  bool with_net_events = false;  // one IB NetPlugin event per step
};

class Emulator;

// One operation in flight. Methods run the matching plugin callbacks on the
// thread NCCL uses; events whose type the sampled mask excludes are skipped
// as NCCL would. Calls after the op completed are ignored.
class Op {
 public:
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  // Host task: Group start, Coll/P2p start and stop, Group stop. On the
  // calling thread, or on the graph thread for graph-captured ops.
  void EnqueueDone();
  // Proxy thread. Returns the proxy-op index for ProxyStep/ProxyOpStop.
  int ProxyOpStart(const ProxyOpSpec& spec);
  void ProxyOpInProgress(int proxy);
  // One step: start, the send (or recv) states in NCCL's order, stop.
  // `with_net_event` adds an IB NetPlugin event under the step.
  void ProxyStep(int proxy, int step, size_t bytes,
                 bool with_net_event = false);
  void ProxyOpStop(int proxy);
  // Proxy thread. gpu_ns: GPU timer (ignored on v3).
  void KernelStart(int channel, uint64_t gpu_ns);
  void KernelStop(int channel, uint64_t gpu_ns);
  // Raw handles the plugin returned (tests of NULL handling).
  void* coll_handle() const;
  void* api_handle() const;

  struct State;  // implementation detail

 private:
  friend class Comm;
  explicit Op(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Comm {
 public:
  ~Comm();  // Finalize() if not done
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // API call on the calling thread: GroupApi + CollApi/P2pApi (v5+), and
  // the kernel launch. The mask is sampled here.
  std::unique_ptr<Op> StartOp(const OpSpec& spec);
  // CUDA-graph replay of a captured op: a new task whose Coll event names
  // the captured op's (long stopped) CollApi handle as parent; its host task
  // runs on the graph thread when EnqueueDone is called.
  std::unique_ptr<Op> Replay(const Op& captured, uint64_t seq_number);
  // Whole timeline: API, enqueue, per channel a send and a recv proxy op
  // (peers rank±1), kernel start/stop with timer values, steps.
  void RunCollective(const OpSpec& spec, const Timeline& timeline);

  // Calls the plugin's finalize (once). Returns its result code.
  int Finalize();
  void* context() const;
  const CommSpec& spec() const;

  struct State;  // implementation detail

 private:
  friend class Emulator;
  explicit Comm(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Emulator {
 public:
  // Loads the plugin; NotFound if no library or no ncclProfiler_v6..v3.
  static absl::StatusOr<std::unique_ptr<Emulator>> Create(
      const LoadOptions& options);
  ~Emulator();  // joins the threads; does not dlclose (like a pinned plugin)
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // ABI version loaded (3..6) and the library path.
  int abi_version() const;
  const std::string& library_path() const;
  // Calls the version's init. FailedPrecondition carrying NCCL's result
  // code if init fails (the comm then runs "without profiler" in NCCL; the
  // returned status says so, no Comm is made).
  absl::StatusOr<std::unique_ptr<Comm>> InitComm(const CommSpec& spec);
  // Same, but keeps a failed comm like NCCL does (context stays what the
  // plugin wrote); `init_result` receives init's return code.
  std::unique_ptr<Comm> InitCommKeepOnFailure(const CommSpec& spec,
                                              int* init_result);
  // NCCL's process-global activation mask as the plugin last wrote it.
  int activation_mask() const;
  // Raw event calls for odd cases (NULL handles): stop/record on `handle`.
  void RawStop(void* handle);
  void RawRecordState(void* handle, int state, uint64_t arg);

  struct Impl;

 private:
  explicit Emulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Ends the process at once without finalize or exit handlers (_exit), as a
// crash would: the agent sees the stream end without ProcessGoodbye.
[[noreturn]] void SimulateCrash(int exit_code);

}  // namespace pitstop::emu

#endif  // PITSTOP_SRC_NCCL_EMULATOR_NCCL_EMULATOR_H_
