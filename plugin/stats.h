// What the library saw, counted for a process without an agent
// (PITSTOP_STATS_FILE; docs/plugin.md "Counting without an agent"): profiler
// inits and the ABI version NCCL picked, events started per event type,
// records per kind and operations per function, drops, interposer calls per
// NCCL function, and how the library was loaded. Written as one JSON file
// when the last communicator finalizes and at process exit (tools/
// gpu-check.sh reads it on a GPU machine, which has no agent).
//
// Off (the variable unset): every counting call is one relaxed load and a
// branch. On: the hot-path counters are per thread (a slot claimed once per
// thread from a fixed table, then a plain load and store: no locked
// instruction, no allocation, no system call); the file is written only at
// finalize / exit.
//
// Threads: Count* from any thread; CountRecord from the exporter thread
// only; WriteStatsFile from init/finalize/exit paths (serialised inside).
#ifndef PITSTOP_PLUGIN_STATS_H_
#define PITSTOP_PLUGIN_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "plugin/record.h"

namespace pitstop::plugin::stats {

// The interposed entry points, named by the pncclX symbol each forwards to
// (the token PITSTOP_REAL gets); the file names them ncclX.
#define PITSTOP_INTERPOSED_FUNCTIONS(X) \
  X(pncclCommInitRank)                  \
  X(pncclCommInitRankConfig)            \
  X(pncclCommInitAll)                   \
  X(pncclCommInitRankScalable)          \
  X(pncclCommSplit)                     \
  X(pncclCommShrink)                    \
  X(pncclCommFinalize)                  \
  X(pncclCommDestroy)                   \
  X(pncclCommAbort)                     \
  X(pncclCommRevoke)                    \
  X(pncclAllReduce)                     \
  X(pncclAllGather)                     \
  X(pncclReduceScatter)                 \
  X(pncclBroadcast)                     \
  X(pncclBcast)                         \
  X(pncclReduce)                        \
  X(pncclAlltoAll)                      \
  X(pncclGather)                        \
  X(pncclScatter)                       \
  X(pncclSend)                          \
  X(pncclRecv)                          \
  X(pncclGroupStart)                    \
  X(pncclGroupEnd)                      \
  X(pncclGroupSimulateEnd)              \
  X(pncclCommCount)                     \
  X(pncclCommUserRank)                  \
  X(pncclCommCuDevice)                  \
  X(pncclCommGetAsyncError)             \
  X(pncclGetLastError)                  \
  X(pncclRedOpCreatePreMulSum)          \
  X(pncclRedOpDestroy)                  \
  X(pncclCommRegister)                  \
  X(pncclCommDeregister)                \
  X(pncclCommWindowRegister)            \
  X(pncclCommWindowDeregister)

// Enumerators spelled like the symbols, so the macro can name them.
enum class Interposed : int {
#define PITSTOP_STATS_ENUM(name) name,
  PITSTOP_INTERPOSED_FUNCTIONS(PITSTOP_STATS_ENUM)
#undef PITSTOP_STATS_ENUM
      kCount
};
inline constexpr int kInterposedCount = static_cast<int>(Interposed::kCount);

// Event types by bit position (abi::EventType: Group = 0 ... CeBatch = 14);
// the last index counts anything else.
inline constexpr int kEventTypes = 16;

// One thread's counters. Written only by the thread that claimed the slot
// (load + store), except the shared overflow slot (fetch_add).
struct alignas(64) ThreadCounters {
  std::atomic<uint64_t> started[kEventTypes];
  std::atomic<uint64_t> stops;
  std::atomic<uint64_t> states;
  std::atomic<uint64_t> interposed[kInterposedCount];
  // The last slot, shared by threads beyond the table (set by each of them
  // before its first count).
  std::atomic<bool> shared;
};

// True once PITSTOP_STATS_FILE was found at load (never changes after).
extern std::atomic<bool> g_enabled;

// The calling thread's counters (claimed on its first call).
ThreadCounters* Local() noexcept;

inline void Bump(ThreadCounters* c, std::atomic<uint64_t>* a) noexcept {
  if (c->shared.load(std::memory_order_relaxed)) [[unlikely]] {
    a->fetch_add(1, std::memory_order_relaxed);
  } else {
    a->store(a->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

inline int EventIndex(uint64_t type) noexcept {
  const bool one_bit = type != 0 && (type & (type - 1)) == 0;
  const int bit = one_bit ? __builtin_ctzll(type) : kEventTypes - 1;
  return bit < kEventTypes - 1 ? bit : kEventTypes - 1;
}

// Hot path: a profiler startEvent of descriptor type `type`.
inline void CountEventStart(uint64_t type) noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadCounters* c = Local();
  Bump(c, &c->started[EventIndex(type)]);
}
inline void CountStop() noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadCounters* c = Local();
  Bump(c, &c->stops);
}
inline void CountState() noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadCounters* c = Local();
  Bump(c, &c->states);
}
// An interposed entry point was called by the application.
inline void CountInterposed(Interposed fn) noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadCounters* c = Local();
  Bump(c, &c->interposed[static_cast<int>(fn)]);
}

// Cold: a profiler init of ABI `version` (3..6) returned `result`; a
// finalize.
void CountInit(int version, int result) noexcept;
void CountFinalize() noexcept;
// Exporter thread: a record drained from a thread ring (sent or dropped).
void CountRecord(const Record& r) noexcept;

// Writes the file now (no-op when off or when the process saw nothing: no
// profiler init and no interposer call, e.g. a preloaded `ldconfig`).
// False if it could not be written (one line on stderr).
bool WriteStatsFile() noexcept;

// For tests: the JSON the file would hold.
std::string RenderJson();
// The path PITSTOP_STATS_FILE names for this process ("%p" -> pid).
std::string ResolvedPath();

}  // namespace pitstop::plugin::stats

#endif  // PITSTOP_PLUGIN_STATS_H_
