// The in-process library's shape for the sanitizer canaries: a shared
// library with a C ABI, dlopen'ed by its host the way NCCL loads the
// profiler plugin, that runs a thread of its own (the plugin's exporter)
// beside the host's threads calling into it (NCCL's threads recording
// events), with per-thread state in dynamic TLS like the recorder's rings.
//
// Planted: the count the caller's thread bumps is a plain integer the
// exporter thread reads (the plugin's rings use atomics for exactly this).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace {

uint64_t g_recorded = 0;  // planted: written and read on two threads
// Relaxed flags only: they carry no happens-before.
std::atomic<bool> g_recording{false};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_seen{false};
std::thread* g_exporter = nullptr;
thread_local uint64_t t_events = 0;

// Not inlined: the report names it.
__attribute__((noinline)) uint64_t ExporterReadsRecordCount() {
  return g_recorded;
}

// Waits (sleeping: TSan keeps a bounded history, and the report must still
// have this thread's stack) until the caller has recorded, then reads.
void ExporterLoop() {
  while (!g_recording.load(std::memory_order_relaxed)) {
    if (g_stop.load(std::memory_order_relaxed)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (ExporterReadsRecordCount() != 0) {
    g_seen.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void pitstop_canary_init() noexcept {
  g_exporter = new std::thread(ExporterLoop);
}

__attribute__((visibility("default"))) void pitstop_canary_record(
    uint64_t n) noexcept {
  ++t_events;
  g_recorded += n;
  g_recording.store(true, std::memory_order_relaxed);
}

// 1 when the exporter saw a record before it was stopped.
__attribute__((visibility("default"))) int pitstop_canary_finalize() noexcept {
  g_stop.store(true, std::memory_order_relaxed);
  g_exporter->join();
  delete g_exporter;
  g_exporter = nullptr;
  return g_seen.load(std::memory_order_relaxed) ? 1 : 0;
}

}  // extern "C"
