#include "src/agent/rank_joiner.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/agent/join_state.h"

namespace pitstop::agent {
namespace {

constexpr size_t kRecentEmitted = 8192;
constexpr size_t kEndedComms = 64;

uint64_t MinNonZero(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

uint64_t Dropped(const v1::DropCounters& d) {
  return d.ring_full() + d.pool_exhausted() + d.export_dropped();
}

// Time in send / recv wait of one proxy step (ns): from entering the wait
// state to the next state or the step's stop.
void StepWaits(const v1::ProxyStepRecord& st, uint64_t* send_wait,
               uint64_t* recv_wait) {
  const uint64_t stop = st.stop_cpu_ns();
  if (st.send_wait_cpu_ns() != 0 && stop > st.send_wait_cpu_ns()) {
    *send_wait += stop - st.send_wait_cpu_ns();
  }
  if (st.recv_wait_cpu_ns() != 0) {
    uint64_t end = st.recv_flush_wait_cpu_ns();
    if (end == 0) end = st.recv_gpu_wait_cpu_ns();
    if (end == 0) end = stop;
    if (end > st.recv_wait_cpu_ns()) *recv_wait += end - st.recv_wait_cpu_ns();
  }
}

// Why a string field is refused (it would be kept per communicator or
// stream), or "".
std::string LongString(const std::string& v, const char* field) {
  if (v.size() <= kMaxStringBytes) return "";
  return absl::StrCat(field, ": ", v.size(), " bytes (at most ",
                      kMaxStringBytes, ")");
}

// Why `info` is rejected (sizes it would make the agent allocate), or "".
std::string InvalidComm(const v1::CommunicatorInfo& info) {
  for (auto [v, field] :
       {std::pair{&info.comm_name(), "communicators.info.comm_name"},
        std::pair{&info.host(), "communicators.info.host"},
        std::pair{&info.job_id(), "communicators.info.job_id"}}) {
    if (std::string why = LongString(*v, field); !why.empty()) return why;
  }
  if (info.n_ranks() < 0 || info.n_ranks() > kMaxCommRanks) {
    return absl::StrCat("communicators.info.n_ranks: ", info.n_ranks(),
                        " outside [0, ", kMaxCommRanks, "]");
  }
  if (info.n_ranks() > 0 &&
      (info.rank() < 0 || info.rank() >= info.n_ranks())) {
    return absl::StrCat("communicators.info.rank: ", info.rank(),
                        " outside [0, n_ranks=", info.n_ranks(), ")");
  }
  if (info.global_ranks_size() > kMaxCommRanks ||
      (info.n_ranks() > 0 && info.global_ranks_size() > info.n_ranks())) {
    return absl::StrCat(
        "communicators.info.global_ranks: ", info.global_ranks_size(),
        " entries for n_ranks=", info.n_ranks());
  }
  return "";
}

}  // namespace

RankJoiner::RankJoiner(Clock* clock, RankJoinerOptions options)
    : clock_(clock), options_(std::move(options)) {}

RankJoiner::~RankJoiner() = default;

RankJoiner::Stream* RankJoiner::GetStream(uint64_t id) {
  auto& slot = streams_[id];
  if (!slot) {
    slot = std::make_unique<Stream>();
    slot->id = id;
    slot->hello.set_global_rank(-1);
  }
  return slot.get();
}

namespace {

// Returns the op for `op_id`, creating it; nullptr if it was emitted already
// (a late record) or the cap forced an eviction that failed.
JoinOp* FindOrCreateOp(RankJoiner::Stream* s, uint64_t op_id, int64_t now,
                       RankJoinerStats* stats) {
  auto it = s->ops.find(op_id);
  if (it != s->ops.end()) return &it->second;
  if (s->recent.contains(op_id)) {
    ++stats->late_records;
    return nullptr;
  }
  JoinOp& op = s->ops[op_id];
  op.creation = s->next_creation++;
  op.created_ns = now;
  s->order.emplace(op.creation, op_id);
  return &op;
}

}  // namespace

absl::Status RankJoiner::Add(uint64_t stream,
                             const v1::StreamTelemetryRequest& req) {
  Stream* s = GetStream(stream);
  if (req.has_hello() && s->has_hello) {
    return absl::InvalidArgumentError(
        "hello: sent twice on one stream (only the first message carries it)");
  }
  if (s->goodbye) {
    return absl::InvalidArgumentError(
        "goodbye: a message arrived after the stream's goodbye");
  }
  const int64_t now = clock_->MonotonicNanos();
  ++stats_.batches;
  if (absl::Status st = AddHello(s, req); !st.ok()) return st;
  AddInitFailures(s, req);
  NoteSequenceAndDrops(s, req);
  if (DropOverCap(stream, s, req)) return absl::OkStatus();
  std::vector<uint64_t> ended;  // ended after this batch's ops
  AddCommunicators(stream, s, req, &ended);
  std::vector<uint64_t> touched;
  AddOpRecords(stream, s, req, now, &touched);
  AddKernelChannels(s, req, now, &touched);
  AddProxyRecords(stream, s, req, now, &touched);
  AddCompletions(s, req, now, &touched);
  EmitCompleted(s, touched);
  for (uint64_t hash : ended) EndComm(s, hash);
  if (req.has_goodbye()) s->goodbye = true;
  return absl::OkStatus();
}

absl::Status RankJoiner::AddHello(Stream* s,
                                  const v1::StreamTelemetryRequest& req) {
  if (!req.has_hello()) return absl::OkStatus();
  const v1::ProcessHello& h = req.hello();
  for (auto [v, field] :
       {std::pair{&h.host(), "hello.host"},
        std::pair{&h.job_id(), "hello.job_id"},
        std::pair{&h.library_version(), "hello.library_version"},
        std::pair{&h.load_mode(), "hello.load_mode"}}) {
    if (std::string why = LongString(*v, field); !why.empty()) {
      return absl::InvalidArgumentError(why);
    }
  }
  s->has_hello = true;
  s->hello = h;
  // Kept for the stream's life: fields this agent does not know (a newer
  // library, or padding meant to cost memory) are not.
  s->hello.DiscardUnknownFields();
  EmitLifecycle(s, v1::RankLifecycle::KIND_STREAM_OPENED);
  return absl::OkStatus();
}

void RankJoiner::AddInitFailures(Stream* s,
                                 const v1::StreamTelemetryRequest& req) {
  // Failed communicator creations (a configuration error of the job): each
  // becomes a lifecycle event for the controller. Bounded per message; long
  // texts are cut, not refused (the error text is the evidence).
  for (int i = 0; i < req.init_failures_size() && i < kMaxInitFailures; ++i) {
    v1::CommInitFailure f = req.init_failures(i);
    f.DiscardUnknownFields();
    if (f.call().size() > 64) f.mutable_call()->resize(64);
    if (f.error().size() > kMaxInitErrorText) {
      f.mutable_error()->resize(kMaxInitErrorText);
    }
    EmitLifecycle(s, v1::RankLifecycle::KIND_COMM_INIT_FAILED);
    *lifecycle_.back().mutable_init_failure() = std::move(f);
  }
}

void RankJoiner::NoteSequenceAndDrops(Stream* s,
                                      const v1::StreamTelemetryRequest& req) {
  if (req.batch_seq() != 0) {
    if (s->last_batch_seq != 0 && req.batch_seq() > s->last_batch_seq + 1) {
      stats_.batches_lost += req.batch_seq() - s->last_batch_seq - 1;
    }
    s->last_batch_seq = std::max(s->last_batch_seq, req.batch_seq());
  }
  if (req.has_drops()) {
    const uint64_t before = s->has_drops ? Dropped(s->drops) : 0;
    const uint64_t after = Dropped(req.drops());
    if (after > before) stats_.plugin_dropped += after - before;
    s->drops = req.drops();
    s->drops.DiscardUnknownFields();
    s->has_drops = true;
  }
}

bool RankJoiner::DropOverCap(uint64_t stream, Stream* s,
                             const v1::StreamTelemetryRequest& req) {
  const size_t n_records = static_cast<size_t>(req.communicators_size()) +
                           req.ops_size() + req.completions_size() +
                           req.kernel_channels_size() + req.proxy_ops_size() +
                           req.proxy_steps_size() + req.net_events_size();
  stats_.records += n_records;
  if (n_records <= kMaxRecordsPerMessage) return false;
  // One message must not hold the stream's lock for long: its records are
  // dropped and counted; hello, drops and goodbye still count.
  stats_.records_over_cap += n_records;
  if (!s->over_cap_logged) {
    s->over_cap_logged = true;
    Logger("agent.join")
        ->warn(
            "stream {} (pid {}): dropping a message of {} records (at most {} "
            "per message; further ones only counted)",
            stream, s->hello.pid(), n_records, kMaxRecordsPerMessage);
  }
  if (req.has_goodbye()) s->goodbye = true;
  return true;
}

void RankJoiner::Invalid(uint64_t stream, Stream* s, std::string why) {
  ++stats_.invalid_records;
  if (s->first_invalid.empty()) {  // warn once per stream
    Logger("agent.join")
        ->warn(
            "stream {} (pid {}): dropping records: {} (further invalid "
            "records of this stream only counted)",
            stream, s->hello.pid(), why);
    s->first_invalid = std::move(why);
  }
}

JoinConn* RankJoiner::FindConn(uint64_t stream, Stream* s, uint64_t op_id,
                               uint32_t index, int64_t now) {
  if (index >= kMaxConnsPerOp) {
    Invalid(stream, s,
            absl::StrCat("proxy_index: ", index, " >= ", kMaxConnsPerOp));
    return nullptr;
  }
  JoinOp* op = FindOrCreateOp(s, op_id, now, &stats_);
  if (op == nullptr) return nullptr;
  if (op->conns.size() <= index) {
    const size_t grow = index + 1 - op->conns.size();
    if (s->conn_slots + grow > kMaxConnsPerStream) {
      Invalid(stream, s,
              absl::StrCat("proxy ops: more than ", kMaxConnsPerStream,
                           " connections open on one stream"));
      return nullptr;
    }
    s->conn_slots += grow;
    op->conns.resize(index + 1);
  }
  return &op->conns[index];
}

void RankJoiner::AddCommunicators(uint64_t stream, Stream* s,
                                  const v1::StreamTelemetryRequest& req,
                                  std::vector<uint64_t>* ended) {
  const std::string& host =
      options_.host.empty() ? s->hello.host() : options_.host;
  for (const v1::CommunicatorEvent& ev : req.communicators()) {
    if (std::string why = InvalidComm(ev.info()); !why.empty()) {
      Invalid(stream, s, std::move(why));
      continue;
    }
    const bool is_end = ev.kind() == v1::CommunicatorEvent::KIND_FINALIZE ||
                        ev.kind() == v1::CommunicatorEvent::KIND_ABORT;
    if (!is_end && !s->comms.contains(ev.info().comm_hash()) &&
        s->comms.size() >= kMaxCommsPerStream) {
      Invalid(stream, s,
              absl::StrCat("communicators: more than ", kMaxCommsPerStream,
                           " live communicators on one stream"));
      continue;
    }
    v1::CommunicatorInfo info = ev.info();
    // The agent names its own host: a process on it cannot report for
    // another (offline, without options_.host, the record's own is kept).
    if (!options_.host.empty() || info.host().empty()) info.set_host(host);
    // So does its process: the pid and start the agent vouches for
    // (ProcessHello.process_start), not what the record says (R18-2).
    if (!options_.host.empty() || info.pid() == 0) {
      info.set_pid(s->hello.pid());
      info.set_process_start(s->hello.process_start());
    }
    if (info.job_id().empty()) info.set_job_id(s->hello.job_id());
    const int32_t g = s->hello.global_rank();
    auto live = s->comms.find(info.comm_hash());
    const size_t replaced =
        live == s->comms.end() || is_end ? 0 : live->second.global_ranks_size();
    const size_t entries =
        info.global_ranks_size() > 0
            ? static_cast<size_t>(info.global_ranks_size())
            : static_cast<size_t>(std::max(0, info.n_ranks()));
    if (!is_end &&
        s->global_rank_entries - replaced + entries > kMaxGlobalRankEntries) {
      Invalid(stream, s,
              absl::StrCat("communicators: more than ", kMaxGlobalRankEntries,
                           " global_ranks entries over one stream's live "
                           "communicators"));
      continue;
    }
    if (info.global_ranks_size() == 0 && g >= 0 && info.n_ranks() > 0 &&
        info.rank() >= 0 && info.rank() < info.n_ranks()) {
      for (int i = 0; i < info.n_ranks(); ++i) info.add_global_ranks(-1);
      info.set_global_ranks(info.rank(), g);
    }
    if (is_end) {
      // The controller stops expecting work of this member there.
      info.set_finalized(ev.kind() == v1::CommunicatorEvent::KIND_FINALIZE);
      ended->push_back(info.comm_hash());  // after this batch's ops
      communicators_.push_back(std::move(info));
      continue;
    }
    s->global_rank_entries =
        s->global_rank_entries - replaced + info.global_ranks_size();
    info.DiscardUnknownFields();
    s->comms[info.comm_hash()] = info;
    communicators_.push_back(std::move(info));
  }
}

void RankJoiner::AddOpRecords(uint64_t stream, Stream* s,
                              const v1::StreamTelemetryRequest& req,
                              int64_t now, std::vector<uint64_t>* touched) {
  for (const v1::OpRecord& r : req.ops()) {
    const std::tuple<uint64_t, int32_t, int> key{r.comm_hash(), r.rank(),
                                                 static_cast<int>(r.func())};
    if (s->progress.size() >= kMaxProgressKeys && !s->progress.contains(key)) {
      Invalid(stream, s,
              absl::StrCat("ops: more than ", kMaxProgressKeys,
                           " (comm_hash, rank, func) keys on one stream"));
      continue;
    }
    JoinOp* op = FindOrCreateOp(s, r.op_id(), now, &stats_);
    if (op == nullptr) continue;
    op->has_record = true;
    op->record = r;
    // Up to max_open_ops are kept: unknown fields would let each one cost
    // as much as a message.
    op->record.DiscardUnknownFields();
    ProgressState& p = s->progress[key];
    p.pid = s->hello.pid();
    p.last_enqueued_seq = std::max(p.last_enqueued_seq, r.seq_number());
    p.last_enqueue_cpu_ns =
        std::max({p.last_enqueue_cpu_ns, r.enqueue_start_cpu_ns(),
                  r.enqueue_stop_cpu_ns()});
    touched->push_back(r.op_id());
  }
}

void RankJoiner::AddKernelChannels(Stream* s,
                                   const v1::StreamTelemetryRequest& req,
                                   int64_t now,
                                   std::vector<uint64_t>* touched) {
  for (const v1::KernelChannelRecord& k : req.kernel_channels()) {
    JoinOp* op = FindOrCreateOp(s, k.op_id(), now, &stats_);
    if (op == nullptr) continue;
    ++op->channels;
    ++op->children_seen;
    s->fit.AddSample(k.start_cpu_ns(), k.start_gpu_ns());
    s->fit.AddSample(k.stop_cpu_ns(), k.stop_gpu_ns());
    op->start_gpu_min = MinNonZero(op->start_gpu_min, k.start_gpu_ns());
    op->stop_gpu_max = std::max(op->stop_gpu_max, k.stop_gpu_ns());
    if (k.start_gpu_ns() != 0 && k.stop_gpu_ns() >= k.start_gpu_ns()) {
      op->kernel_duration_ns =
          std::max(op->kernel_duration_ns, k.stop_gpu_ns() - k.start_gpu_ns());
    }
    op->start_cpu_min = MinNonZero(op->start_cpu_min, k.start_cpu_ns());
    op->stop_cpu_max = std::max(op->stop_cpu_max, k.stop_cpu_ns());
    touched->push_back(k.op_id());
  }
}

void RankJoiner::AddProxyRecords(uint64_t stream, Stream* s,
                                 const v1::StreamTelemetryRequest& req,
                                 int64_t now, std::vector<uint64_t>* touched) {
  for (const v1::ProxyOpRecord& p : req.proxy_ops()) {
    JoinConn* cp = FindConn(stream, s, p.op_id(), p.proxy_index(), now);
    if (cp == nullptr) continue;
    JoinOp* op = &s->ops.find(p.op_id())->second;
    JoinConn& c = *cp;
    if (!c.present) ++op->children_seen;
    c.present = true;
    c.peer = p.peer();
    c.channel = p.channel_id();
    c.is_send = p.is_send();
    c.bytes = p.bytes();
    c.steps = std::max(p.n_steps(), p.steps_seen());
    c.start_cpu_ns = p.start_cpu_ns();
    c.stop_cpu_ns = p.stop_cpu_ns();
    c.send_wait_ns = p.send_wait_ns();
    c.recv_wait_ns = p.recv_wait_ns();
    if (p.steps_seen() > 0) op->deep = true;
    touched->push_back(p.op_id());
  }
  for (const v1::ProxyStepRecord& st : req.proxy_steps()) {
    JoinConn* cp = FindConn(stream, s, st.op_id(), st.proxy_index(), now);
    if (cp == nullptr) continue;
    JoinOp* op = &s->ops.find(st.op_id())->second;
    JoinConn& c = *cp;
    ++c.step_records;
    c.step_bytes += st.bytes();
    StepWaits(st, &c.step_send_wait_ns, &c.step_recv_wait_ns);
    op->deep = true;
  }
}

void RankJoiner::AddCompletions(Stream* s,
                                const v1::StreamTelemetryRequest& req,
                                int64_t now, std::vector<uint64_t>* touched) {
  for (const v1::OpCompletion& c : req.completions()) {
    JoinOp* op = FindOrCreateOp(s, c.op_id(), now, &stats_);
    if (op == nullptr) continue;
    op->completed = true;
    op->completion_cpu_ns = c.completion_cpu_ns();
    op->children_expected = c.children();
    op->completion_seen_ns = now;
    touched->push_back(c.op_id());
  }
}

void RankJoiner::EmitCompleted(Stream* s,
                               const std::vector<uint64_t>& touched) {
  // Emit what is complete; park completed ops still missing children.
  for (uint64_t id : touched) {
    auto it = s->ops.find(id);
    if (it == s->ops.end() || !it->second.completed) continue;
    JoinOp& op = it->second;
    if (op.has_record && op.children_seen >= op.children_expected) {
      EmitOp(s, id, /*forced=*/false);
    } else if (!op.pending) {
      op.pending = true;
      s->pending.push_back(id);
    }
  }
  // Cap: push out the oldest incomplete ops (O(log n) each).
  while (s->ops.size() > options_.max_open_ops && !s->order.empty()) {
    ++stats_.ops_evicted;
    EmitOp(s, s->order.begin()->second, /*forced=*/true);
  }
}

void RankJoiner::EndComm(Stream* s, uint64_t comm_hash) {
  auto it = s->comms.find(comm_hash);
  if (it == s->comms.end()) return;
  s->global_rank_entries -=
      std::min<size_t>(s->global_rank_entries, it->second.global_ranks_size());
  // Only this rank's own entry is read from an ended communicator: keep
  // kEndedComms of them small whatever their size.
  v1::CommunicatorInfo& info = it->second;
  if (info.rank() >= 0 && info.global_ranks_size() > info.rank() + 1) {
    info.mutable_global_ranks()->Truncate(info.rank() + 1);
  }
  s->ended_comms.push_back(std::move(info));
  if (s->ended_comms.size() > kEndedComms) s->ended_comms.pop_front();
  s->comms.erase(it);
  // No progress is expected from a finalized communicator.
  for (auto p = s->progress.begin(); p != s->progress.end();) {
    p = std::get<0>(p->first) == comm_hash ? s->progress.erase(p)
                                           : std::next(p);
  }
}

void RankJoiner::EmitOp(Stream* s, uint64_t op_id, bool forced) {
  auto it = s->ops.find(op_id);
  if (it == s->ops.end()) return;
  JoinOp& op = it->second;
  if (op.has_record) {
    const v1::OpRecord& r = op.record;
    // No progress for a communicator that has ended (its last ops may
    // still be emitted after the finalize).
    static thread_local ProgressState discard;
    const bool ended = !s->comms.contains(r.comm_hash()) &&
                       s->FindComm(r.comm_hash()) != nullptr;
    discard = ProgressState();
    ProgressState& p = ended ? discard
                             : s->progress[{r.comm_hash(), r.rank(),
                                            static_cast<int>(r.func())}];
    if (op.channels > 0 || !op.conns.empty() || op.completed) {
      p.last_started_seq = std::max(p.last_started_seq, r.seq_number());
    }
    if (op.completed) {
      p.last_completed_seq = std::max(p.last_completed_seq, r.seq_number());
      p.last_completion_cpu_ns =
          std::max(p.last_completion_cpu_ns, op.completion_cpu_ns);
    }
    summaries_.push_back(BuildSummary(*s, op));
    ++stats_.summaries;
  } else {
    ++stats_.orphan_ops;
  }
  (void)forced;
  s->conn_slots -= std::min(s->conn_slots, op.conns.size());
  s->order.erase(op.creation);
  s->ops.erase(it);
  s->recent.insert(op_id);
  s->recent_order.push_back(op_id);
  if (s->recent_order.size() > kRecentEmitted) {
    s->recent.erase(s->recent_order.front());
    s->recent_order.pop_front();
  }
}

void RankJoiner::Poll() {
  const int64_t now = clock_->MonotonicNanos();
  for (auto& [id, sp] : streams_) {
    Stream* s = sp.get();
    std::vector<uint64_t> pending;
    pending.swap(s->pending);
    for (uint64_t op_id : pending) {
      auto it = s->ops.find(op_id);
      if (it == s->ops.end()) continue;
      // Without its OpRecord there is nothing to summarise yet: the record
      // is on its way from another thread's ring (a loaded node delays it
      // past any grace); the open-op cap and timeout still bound the wait.
      if (it->second.has_record &&
          now - it->second.completion_seen_ns >= options_.grace_ns) {
        EmitOp(s, op_id, /*forced=*/false);
      } else {
        s->pending.push_back(op_id);
      }
    }
    while (!s->order.empty()) {
      const uint64_t op_id = s->order.begin()->second;
      auto it = s->ops.find(op_id);
      if (it == s->ops.end()) {  // cannot happen: emitting erases the entry
        s->order.erase(s->order.begin());
        continue;
      }
      if (now - it->second.created_ns < options_.incomplete_timeout_ns) break;
      ++stats_.ops_timed_out;
      EmitOp(s, op_id, /*forced=*/true);
    }
  }
}

void RankJoiner::EndStream(uint64_t stream, bool agent_stopping,
                           bool no_death) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  Stream* s = it->second.get();
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (const auto& [id, op] : s->ops) live.push_back({op.creation, id});
  std::sort(live.begin(), live.end());
  for (const auto& [c, id] : live) EmitOp(s, id, /*forced=*/true);
  if (s->goodbye || (no_death && !agent_stopping)) {
    EmitLifecycle(s, v1::RankLifecycle::KIND_CLEAN_EXIT);
  } else if (!agent_stopping) {
    EmitLifecycle(s, v1::RankLifecycle::KIND_DIED);
  }
  streams_.erase(it);
}

void RankJoiner::FlushAll() {
  for (auto& [id, sp] : streams_) {
    Stream* s = sp.get();
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (const auto& [op_id, op] : s->ops) live.push_back({op.creation, op_id});
    std::sort(live.begin(), live.end());
    for (const auto& [c, op_id] : live) EmitOp(s, op_id, /*forced=*/true);
    s->pending.clear();
    s->order.clear();
  }
}

void RankJoiner::EmitLifecycle(Stream* s, v1::RankLifecycle::Kind kind) {
  v1::RankLifecycle ev;
  ev.set_kind(kind);
  ev.set_job_id(s->hello.job_id());
  ev.set_pid(s->hello.pid());
  ev.set_process_start(s->hello.process_start());
  ev.set_global_rank(s->hello.global_rank());
  for (const auto& [hash, info] : s->comms) *ev.add_communicators() = info;
  ev.set_time_cpu_ns(clock_->MonotonicNanos());
  ev.set_time_unix_ns(absl::ToUnixNanos(clock_->Now()));
  lifecycle_.push_back(std::move(ev));
}

void RankJoiner::TakeSummaries(std::vector<v1::CollectiveSummary>* out) {
  if (out->empty()) {
    out->swap(summaries_);
  } else {
    std::move(summaries_.begin(), summaries_.end(), std::back_inserter(*out));
  }
  summaries_.clear();
}

void RankJoiner::TakeLifecycle(std::vector<v1::RankLifecycle>* out) {
  std::move(lifecycle_.begin(), lifecycle_.end(), std::back_inserter(*out));
  lifecycle_.clear();
}

void RankJoiner::TakeCommunicators(std::vector<v1::CommunicatorInfo>* out) {
  std::move(communicators_.begin(), communicators_.end(),
            std::back_inserter(*out));
  communicators_.clear();
}

namespace {

// What SnapshotProgress needs of a (comm, rank, func)'s open ops: its
// oldest incomplete op and the highest sequence number that started.
struct OpenOfKey {
  const JoinOp* oldest = nullptr;
  uint64_t started = 0;
};
using ProgressKey = std::tuple<uint64_t, int32_t, int>;

// The stream's incomplete ops by key, in one pass over them (issue #33 N2:
// a scan of every op per key was O(keys x ops) under the stream's lock).
absl::flat_hash_map<ProgressKey, OpenOfKey> IndexOpenOps(
    const RankJoiner::Stream& s) {
  absl::flat_hash_map<ProgressKey, OpenOfKey> index;
  for (const auto& [op_id, op] : s.ops) {
    if (!op.has_record || op.completed) continue;
    const v1::OpRecord& r = op.record;
    OpenOfKey& k =
        index[ProgressKey(r.comm_hash(), r.rank(), static_cast<int>(r.func()))];
    if (op.channels > 0 || !op.conns.empty()) {
      k.started = std::max(k.started, r.seq_number());
    }
    if (k.oldest == nullptr || op.creation < k.oldest->creation) k.oldest = &op;
  }
  return index;
}

}  // namespace

void RankJoiner::SnapshotProgress(std::vector<v1::RankProgress>* out) const {
  const int64_t now = clock_->MonotonicNanos();
  for (const auto& [sid, sp] : streams_) {
    const Stream& s = *sp;
    const absl::flat_hash_map<ProgressKey, OpenOfKey> open = IndexOpenOps(s);
    // (comm, rank) pairs that enqueued something.
    absl::flat_hash_set<std::pair<uint64_t, int32_t>> active;
    for (const auto& [key, p] : s.progress) {
      const auto& [comm, rank, func] = key;
      active.emplace(comm, rank);
      v1::RankProgress& rp = out->emplace_back();
      rp.set_comm_hash(comm);
      rp.set_rank(rank);
      int32_t g = s.hello.global_rank();
      if (const v1::CommunicatorInfo* c = s.FindComm(comm);
          c != nullptr && rank >= 0 && rank < c->global_ranks_size() &&
          c->global_ranks(rank) >= 0) {
        g = c->global_ranks(rank);
      }
      rp.set_global_rank(g);
      rp.set_pid(p.pid != 0 ? p.pid : s.hello.pid());
      rp.set_func(static_cast<v1::CollFunc>(func));
      rp.set_last_enqueued_seq(p.last_enqueued_seq);
      rp.set_last_completed_seq(p.last_completed_seq);
      rp.set_last_enqueue_cpu_ns(p.last_enqueue_cpu_ns);
      rp.set_last_completion_cpu_ns(p.last_completion_cpu_ns);
      rp.set_now_cpu_ns(now);
      // Oldest incomplete op of this (comm, rank, func) and its proxy
      // progress so far.
      auto o = open.find(key);
      const JoinOp* oldest = o == open.end() ? nullptr : o->second.oldest;
      rp.set_last_started_seq(
          o == open.end() ? p.last_started_seq
                          : std::max(p.last_started_seq, o->second.started));
      if (oldest != nullptr) {
        rp.set_oldest_incomplete_seq(oldest->record.seq_number());
        rp.set_oldest_incomplete_count(oldest->record.count());
        rp.set_oldest_incomplete_datatype(oldest->record.datatype());
        rp.set_oldest_incomplete_age_ns(
            now > oldest->created_ns ? now - oldest->created_ns : 0);
        const v1::CollectiveSummary partial = BuildSummary(s, *oldest);
        *rp.mutable_in_flight() = partial.connections();
      }
    }
    // Members that have not enqueued anything in a communicator yet are
    // reported too (func UNSPECIFIED, no sequence numbers): a rank that
    // never reaches the first collective is a non-comm-hang suspect.
    for (const auto& [hash, info] : s.comms) {
      if (active.contains(std::pair(hash, info.rank()))) continue;
      v1::RankProgress& rp = out->emplace_back();
      rp.set_comm_hash(hash);
      rp.set_rank(info.rank());
      const int32_t r = info.rank();
      rp.set_global_rank(r >= 0 && r < info.global_ranks_size()
                             ? info.global_ranks(r)
                             : s.hello.global_rank());
      rp.set_pid(s.hello.pid());
      rp.set_now_cpu_ns(now);
    }
  }
}

void RankJoiner::AllCommunicators(
    std::vector<v1::CommunicatorInfo>* out) const {
  for (const auto& [sid, sp] : streams_) {
    for (const auto& [hash, info] : sp->comms) out->push_back(info);
  }
}

const v1::ProcessHello* RankJoiner::hello(uint64_t stream) const {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second->has_hello) return nullptr;
  return &it->second->hello;
}

const v1::DropCounters* RankJoiner::drops(uint64_t stream) const {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second->has_drops) return nullptr;
  return &it->second->drops;
}

bool RankJoiner::StreamInComm(uint64_t stream, uint64_t comm_hash,
                              int32_t rank) const {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  if (comm_hash == 0) return true;
  auto c = it->second->comms.find(comm_hash);
  if (c == it->second->comms.end()) return false;
  return rank < 0 || c->second.rank() == rank;
}

size_t RankJoiner::open_streams() const { return streams_.size(); }

size_t RankJoiner::open_ops() const {
  size_t n = 0;
  for (const auto& [id, s] : streams_) n += s->ops.size();
  return n;
}

}  // namespace pitstop::agent
