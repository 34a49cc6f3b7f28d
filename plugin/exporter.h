// The exporter: one background thread that drains the rings every
// flush_interval (<= 10 ms), packs records into StreamTelemetryRequest
// batches and writes them into the shared-memory ring of its connection to
// the agent (AgentLink, include/pitstop/shm_transport.h). Nothing it does
// blocks: a full shared ring leaves records waiting in the thread rings
// (whose overflow is dropped and counted).
//
// Agent absent, slow or killed: records are drained and dropped (counted in
// DropCounters.export_dropped, with what a dead agent left unread), the
// connection is re-opened with exponential backoff, every new connection
// starts with ProcessHello and the live communicators. Activation commands
// from the agent are applied to the CommRegistry. Stop() writes what is left
// with ProcessGoodbye (the agent reads the ring after we are gone, so a
// clean exit is told from a crash) and never waits longer than
// finalize_timeout_ms, and only while the ring is full.
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
#include <vector>

#include "pitstop/shm_transport.h"
#include "plugin/comm_registry.h"
#include "plugin/plugin_sync.h"
#include "plugin/ring.h"
#include "plugin/wire.h"

namespace pitstop::plugin {

class AgentLink;

struct ExporterOptions {
  std::string socket_path = "/run/pitstop/agent-shm.sock";
  // Data bytes of the shared ring per connection (power of two).
  uint64_t ring_bytes = 4u << 20;
  // Copied into every stream's ProcessHello (reconnects and the start times
  // are filled in by the exporter).
  Hello hello;
  uint32_t flush_interval_ms = 5;
  uint32_t finalize_timeout_ms = 1000;
  uint32_t reconnect_min_ms = 20;
  uint32_t reconnect_max_ms = 1000;
  // Records per batch (a batch must fit half the shared ring); more go in
  // further batches of the same tick. While the shared ring is full,
  // records wait in the thread rings (full rings drop and count).
  uint32_t max_batch_records = 4096;
  // Fills the hot-path counters (ring_full, pool_exhausted, ignored,
  // events_recorded) of each batch; export_dropped is ours. May be empty.
  std::function<void(Drops*)> drop_source;
  // Called on the exporter thread every tick (may be empty).
  std::function<void()> on_tick;
  // Migration directives the agent sent, handed over on the exporter thread
  // as they arrive (may be empty: they are then dropped).
  std::function<void(std::vector<MigrationDirective>*)> on_directives;
  // Appends the migration acks to send in the next batch (exporter thread;
  // may be empty). Acks of a batch lost with a broken connection are not
  // re-sent: the agent repeats its directive, which is answered again.
  std::function<void(std::vector<MigrationAck>*)> take_acks;
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

  // Drains what is left, writes it with a ProcessGoodbye, closes the
  // connection and joins the thread, all within finalize_timeout_ms.
  // Idempotent; any thread except the exporter's.
  void Stop(GoodbyeReason reason);

  // In a forked child (only the forking thread exists): forgets the thread
  // and the connection without joining or flushing anything. The object
  // must then be leaked, never destroyed.
  void AbandonAfterFork();

  // fork() support (Runtime's pthread_atfork handlers, the forking thread).
  // PauseForFork waits, up to 500 ms, until the thread is between ticks and
  // keeps it there, so fork() never copies it mid-tick: allocators that do
  // not lock themselves around fork (GCC 12's AddressSanitizer) would leave
  // the child a lock the thread held. ResumeAfterFork lets it tick again.
  void PauseForFork();
  void ResumeAfterFork();

  // Statistics (any thread).
  uint64_t records_sent() const { return records_sent_.load(); }
  uint64_t batches_sent() const { return batches_sent_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t export_dropped() const { return export_dropped_.load(); }
  uint64_t streams_opened() const { return streams_opened_.load(); }
  // Connections the agent acknowledged (hello ack), any thread.
  uint64_t streams_acked() const { return streams_acked_.load(); }
  // Records agents read over the connections that ended so far (sent in
  // the next hello; docs/reliability.md "Lost without a count").
  uint64_t records_delivered() const { return records_delivered_.load(); }
  // Directives from the agent that could not be used (skipped).
  uint64_t malformed_directives() const { return malformed_directives_.load(); }

 private:
  Exporter(ExporterOptions options, RingSet* rings, CommRegistry* registry);
  void Run();
  void Tick();  // one flush interval's work
  void OpenStream(uint64_t now_ns);
  void CloseBrokenStream(uint64_t now_ns);
  // Moves ring records into pending_ up to max_batch_records; true if it
  // stopped because the batch is full.
  bool Drain();
  // Drains and discards everything (no agent), counting export_dropped.
  void DropAll();
  // Writes pending_ into the shared ring if it has room. True if written.
  bool TrySend(bool force_empty, const std::string* goodbye);
  void PollLink(uint64_t now_ns);
  Drops CurrentDrops();
  shm::Counters CurrentCounters();
  void FinishStream(GoodbyeReason reason, uint64_t deadline_ns);

  const ExporterOptions options_;
  RingSet* const rings_;
  CommRegistry* const registry_;

  // Exporter thread only.
  std::unique_ptr<AgentLink> link_;
  std::string message_;  // pending_ plus the batch trailer
  bool logged_error_ = false;
  bool logged_no_ack_ = false;
  std::string last_logged_;
  std::string pending_;  // encoded StreamTelemetryRequest fields
  bool pending_hello_ = false;
  bool pending_comms_ = false;
  std::string scratch_;
  uint32_t pending_records_ = 0;
  uint64_t batch_seq_ = 0;
  uint64_t next_connect_ns_ = 0;
  uint32_t backoff_ms_ = 0;
  uint64_t last_send_ns_ = 0;
  uint64_t last_heartbeat_ns_ = 0;

  Mutex mu_;
  CondVar cv_;
  bool stop_requested_ PLUGIN_GUARDED_BY(mu_) = false;
  GoodbyeReason stop_reason_ PLUGIN_GUARDED_BY(mu_) = kGoodbyeExit;
  bool stopped_ = false;  // Stop() callers only (guarded by stop_mu_)
  Mutex stop_mu_;
  // The fork handshake (PauseForFork): sequentially consistent, so either
  // the thread sees fork_pause_ and skips its tick, or the forking thread
  // sees in_tick_ and waits for it to clear.
  std::atomic<bool> fork_pause_{false};
  std::atomic<bool> in_tick_{false};

  std::atomic<uint64_t> records_sent_{0};
  std::atomic<uint64_t> batches_sent_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> export_dropped_{0};
  std::atomic<uint64_t> streams_opened_{0};
  std::atomic<uint64_t> streams_acked_{0};
  std::atomic<uint64_t> records_delivered_{0};
  std::atomic<uint64_t> malformed_directives_{0};
  // CLOCK_REALTIME at construction: names these counters in every hello.
  const uint64_t counters_start_unix_ns_;
  std::thread thread_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_EXPORTER_H_
