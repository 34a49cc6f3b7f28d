#include "plugin/exporter.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "plugin/agent_link.h"
#include "plugin/packer.h"
#include "plugin/recorder.h"
#include "plugin/stats.h"

namespace pitstop::plugin {

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
    : options_(std::move(options)),
      rings_(rings),
      registry_(registry),
      counters_start_unix_ns_(UnixNowNs()) {}

Exporter::~Exporter() { Stop(kGoodbyeExit); }

void Exporter::AbandonAfterFork() {
  // The thread does not exist in the child; its std::thread object is
  // detached-by-forgetting (the object is leaked, never destroyed).
  if (link_ != nullptr) link_->AbandonAfterFork();
  link_.reset();  // only memory now: socket closed, ring unmapped
  stopped_ = true;
}

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
  shm::HelloFrame hf{};
  hf.pid = options_.hello.pid;
  hf.counters = CurrentCounters();
  hf.reconnects = static_cast<uint32_t>(streams_opened_.load());
  hf.records_delivered = records_delivered_.load();
  hf.counters_start_unix_ns = counters_start_unix_ns_;
  std::string error;
  link_ =
      AgentLink::Connect(options_.socket_path, options_.ring_bytes, hf, &error);
  if (link_ == nullptr) {
    backoff_ms_ = backoff_ms_ == 0
                      ? options_.reconnect_min_ms
                      : std::min(backoff_ms_ * 2, options_.reconnect_max_ms);
    next_connect_ns_ = now_ns + uint64_t{backoff_ms_} * 1000000;
    return;
  }
  const uint64_t opened = streams_opened_.fetch_add(1);
  batch_seq_ = 0;
  last_heartbeat_ns_ = now_ns;
  // Hello and the live communicators go first on every connection; queued
  // communicator events are covered by the snapshot. Records packed while
  // disconnected were dropped (DropAll).
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
  if (link_ == nullptr) return;
  // What the agent had not read when the connection broke is lost; so is
  // what we had packed for it. What it read is delivered as far as we can
  // know: the next hello says so, and the controller compares it with what
  // reached it through that agent.
  const uint64_t unread = link_->unread_records();
  records_delivered_.fetch_add(link_->records_written() - unread);
  export_dropped_.fetch_add(unread + pending_records_);
  pending_.clear();
  pending_records_ = 0;
  pending_hello_ = false;
  pending_comms_ = false;
  if (link_->acked()) backoff_ms_ = 0;
  link_.reset();
  backoff_ms_ = backoff_ms_ == 0
                    ? options_.reconnect_min_ms
                    : std::min(backoff_ms_ * 2, options_.reconnect_max_ms);
  next_connect_ns_ = now_ns + uint64_t{backoff_ms_} * 1000000;
}

void Exporter::PollLink(uint64_t now_ns) {
  if (link_ == nullptr) return;
  AgentMessages msgs;
  std::string error;
  const bool was_acked = link_->acked();
  const bool ok = link_->Poll(&msgs, &error);
  if (!was_acked && link_->acked()) streams_acked_.fetch_add(1);
  for (const auto& cmd : msgs.activations) registry_->Apply(cmd, now_ns);
  if (msgs.malformed_directives > 0) {
    // Counted, never fatal: a bad directive must not cost the telemetry.
    if (malformed_directives_.fetch_add(msgs.malformed_directives) == 0) {
      std::fprintf(stderr,
                   "pitstop: agent %s sent a malformed migration directive; "
                   "ignored\n",
                   link_->peer().c_str());
    }
  }
  if (!msgs.directives.empty() && options_.on_directives) {
    options_.on_directives(&msgs.directives);
  }
  if (ok) return;
  // One line per malformed frame, one for the first other error; a plain
  // close by a stopping agent is routine and not logged — unless it never
  // acknowledged our hello, which is what the agent's gRPC socket does.
  const bool closed = error.rfind("agent closed", 0) == 0;
  const bool malformed = error.rfind("malformed", 0) == 0;
  if (!link_->acked() && (closed || malformed) && !logged_no_ack_) {
    logged_no_ack_ = true;
    last_logged_ = error;
    std::fprintf(stderr,
                 "pitstop: %s did not acknowledge the hello (%s): is "
                 "PITSTOP_AGENT_SOCKET the agent's ingest.shm_socket, not "
                 "its gRPC ingest.socket? reconnecting\n",
                 link_->peer().c_str(), error.c_str());
  } else if ((malformed && error != last_logged_) ||
             (!malformed && !closed && !logged_error_)) {
    // The same malformed frame on every reconnect is said once.
    logged_error_ = true;
    last_logged_ = error;
    std::fprintf(stderr, "pitstop: agent %s: %s; reconnecting\n",
                 link_->peer().c_str(), error.c_str());
  }
  CloseBrokenStream(now_ns);
}

bool Exporter::Drain() {
  for (auto& ev : registry_->TakeEvents()) {
    ProtoWriter(&pending_).Message(kReqCommunicators, EncodeCommEvent(ev));
    pending_comms_ = true;
  }
  for (const InitFailure& f : registry_->TakeInitFailures()) {
    ProtoWriter(&pending_).Message(kReqInitFailures, EncodeInitFailure(f));
    pending_comms_ = true;
  }
  if (options_.take_acks) {
    std::vector<MigrationAck> acks;
    options_.take_acks(&acks);
    for (const MigrationAck& a : acks) {
      ProtoWriter(&pending_).Message(kReqMigrationAcks, EncodeMigrationAck(a));
      pending_comms_ = true;
    }
  }
  if (pending_records_ >= options_.max_batch_records) return true;
  const size_t room = options_.max_batch_records - pending_records_;
  const size_t n = rings_->DrainAll(room, [this](const Record& r) {
    stats::CountRecord(r);
    PackRecord(r, &pending_, &scratch_);
  });
  pending_records_ += static_cast<uint32_t>(n);
  return n == room;
}

void Exporter::DropAll() {
  uint64_t dropped = pending_records_;
  dropped += rings_->DrainAll(~size_t{0},
                              [](const Record& r) { stats::CountRecord(r); });
  export_dropped_.fetch_add(dropped);
  pending_.clear();
  pending_records_ = 0;
  pending_hello_ = false;
  pending_comms_ = false;
  registry_->TakeEvents();  // re-sent as a snapshot on the next connection
}

Drops Exporter::CurrentDrops() {
  Drops drops;
  if (options_.drop_source) options_.drop_source(&drops);
  drops.export_dropped = export_dropped_.load();
  return drops;
}

shm::Counters Exporter::CurrentCounters() {
  const Drops d = CurrentDrops();
  return shm::Counters{d.events_recorded + d.ring_full + d.pool_exhausted,
                       d.ring_full + d.pool_exhausted + d.export_dropped};
}

bool Exporter::TrySend(bool force_empty, const std::string* goodbye) {
  if (link_ == nullptr) return false;
  const bool has_data =
      pending_records_ != 0 || pending_hello_ || pending_comms_;
  if (!has_data && !force_empty && goodbye == nullptr) return false;
  const uint64_t now = NowCpuNs();
  message_ = pending_;
  ProtoWriter w(&message_);
  w.Varint(kReqBatchSeq, batch_seq_ + 1);
  w.Message(kReqDrops, EncodeDrops(CurrentDrops()));
  w.Varint(kReqSentCpuNs, now);
  if (goodbye != nullptr) w.Message(kReqGoodbye, *goodbye);
  if (!link_->CanEverFit(message_.size())) {
    // Only a huge communicator list can do this; lose the batch, say so.
    export_dropped_.fetch_add(pending_records_);
    pending_.clear();
    pending_records_ = 0;
    pending_comms_ = false;
    return false;
  }
  if (!link_->Write(message_, pending_records_)) return false;  // ring full
  ++batch_seq_;
  records_sent_.fetch_add(pending_records_);
  batches_sent_.fetch_add(1);
  bytes_sent_.fetch_add(message_.size());
  pending_.clear();
  pending_records_ = 0;
  pending_hello_ = false;
  pending_comms_ = false;
  last_send_ns_ = now;
  return true;
}

void Exporter::FinishStream(GoodbyeReason reason, uint64_t deadline_ns) {
  const std::string goodbye = EncodeGoodbye(reason, NowCpuNs());
  // Notice an agent that died since the last tick, then one last try to
  // reach the current one so the goodbye gets through (a Unix connect
  // never waits).
  PollLink(NowCpuNs());
  if (link_ == nullptr) OpenStream(NowCpuNs());
  if (link_ == nullptr) {
    DropAll();
    return;
  }
  // Full batches, then the last one with the goodbye. Waits only while the
  // shared ring is full (the agent is slow or stopped), up to the deadline.
  bool sent = false;
  while (!sent && link_ != nullptr) {
    const bool full = Drain();
    const bool wrote =
        full ? TrySend(false, nullptr) : (sent = TrySend(true, &goodbye));
    if (wrote) continue;
    if (NowCpuNs() >= deadline_ns) break;
    timespec ts{0, 1000000};  // 1 ms: the agent reads every few ms
    nanosleep(&ts, nullptr);
    PollLink(NowCpuNs());
  }
  if (link_ == nullptr) return;
  if (!sent) DropAll();
  link_->SendGoodbye(static_cast<uint32_t>(reason), CurrentCounters());
  // Closing does not wait for the agent: it maps the ring and reads the
  // rest after we are gone.
  link_.reset();
}

void Exporter::Run() {
  const uint64_t tick_ns = uint64_t{options_.flush_interval_ms} * 1000000;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_requested_) cv_.WaitForNs(&mu_, tick_ns);
      if (stop_requested_) {
        const GoodbyeReason reason = stop_reason_;
        const uint64_t deadline =
            NowCpuNs() + uint64_t{options_.finalize_timeout_ms} * 1000000;
        mu_.Unlock();
        FinishStream(reason, deadline);
        mu_.Lock();
        return;
      }
    }
    in_tick_.store(true);
    if (!fork_pause_.load()) Tick();
    in_tick_.store(false);
  }
}

void Exporter::Tick() {
  const uint64_t heartbeat_ns = 1000000000ull;
  const uint64_t now = NowCpuNs();
  PollLink(now);
  registry_->ExpireActivations(now);
  if (options_.on_tick) options_.on_tick();
  if (link_ == nullptr && now >= next_connect_ns_) OpenStream(now);
  if (link_ == nullptr) {
    DropAll();  // no agent: drop and count rather than let the rings fill
    return;
  }
  if (now - last_heartbeat_ns_ >= heartbeat_ns) {
    last_heartbeat_ns_ = now;
    CpuClock::Anchor();  // keep the TSC line on CLOCK_MONOTONIC
    link_->SendHeartbeat(CurrentCounters());
  }
  bool full = Drain();
  bool sent = TrySend(now - last_send_ns_ >= heartbeat_ns, nullptr);
  // A burst: keep writing full batches while the ring takes them.
  while (sent && full) {
    full = Drain();
    sent = TrySend(false, nullptr);
  }
}

void Exporter::PauseForFork() {
  fork_pause_.store(true);
  // A tick is short (it never blocks); the bound only keeps a wedged
  // thread from holding fork() up, which then proceeds as it used to.
  const uint64_t give_up = NowCpuNs() + 500000000ull;
  while (in_tick_.load() && NowCpuNs() < give_up) {
    timespec ts{0, 20000};  // 20 us
    nanosleep(&ts, nullptr);
  }
}

void Exporter::ResumeAfterFork() { fork_pause_.store(false); }

}  // namespace pitstop::plugin
