#include "src/agent/agent_core.h"

#include <algorithm>
#include <utility>

#include "pitstop/status_macros.h"

namespace pitstop::agent {

AgentCore::AgentCore(Clock* clock, AgentCoreOptions options,
                     AgentMetrics* metrics)
    : clock_(clock),
      options_(std::move(options)),
      metrics_(metrics),
      buffer_(options_.buffer_summaries),
      ledger_(clock),
      tenants_(options_.tenants) {}

AgentCore::~AgentCore() = default;

uint64_t AgentCore::OpenStream(CommandSink* sink, const ProcessIdentity& who) {
  auto slot = std::make_shared<Slot>();
  RankJoinerOptions join = options_.join;
  join.host = options_.host;
  {
    MutexLock l(&slot->mu);
    slot->joiner = std::make_unique<RankJoiner>(clock_, join);
  }
  slot->sink = sink;
  slot->who = who;
  MutexLock lock(&mu_);
  const uint64_t id = next_stream_++;
  slots_[id] = std::move(slot);
  return id;
}

uint32_t AgentCore::ReportedPid(uint64_t stream, uint32_t claimed) {
  std::shared_ptr<Slot> slot = FindSlot(stream);
  // `who` is set before the slot is published and never changed.
  if (slot == nullptr || !slot->who.known) return claimed;
  return static_cast<uint32_t>(slot->who.pid);
}

std::shared_ptr<AgentCore::Slot> AgentCore::FindSlot(uint64_t stream) {
  MutexLock lock(&mu_);
  auto it = slots_.find(stream);
  return it == slots_.end() ? nullptr : it->second;
}

void AgentCore::Collect(RankJoiner* joiner) {
  std::vector<v1::CollectiveSummary> summaries;
  joiner->TakeSummaries(&summaries);
  std::vector<v1::RankLifecycle> lifecycle;
  joiner->TakeLifecycle(&lifecycle);
  std::vector<v1::CommunicatorInfo> comms;
  joiner->TakeCommunicators(&comms);
  for (const v1::RankLifecycle& ev : lifecycle) {
    if (ev.kind() == v1::RankLifecycle::KIND_DIED) deaths_.fetch_add(1);
  }
  if (metrics_ != nullptr && !summaries.empty()) {
    metrics_->RecordSummaries(summaries);
  }
  if (!summaries.empty()) buffer_.PushSummaries(&summaries);
  if (!lifecycle.empty()) buffer_.PushLifecycle(&lifecycle);
  if (!comms.empty()) buffer_.PushCommunicators(&comms);
}

absl::Status AgentCore::Admit(uint64_t stream, Slot* slot,
                              const v1::StreamTelemetryRequest& req,
                              v1::StreamTelemetryRequest* copy,
                              const v1::StreamTelemetryRequest** in) {
  *in = &req;
  if (!slot->got_first && !req.has_hello()) {
    return absl::InvalidArgumentError(
        "hello: missing on the first message of the stream");
  }
  bool copied = false;
  if (req.has_hello()) {
    const v1::ProcessHello& h = req.hello();
    ASSIGN_OR_RETURN(LocalTenants::Standing standing,
                     tenants_.Hello(stream, slot->who, h.pid(), h.job_id(),
                                    h.global_rank()));
    // The process is known upstream by what the kernel says of it: its pid
    // on this host (the hello's may be one of a pid namespace, equal to
    // another container's process or chosen by the process in its own
    // namespace) and its start time (R18-2). process_start is the agent's
    // field: a hello's own value is never believed.
    const uint32_t pid =
        slot->who.known ? static_cast<uint32_t>(slot->who.pid) : h.pid();
    const uint64_t start = slot->who.known ? slot->who.start_ticks : 0;
    if (pid != h.pid() || start != h.process_start()) {
      *copy = req;
      copy->mutable_hello()->set_pid(pid);
      copy->mutable_hello()->set_process_start(start);
      copied = true;
    }
    if (standing == LocalTenants::Standing::kAnonymous) {
      // Reports for no job: what the hello claimed is not told upstream.
      if (!copied) *copy = req;
      copy->mutable_hello()->clear_job_id();
      copy->mutable_hello()->set_global_rank(-1);
      copied = true;
    }
  }
  slot->got_first = true;
  // Records for ranks this process may not report for are dropped (the
  // copy is made only then).
  if (tenants_.NeedsFilter(stream, copied ? *copy : req)) {
    if (!copied) *copy = req;
    tenants_.Filter(stream, copy);
    copied = true;
  }
  if (copied) *in = copy;
  return absl::OkStatus();
}

absl::Status AgentCore::OnMessage(uint64_t stream,
                                  const v1::StreamTelemetryRequest& req) {
  if (options_.on_message_for_test) options_.on_message_for_test(req);
  std::shared_ptr<Slot> slot = FindSlot(stream);
  if (slot == nullptr) {
    return absl::FailedPreconditionError("stream already closed");
  }
  uint32_t pid = 0;
  const v1::StreamTelemetryRequest* in = &req;
  v1::StreamTelemetryRequest copy;
  {
    MutexLock l(&slot->mu);
    RETURN_IF_ERROR(Admit(stream, slot.get(), req, &copy, &in));
    RankJoiner* j = slot->joiner.get();
    const uint64_t lost_before = j->stats().batches_lost;
    const uint64_t records_before = j->stats().records;
    const uint64_t refused_before =
        j->stats().invalid_records + j->stats().records_over_cap;
    absl::Status st = j->Add(stream, *in);
    if (!st.ok()) return st;
    j->Poll();
    records_.fetch_add(j->stats().records - records_before,
                       std::memory_order_relaxed);
    batches_lost_.fetch_add(j->stats().batches_lost - lost_before,
                            std::memory_order_relaxed);
    records_refused_.fetch_add(j->stats().invalid_records +
                                   j->stats().records_over_cap - refused_before,
                               std::memory_order_relaxed);
    if (const v1::ProcessHello* h = j->hello(stream)) pid = h->pid();
    if (in->has_hello()) {
      slot->job_id = in->hello().job_id();
      slot->global_rank = in->hello().global_rank();
    }
    Collect(j);
  }
  if (RankMigrationListener* l = migration_listener_.load()) {
    if (in->has_hello()) {
      l->OnRankHello(stream, in->hello().job_id(), in->hello().global_rank());
    }
    if (in->migration_acks_size() > 0) {
      l->OnRankAcks(stream, in->migration_acks());
    }
  }
  if (req.has_drops()) {
    const v1::DropCounters& d = req.drops();
    const uint64_t dropped =
        d.ring_full() + d.pool_exhausted() + d.export_dropped();
    MutexLock lock(&mu_);
    uint64_t& v = dropped_by_pid_[pid];
    v = std::max(v, dropped);
  }
  return absl::OkStatus();
}

void AgentCore::CloseStream(uint64_t stream) {
  std::shared_ptr<Slot> slot;
  bool stopping;
  {
    MutexLock lock(&mu_);
    auto it = slots_.find(stream);
    if (it == slots_.end()) return;
    slot = std::move(it->second);
    slots_.erase(it);
    stopping = stopping_;
  }
  uint32_t pid = 0;
  // Only a process that reports for a job ends as a death: not one that
  // lost its job to a process with stronger evidence (it ends silently:
  // its ranks are the job's real processes' now), nor an anonymous tenant
  // (LocalTenants), whose end is a CLEAN_EXIT: what it registered upstream
  // is released, no fault is raised (R18-5).
  const bool of_a_job = tenants_.ReportsForAJob(stream);
  const bool quarantined = tenants_.Quarantined(stream);
  {
    MutexLock l(&slot->mu);
    if (const v1::ProcessHello* h = slot->joiner->hello(stream)) {
      pid = h->pid();
    }
    slot->joiner->EndStream(stream, stopping || quarantined,
                            /*no_death=*/!of_a_job);
    Collect(slot->joiner.get());
  }
  tenants_.Closed(stream);
  // Bound the per-process drop table: past kMaxDropPids, a closing
  // process's count moves into the base sum (a reconnect of that pid would
  // then count its cumulative drops again).
  MutexLock lock(&mu_);
  if (dropped_by_pid_.size() > kMaxDropPids) {
    auto it = dropped_by_pid_.find(pid);
    if (it != dropped_by_pid_.end()) {
      dropped_base_ += it->second;
      dropped_by_pid_.erase(it);
    }
  }
}

void AgentCore::SetMigrationListener(RankMigrationListener* listener) {
  migration_listener_.store(listener);
}

std::vector<AgentCore::LocalRank> AgentCore::RanksOfJob(
    const std::string& job_id) {
  std::vector<std::pair<uint64_t, std::shared_ptr<Slot>>> slots;
  {
    MutexLock lock(&mu_);
    slots.assign(slots_.begin(), slots_.end());
  }
  std::vector<LocalRank> out;
  for (const auto& [id, slot] : slots) {
    MutexLock l(&slot->mu);
    if (slot->got_first && slot->job_id == job_id &&
        !tenants_.Quarantined(id)) {
      out.push_back({id, slot->global_rank});
    }
  }
  std::sort(out.begin(), out.end(), [](const LocalRank& a, const LocalRank& b) {
    return a.stream < b.stream;
  });
  return out;
}

bool AgentCore::SendToStream(uint64_t stream,
                             const v1::StreamTelemetryResponse& response) {
  // Under the core's lock: the sink lives until CloseStream took the slot.
  MutexLock lock(&mu_);
  auto it = slots_.find(stream);
  if (it == slots_.end() || it->second->sink == nullptr) return false;
  it->second->sink->SendResponse(response);
  return true;
}

void AgentCore::SetStopping() {
  MutexLock lock(&mu_);
  stopping_ = true;
}

void AgentCore::FillBatch(size_t max_summaries, v1::ConnectRequest* out) {
  // First: every record counted here has been through OnMessage, so what
  // it became (summaries below, progress, an open op) goes in this batch.
  std::vector<v1::ProcessRecords> processes;
  const uint64_t sent = ledger_.Snapshot(&processes);
  for (auto& p : processes) *out->add_process_records() = std::move(p);
  std::vector<std::pair<uint64_t, std::shared_ptr<Slot>>> slots;
  {
    MutexLock lock(&mu_);
    slots.assign(slots_.begin(), slots_.end());
  }
  std::vector<v1::RankProgress> progress;
  for (auto& [id, s] : slots) {
    // A quarantined process (LocalTenants) reports nothing more: its
    // stalled progress would read as a hang in the job it lost.
    const bool quarantined = tenants_.Quarantined(id);
    MutexLock l(&s->mu);
    s->joiner->Poll();
    Collect(s->joiner.get());
    if (!quarantined) s->joiner->SnapshotProgress(&progress);
  }
  for (auto& p : progress) {
    p.set_process_silent_ns(ledger_.SilentNs(p.pid()));
    *out->add_progress() = std::move(p);
  }
  buffer_.Drain(max_summaries, out);
  *out->mutable_counters() = Counters();
  out->mutable_counters()->set_rank_records_sent(sent);
  out->set_sent_cpu_ns(clock_->MonotonicNanos());
  out->set_sent_unix_ns(absl::ToUnixNanos(clock_->Now()));
}

void AgentCore::Poll() {
  std::vector<std::shared_ptr<Slot>> slots;
  {
    MutexLock lock(&mu_);
    for (auto& [id, s] : slots_) slots.push_back(s);
  }
  for (auto& s : slots) {
    MutexLock l(&s->mu);
    s->joiner->Poll();
    Collect(s->joiner.get());
  }
}

void AgentCore::AllCommunicators(std::vector<v1::CommunicatorInfo>* out) {
  std::vector<std::pair<uint64_t, std::shared_ptr<Slot>>> slots;
  {
    MutexLock lock(&mu_);
    slots.assign(slots_.begin(), slots_.end());
  }
  for (auto& [id, s] : slots) {
    if (tenants_.Quarantined(id)) continue;  // as in FillBatch
    MutexLock l(&s->mu);
    s->joiner->AllCommunicators(out);
  }
}

int AgentCore::ApplyActivation(uint64_t command_id,
                               const v1::SetActivationMask& mask) {
  v1::ActivationCommand cmd;
  cmd.set_comm_hash(mask.comm_hash());
  cmd.set_event_mask(mask.event_mask());
  cmd.set_duration_ms(mask.duration_ms());
  cmd.set_command_id(command_id);
  int sent = 0;
  MutexLock lock(&mu_);
  for (auto& [id, s] : slots_) {
    MutexLock l(&s->mu);
    if (!s->joiner->StreamInComm(id, mask.comm_hash(), mask.rank())) continue;
    s->sink->SendActivation(cmd);
    ++sent;
  }
  return sent;
}

uint32_t AgentCore::connected_ranks() {
  MutexLock lock(&mu_);
  return static_cast<uint32_t>(slots_.size());
}

v1::AgentCounters AgentCore::Counters() {
  v1::AgentCounters c;
  {
    MutexLock lock(&mu_);
    uint64_t dropped = dropped_base_;
    for (const auto& [pid, d] : dropped_by_pid_) dropped += d;
    c.set_plugin_dropped(dropped);
    c.set_connected_ranks(static_cast<uint32_t>(slots_.size()));
  }
  const UpstreamBuffer::Counters b = buffer_.counters();
  c.set_summaries_aggregated(b.summaries_aggregated);
  c.set_summaries_dropped(b.summaries_dropped);
  c.set_records_ingested(records_.load());
  c.set_undelivered(undelivered_.load());
  return c;
}

uint64_t AgentCore::CountUndelivered() {
  const uint64_t n = buffer_.Pending();
  undelivered_.fetch_add(n);
  return n;
}

void AgentCore::PublishMetrics(bool upstream_connected,
                               uint64_t upstream_reconnects) {
  if (metrics_ == nullptr) return;
  const v1::AgentCounters c = Counters();
  AgentMetrics::Totals t;
  t.records_ingested = c.records_ingested();
  t.batches_lost = batches_lost_.load();
  t.plugin_dropped = c.plugin_dropped();
  t.summaries_aggregated = c.summaries_aggregated();
  t.summaries_dropped = c.summaries_dropped();
  t.rank_deaths = deaths_.load();
  t.upstream_reconnects = upstream_reconnects;
  t.queued_summaries = buffer_.counters().queued;
  t.connected_ranks = c.connected_ranks();
  t.upstream_connected = upstream_connected;
  t.records_refused = records_refused_.load();
  t.connections_refused = connections_refused_.load();
  t.undelivered = undelivered_.load();
  t.pid_refused = pid_refused_.load();
  t.messages_refused = messages_refused_.load();
  const LocalTenants::Stats claims = tenants_.stats();
  t.job_claims_refused = claims.jobs_refused;
  t.rank_claims_refused = claims.ranks_refused;
  t.comm_claims_refused = claims.comms_refused;
  t.claim_tables_full = claims.tables_full;
  t.job_claims_unproven = claims.unproven;
  t.job_claims_unverified = claims.unverified;
  t.job_claims_quarantined = claims.quarantined;
  t.process_claims_over_cap = claims.process_over_cap;
  t.uid_claims_over_share = claims.uid_over_share;
  t.job_claims_uid_not_for_jobs = claims.uid_not_for_jobs;
  t.trainer_claims_refused = claims.trainers_refused;
  t.listed_claims_refused = claims.listed_refused;
  metrics_->SetTotals(t);
}

}  // namespace pitstop::agent
