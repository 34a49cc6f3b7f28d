// The exporter: one background thread that drains the rings every
// flush_interval (<= 10 ms), packs records into StreamTelemetryRequest
// batches and writes them on a StreamTelemetry stream to the agent's Unix
// socket (gRPC callback API, so no write ever blocks the thread).
//
// Agent absent, slow or killed: records are drained and dropped (counted in
// DropCounters.export_dropped), the stream is re-opened with exponential
// backoff, every new stream starts with ProcessHello and the live
// communicators. Activation commands from the agent are applied to the
// CommRegistry. Stop() flushes within a bound and ends the stream with
// ProcessGoodbye so the agent can tell a clean exit from a crash.
//
// Reuse (e.g. `pitstop replay`): make a RingSet, a CommRegistry and an
// Exporter; push Records into RingSet::ThreadRing() from any thread(s) and
// communicators into the registry; Stop() at the end.
#ifndef PITSTOP_PLUGIN_EXPORTER_H_
#define PITSTOP_PLUGIN_EXPORTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "pitstop/sync.h"
#include "plugin/comm_registry.h"
#include "plugin/ring.h"
#include "plugin/wire.h"

namespace pitstop::plugin {

class TelemetryStream;

struct ExporterOptions {
  std::string socket_path = "/run/pitstop/agent.sock";
  // Copied into every stream's ProcessHello (reconnects and the start times
  // are filled in by the exporter).
  Hello hello;
  uint32_t flush_interval_ms = 5;
  uint32_t finalize_timeout_ms = 1000;
  uint32_t reconnect_min_ms = 20;
  uint32_t reconnect_max_ms = 1000;
  // Records per batch (keeps messages well under gRPC's 4 MB limit); more
  // go in further batches of the same tick. While a write is in flight,
  // records wait in the rings (full rings drop and count).
  uint32_t max_batch_records = 4096;
  // Fills the hot-path counters (ring_full, pool_exhausted, ignored,
  // events_recorded) of each batch; export_dropped is ours. May be empty.
  std::function<void(Drops*)> drop_source;
};

class Exporter {
 public:
  // Starts the thread. `rings` and `registry` must outlive the exporter.
  static std::unique_ptr<Exporter> Start(ExporterOptions options,
                                         RingSet* rings,
                                         CommRegistry* registry);
  ~Exporter();  // Stop(kGoodbyeExit) if not stopped
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // Drains what is left, sends it with a ProcessGoodbye, ends the stream and
  // joins the thread, all within finalize_timeout_ms (then cancels).
  // Idempotent; any thread except the exporter's.
  void Stop(GoodbyeReason reason);

  // Statistics (any thread).
  uint64_t records_sent() const { return records_sent_.load(); }
  uint64_t batches_sent() const { return batches_sent_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t export_dropped() const { return export_dropped_.load(); }
  uint64_t streams_opened() const { return streams_opened_.load(); }

 private:
  Exporter(ExporterOptions options, RingSet* rings, CommRegistry* registry);
  void Run();
  void OpenStream(uint64_t now_ns);
  void CloseBrokenStream(uint64_t now_ns);
  // Moves ring records into pending_ up to max_batch_records; true if it
  // stopped because the batch is full.
  bool Drain();
  // Drains and discards everything (no agent), counting export_dropped.
  void DropAll();
  // Sends pending_ if the stream can take a write. Returns true if sent.
  bool TrySend(bool force_empty, const std::string* goodbye);
  void FinishStream(GoodbyeReason reason, uint64_t deadline_ns);

  const ExporterOptions options_;
  RingSet* const rings_;
  CommRegistry* const registry_;

  // Exporter thread only.
  TelemetryStream* stream_ = nullptr;
  std::string pending_;  // encoded StreamTelemetryRequest fields
  bool pending_hello_ = false;
  bool pending_comms_ = false;
  std::string scratch_;
  uint32_t pending_records_ = 0;
  uint64_t batch_seq_ = 0;
  uint64_t next_connect_ns_ = 0;
  uint32_t backoff_ms_ = 0;
  uint64_t last_send_ns_ = 0;

  Mutex mu_;
  CondVar cv_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  GoodbyeReason stop_reason_ ABSL_GUARDED_BY(mu_) = kGoodbyeExit;
  bool stopped_ = false;  // Stop() callers only (guarded by stop_mu_)
  Mutex stop_mu_;

  std::atomic<uint64_t> records_sent_{0};
  std::atomic<uint64_t> batches_sent_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> export_dropped_{0};
  std::atomic<uint64_t> streams_opened_{0};
  std::thread thread_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_EXPORTER_H_
