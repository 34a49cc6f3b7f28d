#include "plugin/exporter.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "plugin/packer.h"
#include "plugin/recorder.h"
#include "plugin/telemetry_stream.h"

namespace pitstop::plugin {

// One StreamTelemetry call. The exporter thread writes; gRPC's threads run
// the reactions. Deleted by the exporter thread after OnDone.
namespace {
uint64_t UnixNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

std::unique_ptr<Exporter> Exporter::Start(ExporterOptions options,
                                          RingSet* rings,
                                          CommRegistry* registry) {
  std::unique_ptr<Exporter> e(
      new Exporter(std::move(options), rings, registry));
  e->thread_ = std::thread([p = e.get()] {
    // Nothing may escape a thread inside the training process: on an
    // exception (out of memory) the exporter ends; the rings then fill and
    // their drops are counted.
    try {
      p->Run();
    } catch (...) {
      std::fputs("pitstop: exporter stopped after an internal error\n", stderr);
    }
  });
  return e;
}

Exporter::Exporter(ExporterOptions options, RingSet* rings,
                   CommRegistry* registry)
    : options_(std::move(options)), rings_(rings), registry_(registry) {}

Exporter::~Exporter() { Stop(kGoodbyeExit); }

void Exporter::Stop(GoodbyeReason reason) {
  MutexLock stop_lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  {
    MutexLock lock(&mu_);
    stop_requested_ = true;
    stop_reason_ = reason;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Exporter::OpenStream(uint64_t now_ns) {
  stream_ = new TelemetryStream(options_.socket_path, &export_dropped_);
  const uint64_t opened = streams_opened_.fetch_add(1);
  batch_seq_ = 0;
  // Hello and the live communicators go first on every stream; queued
  // communicator events are covered by the snapshot. Records packed for a
  // broken stream follow.
  Hello hello = options_.hello;
  hello.reconnects = static_cast<uint32_t>(opened);
  hello.start_unix_ns = UnixNowNs();
  hello.start_cpu_ns = now_ns;
  std::string first;
  ProtoWriter w(&first);
  w.Message(kReqHello, EncodeHello(hello));
  std::vector<uint64_t> live;
  for (auto& ev : registry_->Snapshot()) {
    ev.time_cpu_ns = now_ns;
    live.push_back(ev.info.comm_hash);
    w.Message(kReqCommunicators, EncodeCommEvent(ev));
  }
  // Queued events keep their order (INIT, ..., FINALIZE of a comm that is
  // already gone); INITs of live comms are covered by the snapshot.
  for (auto& ev : registry_->TakeEvents()) {
    if (ev.kind == kCommInit &&
        std::find(live.begin(), live.end(), ev.info.comm_hash) != live.end()) {
      continue;
    }
    w.Message(kReqCommunicators, EncodeCommEvent(ev));
  }
  first.append(pending_);  // repeated events are harmless to the agent
  pending_.swap(first);
  pending_hello_ = true;
  pending_comms_ = false;
}

void Exporter::CloseBrokenStream(uint64_t now_ns) {
  if (stream_ == nullptr) return;
  if (pending_hello_) {
    // Never sent; the next stream starts with a fresh hello.
    export_dropped_.fetch_add(pending_records_);
    pending_.clear();
    pending_records_ = 0;
    pending_hello_ = false;
    pending_comms_ = false;
  }
  stream_->Cancel();
  stream_->WaitDone(now_ns + 1000000000ull);
  if (stream_->delivered_any()) backoff_ms_ = 0;
  if (!stream_->Done()) return;  // leave it; try again next tick
  delete stream_;
  stream_ = nullptr;
  backoff_ms_ = backoff_ms_ == 0
                    ? options_.reconnect_min_ms
                    : std::min(backoff_ms_ * 2, options_.reconnect_max_ms);
  next_connect_ns_ = now_ns + uint64_t{backoff_ms_} * 1000000;
}

bool Exporter::Drain() {
  for (auto& ev : registry_->TakeEvents()) {
    ProtoWriter(&pending_).Message(kReqCommunicators, EncodeCommEvent(ev));
    pending_comms_ = true;
  }
  if (pending_records_ >= options_.max_batch_records) return true;
  const size_t room = options_.max_batch_records - pending_records_;
  const size_t n = rings_->DrainAll(
      room, [this](const Record& r) { PackRecord(r, &pending_, &scratch_); });
  pending_records_ += static_cast<uint32_t>(n);
  return n == room;
}

void Exporter::DropAll() {
  uint64_t dropped = pending_records_;
  dropped += rings_->DrainAll(~size_t{0}, [](const Record&) {});
  export_dropped_.fetch_add(dropped);
  pending_.clear();
  pending_records_ = 0;
  pending_hello_ = false;
  pending_comms_ = false;
}

bool Exporter::TrySend(bool force_empty, const std::string* goodbye) {
  if (stream_ == nullptr || !stream_->Writable()) return false;
  const bool has_data =
      pending_records_ != 0 || pending_hello_ || pending_comms_;
  if (!has_data && !force_empty && goodbye == nullptr) return false;
  Drops drops;
  if (options_.drop_source) options_.drop_source(&drops);
  drops.export_dropped = export_dropped_.load();
  const uint64_t now = NowCpuNs();
  ProtoWriter w(&pending_);
  w.Varint(kReqBatchSeq, ++batch_seq_);
  w.Message(kReqDrops, EncodeDrops(drops));
  w.Varint(kReqSentCpuNs, now);
  if (goodbye != nullptr) w.Message(kReqGoodbye, *goodbye);
  if (!stream_->TryWrite(pending_, pending_records_, goodbye != nullptr)) {
    // Cannot happen (checked Writable above, one writer); keep it sane.
    --batch_seq_;
    export_dropped_.fetch_add(pending_records_);
    pending_.clear();
    pending_records_ = 0;
    return false;
  }
  records_sent_.fetch_add(pending_records_);
  batches_sent_.fetch_add(1);
  bytes_sent_.fetch_add(pending_.size());
  pending_.clear();
  pending_records_ = 0;
  pending_hello_ = false;
  pending_comms_ = false;
  last_send_ns_ = now;
  return true;
}

void Exporter::FinishStream(GoodbyeReason reason, uint64_t deadline_ns) {
  const std::string goodbye = EncodeGoodbye(reason, NowCpuNs());
  if (stream_ == nullptr && NowCpuNs() < deadline_ns) {
    OpenStream(NowCpuNs());  // one last try so the goodbye gets through
  }
  if (stream_ == nullptr) return;
  bool sent = false;
  // Flush full batches, then the last one with the goodbye.
  while (!sent && NowCpuNs() < deadline_ns && !stream_->Broken()) {
    if (!stream_->WaitWritable(deadline_ns)) break;
    if (Drain()) {
      TrySend(false, nullptr);
    } else {
      sent = TrySend(true, &goodbye);
    }
  }
  if (!sent || !stream_->WaitDone(deadline_ns)) stream_->Cancel();
  stream_->WaitDone(NowCpuNs() + 5000000000ull);
  if (stream_->Done()) {
    delete stream_;
  }  // else: gRPC never called OnDone; leak rather than free a live reactor
  stream_ = nullptr;
}

void Exporter::Run() {
  const uint64_t tick_ns = uint64_t{options_.flush_interval_ms} * 1000000;
  const uint64_t heartbeat_ns = 1000000000ull;
  for (;;) {
    GoodbyeReason reason;
    {
      MutexLock lock(&mu_);
      if (!stop_requested_) {
        cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(tick_ns));
      }
      reason = stop_reason_;
      if (stop_requested_) {
        const uint64_t deadline =
            NowCpuNs() + uint64_t{options_.finalize_timeout_ms} * 1000000;
        mu_.Unlock();
        FinishStream(reason, deadline);
        mu_.Lock();
        return;
      }
    }
    const uint64_t now = NowCpuNs();
    if (stream_ != nullptr) {
      for (const auto& cmd : stream_->TakeCommands())
        registry_->Apply(cmd, now);
      if (stream_->Broken()) CloseBrokenStream(now);
    }
    registry_->ExpireActivations(now);
    if (stream_ == nullptr && now >= next_connect_ns_) OpenStream(now);
    if (stream_ == nullptr) {
      DropAll();  // no agent: drop and count rather than let the rings fill
      continue;
    }
    bool full = Drain();
    bool sent = TrySend(now - last_send_ns_ >= heartbeat_ns, nullptr);
    // A burst: keep sending full batches while this tick lasts.
    const uint64_t tick_end = now + tick_ns;
    while (sent && full && stream_->WaitWritable(tick_end)) {
      full = Drain();
      sent = TrySend(false, nullptr);
    }
  }
}

}  // namespace pitstop::plugin
