// Inputs and the detection cycle of the engine. Snapshots are in
// engine_snapshots.cc.
#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/status_macros.h"
#include "src/controller/detect/comm_slow_detector.h"
#include "src/controller/detect/engine_impl.h"
#include "src/controller/detect/hang_detector.h"
#include "src/controller/detect/straggler_detector.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

int64_t SeqOrNone(uint64_t seq, uint64_t time_ns) {
  return (seq == 0 && time_ns == 0) ? -1 : static_cast<int64_t>(seq);
}

// Ranks and communicator sizes come from agent messages and size per-rank
// tables: bound them so one bad record cannot allocate gigabytes.
absl::Status CheckRank(absl::string_view field, int64_t rank) {
  if (rank < 0 || rank >= kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", rank, " not in [0, ", kMaxRanks, ")"));
  }
  return absl::OkStatus();
}

// A host's share of one job: Options' *_per_host_job, or a 16th of the
// job's share when 0.
uint64_t HostJobShare(uint64_t per_host_job, uint64_t per_job) {
  return per_host_job != 0 ? per_host_job : std::max<uint64_t>(1, per_job / 16);
}

// A communicator record's own fields: InvalidArgument naming the field.
absl::Status CheckInfo(const v1::CommunicatorInfo& info) {
  if (info.comm_hash() == 0) {
    return absl::InvalidArgumentError("communicator.comm_hash: 0");
  }
  if (info.n_ranks() < 0 || info.n_ranks() > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator.n_ranks: ", info.n_ranks(), " not in [0, ",
                     kMaxRanks, "]"));
  }
  if (absl::Status s = CheckRank("communicator.rank", info.rank()); !s.ok()) {
    return s;
  }
  if (info.n_ranks() > 0 && info.rank() >= info.n_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator.rank: ", info.rank(), " not in [0, n_ranks ",
                     info.n_ranks(), ")"));
  }
  if (info.n_ranks() > 0 && info.global_ranks_size() > info.n_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator.global_ranks: ", info.global_ranks_size(),
                     " entries for n_ranks ", info.n_ranks()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DetectionEngine>> DetectionEngine::Create(
    Clock* clock, Options options) {
  if (clock == nullptr) return absl::InvalidArgumentError("clock: null");
  if (absl::Status s = ValidatePolicy(options.default_policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("default_", s.message()));
  }
  return std::unique_ptr<DetectionEngine>(
      new EngineImpl(clock, std::move(options)));
}

EngineImpl::EngineImpl(Clock* clock, Options options)
    : clock_(clock),
      options_(std::move(options)),
      default_policy_(ResolvePolicy(options_.default_policy)),
      member_budget_("max_members",
                     {options_.max_members, options_.max_members_per_host,
                      options_.max_members_per_job,
                      HostJobShare(options_.max_members_per_host_job,
                                   options_.max_members_per_job)},
                     &host_ids_),
      comm_budget_("max_comms",
                   {options_.max_comms, options_.max_comms_per_host,
                    options_.max_comms_per_job,
                    HostJobShare(options_.max_comms_per_host_job,
                                 options_.max_comms_per_job)},
                   &host_ids_),
      join_budget_(
          "max_join_entries",
          {options_.max_join_entries, options_.max_join_entries_per_host,
           options_.max_join_entries_per_job,
           HostJobShare(options_.max_join_entries_per_host_job,
                        options_.max_join_entries_per_job)},
          &host_ids_),
      tracker_(clock, options_.fault_id_prefix, options_.first_fault_number) {}

absl::Status EngineImpl::AddNode(const v1::NodeRegistration& registration) {
  if (registration.host().empty()) {
    return absl::InvalidArgumentError("registration.host: empty");
  }
  nodes_[registration.host()] = registration;
  // A forgotten host that registers again is back (NodeBack is only called
  // for hosts the controller still remembers).
  if (auto it = lost_hosts_.find(registration.host());
      it != lost_hosts_.end() &&
      it->second.since_ns == std::numeric_limits<int64_t>::min()) {
    NodeBack(registration.host());
  }
  for (auto& [hash, c] : comms_) {
    for (auto& [rank, m] : c.members) {
      if (m.host != registration.host()) continue;
      const std::string nic = m.nic;
      AssignNic(&m);
      if (m.nic != nic) ++c.generation;  // a cycle's copy of `c` is stale
    }
  }
  return absl::OkStatus();
}

void EngineImpl::AssignNic(Member* m) const {
  auto it = nodes_.find(m->host);
  if (it == nodes_.end()) return;
  const v1::NodeRegistration& reg = it->second;
  if (reg.nics_size() == 1) {
    m->nic = reg.nics(0).name();
  } else if (m->cuda_device >= 0 && reg.nics_size() == reg.gpus_size() &&
             m->cuda_device < reg.nics_size()) {
    m->nic = reg.nics(m->cuda_device).name();  // rail-optimised guess
  }
}

void EngineImpl::CountRefusals() {
  const auto& m = member_budget_.refusals();
  const auto& c = comm_budget_.refusals();
  const auto& j = join_budget_.refusals();
  stats_.members_refused = member_budget_.refused();
  stats_.members_refused_host = m.host;
  stats_.members_refused_job = m.job;
  stats_.members_refused_host_job = m.host_job;
  stats_.comms_refused = comm_budget_.refused();
  stats_.comms_refused_host = c.host;
  stats_.comms_refused_job = c.job;
  stats_.comms_refused_host_job = c.host_job;
  stats_.summaries_refused = join_budget_.refused();
  stats_.summaries_refused_host = j.host;
  stats_.summaries_refused_job = j.job;
  stats_.summaries_refused_host_job = j.host_job;
}

CommState* EngineImpl::GetOrCreateComm(uint64_t hash, absl::string_view host,
                                       absl::string_view job,
                                       absl::Status* status) {
  const int64_t now = clock_->MonotonicNanos();
  auto it = comms_.find(hash);
  if (it == comms_.end()) {
    if (retired_.contains(hash)) {
      // Late records of a communicator the job replaced: ignored, not an
      // error for the agent that forwarded them.
      ++stats_.records_for_retired_comms;
      return nullptr;
    }
    const uint32_t owner = host_ids_.Id(host);
    if (absl::Status s = comm_budget_.Charge(owner, job, 1); !s.ok()) {
      CountRefusals();
      *status = absl::ResourceExhaustedError(
          absl::StrCat("comm_hash: communicators: ", s.message()));
      return nullptr;
    }
    it = comms_.try_emplace(hash).first;
    it->second.comm_hash = hash;
    it->second.owner = owner;
    it->second.job_id = std::string(job);
    it->second.created_ns = now;
    if (auto a = adopted_hangs_.find(hash); a != adopted_hangs_.end()) {
      const int64_t now_unix = absl::ToUnixNanos(clock_->Now());
      for (const auto& [func, start] : a->second) {
        it->second.adopted_hang_start[func] = {
            start.first, now - std::max<int64_t>(0, now_unix - start.second)};
      }
      adopted_hangs_.erase(a);
    }
  }
  it->second.last_input_ns = now;
  return &it->second;
}

void EngineImpl::ExpireComms(int64_t now_ns) {
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.comm_expiry);
  if (expiry <= 0) return;
  for (auto it = comms_.begin(); it != comms_.end();) {
    if (now_ns - it->second.last_input_ns <= expiry) {
      ++it;
      continue;
    }
    ++stats_.comms_expired;
    auto next = std::next(it);
    EraseComm(it);
    it = next;
  }
}

void EngineImpl::EraseComm(std::map<uint64_t, CommState>::iterator it) {
  const CommState& c = it->second;
  NoteDeparted(c);
  for (const auto& [key, join] : c.pending) ReleaseJoinEntries(c, join);
  for (const auto& [rank, m] : c.members) {
    member_budget_.Release(m.payer, c.job_id, 1);
  }
  stats_.ranks = static_cast<uint32_t>(member_budget_.used());
  comm_budget_.Release(c.owner, c.job_id, 1);
  comms_.erase(it);
}

void EngineImpl::ReleaseJoinEntries(const CommState& c, const Join& join) {
  for (const auto& [rank, d] : join.duration_ns) {
    const Member* m = c.FindMember(rank);
    join_budget_.Release(m != nullptr ? m->payer : 0, c.job_id, 1);
  }
  stats_.join_entries = join_budget_.used();
}

absl::Status EngineImpl::AddCommunicator(absl::string_view host,
                                         const v1::CommunicatorInfo& info) {
  RETURN_IF_ERROR(CheckInfo(info));
  // The reporting agent's identity decides where a member lives: a record
  // naming another host is a claim for ranks this agent does not hold.
  if (!info.host().empty() && info.host() != host) {
    ++stats_.claims_refused;
    return absl::PermissionDeniedError(absl::StrCat(
        "communicator.host: ", info.host().substr(0, 64),
        " is not the "
        "reporting host ",
        host.substr(0, 64), "; an agent reports for its own host only"));
  }
  // A job the scheduler placed takes records from its hosts only.
  RETURN_IF_ERROR(ScheduledHost(info.job_id(), host));
  absl::Status status;
  CommState* cp =
      GetOrCreateComm(info.comm_hash(), host, info.job_id(), &status);
  if (cp == nullptr) return status;
  CommState& c = *cp;
  if (info.n_ranks() <= 0 && c.n_ranks_known && info.rank() >= c.n_ranks) {
    // A member past the known size would be a foothold from which its
    // host could resize another host's communicator (ForeignResize lets a
    // host holding a live member do that).
    return absl::InvalidArgumentError(absl::StrCat(
        "communicator.rank: ", info.rank(), " >= n_ranks ", c.n_ranks));
  }
  RETURN_IF_ERROR(SetCommJob(&c, info.job_id()));
  // The job's record for a rank a process of no job reported first.
  RETURN_IF_ERROR(SupersedeJobless(&c, info.rank(), host, info.pid()));
  // A claim of another host's live member changes nothing of the comm.
  if (auto it = c.members.find(info.rank()); it != c.members.end()) {
    RETURN_IF_ERROR(ForeignHolder(c, info.rank(), it->second, host));
  }
  RETURN_IF_ERROR(ForeignResize(c, info.n_ranks(), host));
  if (!info.comm_name().empty()) c.comm_name = info.comm_name();
  if (info.parent_comm_hash() != 0)
    c.parent_comm_hash = info.parent_comm_hash();
  if (info.n_ranks() > 0) {
    if (!c.n_ranks_known || c.n_ranks != info.n_ranks()) ++c.generation;
    c.n_ranks = info.n_ranks();
    c.n_ranks_known = true;
  }
  const int32_t global = info.rank() < info.global_ranks_size()
                             ? info.global_ranks(info.rank())
                             : -1;
  RETURN_IF_ERROR(NoteMember(&c, info.rank(), global, host, info.pid(),
                             info.cuda_device(), info.process_start()));
  // Registered by a record of its job (or, in a communicator of no job,
  // of no job: SetCommJob marks it when the job comes).
  c.MemberAt(info.rank()).jobless = false;
  if (Member& m = c.MemberAt(info.rank()); m.finalized != info.finalized()) {
    // A destroyed communicator's last records may never come: its member
    // is judged like one that exited (hang_detector.cc).
    m.finalized = info.finalized();
    ++c.generation;
  }
  if (info.pid() != 0) config_.Created(std::string(host), info.pid());
  return NoteGlobalRanks(&c, info, host);
}

absl::Status EngineImpl::AddSummary(absl::string_view host,
                                    const v1::CollectiveSummary& s) {
  if (s.comm_hash() == 0) {
    return absl::InvalidArgumentError("summary.comm_hash: 0");
  }
  if (absl::Status st = CheckRank("summary.rank", s.rank()); !st.ok()) {
    return st;
  }
  if (!v1::CollFunc_IsValid(s.func())) {
    return absl::InvalidArgumentError(
        absl::StrCat("summary.func: unknown value ", s.func()));
  }
  absl::Status status;
  CommState* cp = GetOrCreateComm(s.comm_hash(), host, "", &status);
  if (cp == nullptr) return status;
  CommState& c = *cp;
  if (c.n_ranks_known && s.rank() >= c.n_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("summary.rank: ", s.rank(), " >= n_ranks ", c.n_ranks));
  }
  if (absl::Status st = JoblessFoothold(c, s.rank(), host, "summary.rank");
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          NoteMember(&c, s.rank(), s.global_rank(), host, s.pid(), -1);
      !st.ok()) {
    return st;
  }
  ++stats_.summaries;
  const std::pair<int32_t, uint64_t> key{s.func(), s.seq_number()};
  auto it = c.pending.find(key);
  if (it == c.pending.end()) {
    auto wm = c.folded_watermark.find(s.func());
    if (wm != c.folded_watermark.end() &&
        static_cast<int64_t>(s.seq_number()) <= wm->second) {
      ++stats_.late_summaries;
      return absl::OkStatus();
    }
  }
  if (it != c.pending.end() && it->second.duration_ns.contains(s.rank())) {
    return absl::OkStatus();  // duplicate
  }
  const Member* member = c.FindMember(s.rank());
  if (absl::Status st = join_budget_.Charge(member->payer, c.job_id, 1);
      !st.ok()) {
    CountRefusals();
    return absl::ResourceExhaustedError(
        absl::StrCat("summary: summaries held in open joins: ", st.message()));
  }
  stats_.join_entries = join_budget_.used();
  if (it == c.pending.end()) {
    it = c.pending.emplace(key, Join{}).first;
    it->second.first_seen_ns = clock_->MonotonicNanos();
    c.pending_order.push_back(key);
  }
  Join& j = it->second;
  const uint64_t d =
      s.kernel_duration_ns() ? s.kernel_duration_ns() : s.proxy_duration_ns();
  j.duration_ns.try_emplace(s.rank(), d ? static_cast<int64_t>(d) : -1);
  ++j.n_reported;
  j.bytes = std::max<uint64_t>(j.bytes, s.bytes());
  for (int i = 0; i < s.connections_size() && i < kMaxConnectionsPerRecord;
       ++i) {
    const v1::ConnectionSummary& cs = s.connections(i);
    double tput = cs.throughput_bps();
    if (tput <= 0 && cs.duration_ns() > 0) {
      tput = static_cast<double>(cs.bytes()) * 1e9 / cs.duration_ns();
    }
    ConnSample sample{cs.is_send() ? s.rank() : cs.peer_rank(),
                      cs.is_send() ? cs.peer_rank() : s.rank(), tput};
    sample.reporter = s.rank();
    sample.bytes = cs.bytes();
    sample.duration_ns = cs.duration_ns();
    j.connections.push_back(sample);
  }
  if (c.n_ranks_known && j.n_reported >= static_cast<uint32_t>(c.n_ranks)) {
    Fold(&c, key);
  }
  return absl::OkStatus();
}

void EngineImpl::Fold(CommState* c, std::pair<int32_t, uint64_t> key) {
  auto it = c->pending.find(key);
  FoldJoin(c, key.first, it->second);
  ReleaseJoinEntries(*c, it->second);
  c->pending.erase(it);
  ++c->collectives_joined;
  ++stats_.collectives_joined;
  c->last_joined_seq = std::max(c->last_joined_seq, key.second);
  int64_t& wm = c->folded_watermark.try_emplace(key.first, -1).first->second;
  wm = std::max(wm, static_cast<int64_t>(key.second));
}

void EngineImpl::EvictJoins(CommState* c, int64_t now_ns) {
  const int64_t horizon = absl::ToInt64Nanoseconds(options_.join_horizon);
  while (!c->pending_order.empty()) {
    auto key = c->pending_order.front();
    auto it = c->pending.find(key);
    if (it != c->pending.end()) {
      const bool old = now_ns - it->second.first_seen_ns > horizon;
      const bool over = c->pending.size() > options_.max_pending_joins_per_comm;
      if (!old && !over) break;
      ReleaseJoinEntries(*c, it->second);
      c->pending.erase(it);
      ++stats_.incomplete_dropped;
      int64_t& wm =
          c->folded_watermark.try_emplace(key.first, -1).first->second;
      wm = std::max(wm, static_cast<int64_t>(key.second));
    }
    c->pending_order.pop_front();
  }
}

absl::Status EngineImpl::AddProgress(absl::string_view host,
                                     const v1::RankProgress& p) {
  if (p.comm_hash() == 0) {
    return absl::InvalidArgumentError("progress.comm_hash: 0");
  }
  if (absl::Status s = CheckRank("progress.rank", p.rank()); !s.ok()) {
    return s;
  }
  if (!v1::CollFunc_IsValid(p.func())) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.func: unknown value ", p.func()));
  }
  absl::Status status;
  CommState* cp = GetOrCreateComm(p.comm_hash(), host, "", &status);
  if (cp == nullptr) return status;
  CommState& c = *cp;
  if (c.n_ranks_known && p.rank() >= c.n_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.rank: ", p.rank(), " >= n_ranks ", c.n_ranks));
  }
  if (absl::Status st = JoblessFoothold(c, p.rank(), host, "progress.rank");
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          NoteMember(&c, p.rank(), p.global_rank(), host, p.pid(), -1);
      !st.ok()) {
    return st;
  }
  FuncProgress& fp = c.progress[p.func()];
  if (fp.last_advance_ns == 0) fp.last_advance_ns = clock_->MonotonicNanos();
  fp.last_input_ns = clock_->MonotonicNanos();
  RankProgressState& rs = fp.ranks[p.rank()];
  rs.reported = true;
  rs.enqueued = SeqOrNone(p.last_enqueued_seq(), p.last_enqueue_cpu_ns());
  rs.completed = SeqOrNone(p.last_completed_seq(), p.last_completion_cpu_ns());
  rs.started = std::max<int64_t>(
      p.last_started_seq() ? static_cast<int64_t>(p.last_started_seq()) : -1,
      rs.completed);
  rs.enqueued = std::max(rs.enqueued, rs.started);
  const int64_t oldest = p.oldest_incomplete_age_ns()
                             ? static_cast<int64_t>(p.oldest_incomplete_seq())
                             : -1;
  if (oldest != rs.oldest_incomplete_seq) {
    rs.in_flight.clear();
    rs.in_flight_stopped.clear();
  }
  rs.oldest_incomplete_seq = oldest;
  rs.oldest_incomplete_age_ns = p.oldest_incomplete_age_ns();
  rs.process_silent_ns = p.process_silent_ns();
  rs.oldest_incomplete_count = oldest >= 0 ? p.oldest_incomplete_count() : 0;
  rs.oldest_incomplete_datatype =
      oldest >= 0 && v1::DataType_IsValid(p.oldest_incomplete_datatype())
          ? p.oldest_incomplete_datatype()
          : 0;
  for (int i = 0; i < p.in_flight_size() && i < kMaxConnectionsPerRecord; ++i) {
    const v1::ConnectionSummary& cs = p.in_flight(i);
    auto [it, fresh] = rs.in_flight.try_emplace(
        std::make_tuple(cs.peer_rank(), cs.channel_id(), cs.is_send()),
        cs.bytes(), UINT64_MAX);
    if (!fresh) {
      it->second.second = it->second.first;
      it->second.first = cs.bytes();
    }
    if (cs.duration_ns() > 0) rs.in_flight_stopped.insert(it->first);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobPolicy> EngineImpl::SetJobPolicy(
    absl::string_view job_id, const v1::JobPolicy& policy) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: empty");
  if (absl::Status s = ValidatePolicy(policy, default_policy_); !s.ok()) {
    return s;
  }
  const v1::JobPolicy resolved = ResolvePolicy(policy, default_policy_);
  policies_[std::string(job_id)] = resolved;
  return resolved;
}

v1::JobPolicy EngineImpl::GetJobPolicy(absl::string_view job_id) const {
  auto it = policies_.find(std::string(job_id));
  return it == policies_.end() ? default_policy_ : it->second;
}

void EngineImpl::ForgetFault(absl::string_view fault_id) {
  tracker_.Forget(fault_id);
}

void EngineImpl::AdoptOpenFaults(const std::vector<v1::Fault>& faults) {
  for (const v1::Fault& f : faults) {
    tracker_.Adopt(f);
    const bool hang = f.fault_class() == v1::FAULT_CLASS_NON_COMM_HANG ||
                      f.fault_class() == v1::FAULT_CLASS_COMM_HANG;
    if (!hang || f.evidence_size() == 0) continue;
    auto v = f.evidence(0).values().find(std::string(kHangStartedKey));
    if (v == f.evidence(0).values().end()) continue;
    adopted_hangs_[f.comm_hash()][f.func()] = {
        static_cast<int64_t>(f.seq_number()), static_cast<int64_t>(v->second)};
  }
}

}  // namespace pitstop::controller
