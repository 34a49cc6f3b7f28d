// Settings of the in-process library, read from the environment once at the
// first profiler init (not on the hot path). docs/plugin.md lists them.
#ifndef PITSTOP_PLUGIN_CONFIG_H_
#define PITSTOP_PLUGIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plugin/abi/profiler_common.h"

namespace pitstop::plugin {

// Cheap always-on set: Coll | P2p | ProxyOp | KernelCh.
inline constexpr uint32_t kDefaultEventMask =
    abi::kColl | abi::kP2p | abi::kProxyOp | abi::kKernelCh;
// Deep set the agent switches on for a while: ProxyStep | NetPlugin.
inline constexpr uint32_t kDefaultDeepEventMask =
    abi::kProxyStep | abi::kNetPlugin;
// Bits we know how to record; others are ignored in masks.
inline constexpr uint32_t kSupportedEventMask =
    kDefaultEventMask | kDefaultDeepEventMask;

// Most bytes all rings together may take (PITSTOP_MAX_THREADS x
// PITSTOP_RING_CAPACITY x sizeof(Record)); above it both fall back to their
// defaults with a warning.
inline constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;
// Longest Unix socket path (sun_path holds 108 bytes with the NUL).
inline constexpr size_t kMaxSocketPathBytes = 107;

struct PluginConfig {
  // The agent's telemetry socket (its ingest.shm_socket).
  std::string agent_socket = "/run/pitstop/agent-shm.sock";
  std::string host;      // PITSTOP_HOST, else gethostname()
  std::string job_id;    // PITSTOP_JOB_ID, SLURM_JOB_ID, TORCHELASTIC_RUN_ID
  int global_rank = -1;  // RANK
  int local_rank = -1;   // LOCAL_RANK
  uint32_t event_mask = kDefaultEventMask;           // PITSTOP_EVENT_MASK
  uint32_t deep_event_mask = kDefaultDeepEventMask;  // PITSTOP_DEEP_EVENT_MASK
  uint32_t ring_capacity = 4096;        // PITSTOP_RING_CAPACITY (power of two)
  uint32_t max_rings = 32;              // PITSTOP_MAX_THREADS
  uint32_t flush_interval_ms = 5;       // PITSTOP_FLUSH_INTERVAL_MS (1..10)
  uint32_t finalize_timeout_ms = 1000;  // PITSTOP_FINALIZE_TIMEOUT_MS
  uint32_t reconnect_max_ms = 1000;     // PITSTOP_RECONNECT_MAX_MS
  // Data bytes of the ring shared with the agent (PITSTOP_SHM_RING_BYTES,
  // power of two, 64 KiB .. 256 MiB).
  uint32_t shm_ring_bytes = 4u << 20;
  // PITSTOP_CLOCK: "tsc" (default; the invariant TSC when the CPU has one)
  // or "monotonic" (clock_gettime on every event).
  bool use_tsc = true;
  // PITSTOP_CHAIN_PROFILER_PLUGIN: a second profiler plugin to chain
  // (chain.h); empty = none.
  std::string chain_plugin;
  // Warnings about bad values, logged through NCCL's logger by the caller.
  std::vector<std::string> warnings;
};

// Reads the PITSTOP_* variables (and RANK, LOCAL_RANK, SLURM_JOB_ID,
// TORCHELASTIC_RUN_ID). A bad value adds a warning and keeps the default.
PluginConfig ReadPluginConfig();

// True if `path` is usable as PITSTOP_AGENT_SOCKET: absolute, at most
// kMaxSocketPathBytes bytes.
bool ValidAgentSocketPath(std::string_view path);

// Parses an event mask: decimal (a leading zero stays decimal), 0x-hex, or
// '|'/','-separated names (coll, p2p, proxyop, proxystep, kernelch, netplugin).
// False if invalid or if it has bits outside kSupportedEventMask.
bool ParseEventMask(const char* text, uint32_t* mask);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_CONFIG_H_
