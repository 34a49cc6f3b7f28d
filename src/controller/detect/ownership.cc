// Which host holds which member, and what a host may report for them
// (docs/reliability.md, "Trust model"): records for another host's live
// members, deaths of processes a host is not known to hold, and hosts
// whose agents are gone (lost, silent, forgotten).
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pitstop/status_macros.h"
#include "src/controller/detect/engine_impl.h"

namespace pitstop::controller {

bool EngineImpl::MayTakeOver(absl::string_view host) const {
  auto it = lost_hosts_.find(std::string(host));
  if (it == lost_hosts_.end() || !it->second.ended) return false;
  const int64_t grace = absl::ToInt64Nanoseconds(options_.handover_grace);
  return it->second.since_ns == std::numeric_limits<int64_t>::min() ||
         clock_->MonotonicNanos() - it->second.since_ns >= grace;
}

bool EngineImpl::HeldLive(const Member& m) const {
  return m.known && !m.host.empty() && !m.dead && !m.exited &&
         !MayTakeOver(m.host);
}

absl::Status EngineImpl::ForeignHolder(const CommState& c, int32_t rank,
                                       const Member& m,
                                       absl::string_view host) {
  // A member moves to another host only once its process ended there or
  // that host's agent is gone for good (a rank restarted elsewhere).
  if (m.host == host || !HeldLive(m)) return absl::OkStatus();
  ++stats_.claims_refused;
  return absl::PermissionDeniedError(absl::StrCat(
      "rank: member ", rank, " of communicator ", absl::Hex(c.comm_hash),
      " is held by a live process on host ", m.host.substr(0, 64), "; host ",
      host.substr(0, 64), " may report only for its own ranks"));
}

absl::Status EngineImpl::ForeignResize(const CommState& c, int32_t n_ranks,
                                       absl::string_view host) {
  if (!c.n_ranks_known || n_ranks <= 0 || n_ranks == c.n_ranks) {
    return absl::OkStatus();
  }
  // A communicator's size is fixed when it is created; a different size
  // from a host that holds none of its live members would stall the join
  // of every later collective for the hosts that do (their records could
  // never complete the new size).
  const Member* foreign = nullptr;
  for (const auto& [rank, m] : c.members) {
    if (!HeldLive(m)) continue;
    if (m.host == host) return absl::OkStatus();
    if (foreign == nullptr) foreign = &m;
  }
  if (foreign == nullptr) return absl::OkStatus();
  ++stats_.claims_refused;
  return absl::PermissionDeniedError(absl::StrCat(
      "n_ranks: communicator ", absl::Hex(c.comm_hash), " has ", c.n_ranks,
      " ranks, held by live processes on host ", foreign->host.substr(0, 64),
      "; host ", host.substr(0, 64),
      ", which holds none of them, may not resize it to ", n_ranks));
}

absl::Status EngineImpl::NoteMember(CommState* c, int32_t rank,
                                    int32_t global_rank, absl::string_view host,
                                    uint32_t pid, int32_t cuda_device,
                                    uint64_t process_start) {
  // (A btree's iterators, end() too, do not survive an insertion: `fresh`
  // is decided before MemberAt.)
  auto existing = c->members.find(rank);
  const bool fresh = existing == c->members.end();
  if (!fresh && !host.empty()) {
    RETURN_IF_ERROR(ForeignHolder(*c, rank, existing->second, host));
  }
  const uint32_t payer = host_ids_.Id(host);
  if (fresh) {
    if (absl::Status s = member_budget_.Charge(payer, c->job_id, 1); !s.ok()) {
      CountRefusals();
      return absl::ResourceExhaustedError(
          absl::StrCat("rank: members: ", s.message()));
    }
    stats_.ranks = static_cast<uint32_t>(member_budget_.used());
  }
  Member& m = c->MemberAt(rank);
  if (fresh) m.payer = payer;
  const bool changed = !m.known || (!host.empty() && m.host != host) ||
                       (cuda_device >= 0 && m.cuda_device != cuda_device);
  const std::string& now_on = host.empty() ? m.host : std::string(host);
  const bool unreachable = !now_on.empty() && lost_hosts_.count(now_on) > 0;
  if (changed || unreachable != m.unreachable ||
      (global_rank >= 0 && m.global_rank != global_rank) ||
      (pid != 0 && m.pid != pid)) {
    ++c->generation;  // a cycle's copy of this comm is stale
  }
  m.known = true;
  if (global_rank >= 0) m.global_rank = global_rank;
  if (!host.empty()) m.host = std::string(host);
  m.unreachable = unreachable;
  if (pid != 0 && m.pid != pid) m.start = 0;  // another process's
  if (pid != 0) m.pid = pid;
  if (process_start != 0) m.start = process_start;
  if (cuda_device >= 0) m.cuda_device = cuda_device;
  if (changed) AssignNic(&m);
  return absl::OkStatus();
}

absl::Status EngineImpl::SetCommJob(CommState* c, const std::string& job) {
  if (job == c->job_id) return absl::OkStatus();
  if (job.empty()) {
    ++stats_.claims_refused;
    return absl::PermissionDeniedError(
        absl::StrCat("job_id: communicator ", absl::Hex(c->comm_hash),
                     " belongs to job '", c->job_id.substr(0, 64),
                     "'; a process of no job may not report for its ranks"));
  }
  if (!c->job_id.empty()) {
    ++stats_.claims_refused;
    return absl::PermissionDeniedError(absl::StrCat(
        "job_id: communicator ", absl::Hex(c->comm_hash), " belongs to job '",
        c->job_id.substr(0, 64), "', not '", job.substr(0, 64), "'"));
  }
  // Units move per payer: each host's "" units are its own bucket.
  absl::flat_hash_map<uint32_t, uint64_t> members;
  absl::flat_hash_map<uint32_t, uint64_t> entries;
  for (const auto& [rank, m] : c->members) ++members[m.payer];
  for (const auto& [key, join] : c->pending) {
    for (const auto& [rank, d] : join.duration_ns) {
      const Member* m = c->FindMember(rank);
      ++entries[m != nullptr ? m->payer : 0];
    }
  }
  comm_budget_.MoveJob(c->owner, c->job_id, job, 1);
  for (const auto& [payer, n] : members) {
    member_budget_.MoveJob(payer, c->job_id, job, n);
  }
  for (const auto& [payer, n] : entries) {
    join_budget_.MoveJob(payer, c->job_id, job, n);
  }
  c->job_id = job;
  // Every member so far was registered by records of no job: the job's own
  // communicator records supersede them (SupersedeJobless).
  for (auto& [rank, m] : c->members) m.jobless = true;
  return absl::OkStatus();
}

absl::Status EngineImpl::SupersedeJobless(CommState* c, int32_t rank,
                                          absl::string_view host,
                                          uint32_t pid) {
  auto it = c->members.find(rank);
  if (c->job_id.empty() || it == c->members.end() || !it->second.jobless ||
      (it->second.host == host && it->second.pid == pid)) {
    return absl::OkStatus();
  }
  Member& m = it->second;
  const uint32_t payer = host_ids_.Id(host);
  if (payer != m.payer) {
    if (absl::Status s = member_budget_.Charge(payer, c->job_id, 1); !s.ok()) {
      CountRefusals();
      return absl::ResourceExhaustedError(
          absl::StrCat("rank: members: ", s.message()));
    }
  }
  // Its summaries in open joins (made-up durations would join the job's
  // collectives) and its progress.
  for (auto j = c->pending.begin(); j != c->pending.end();) {
    Join& join = j->second;
    if (join.duration_ns.erase(rank) > 0) {
      --join.n_reported;
      join_budget_.Release(m.payer, c->job_id, 1);
      std::erase_if(join.connections,
                    [rank](const ConnSample& s) { return s.reporter == rank; });
    }
    if (join.duration_ns.empty()) {
      c->pending.erase(j++);
    } else {
      ++j;
    }
  }
  stats_.join_entries = join_budget_.used();
  for (auto& [func, progress] : c->progress) {
    if (progress.ranks.erase(rank) > 0) progress.min_completed = -2;
  }
  if (payer != m.payer) {
    member_budget_.Release(m.payer, c->job_id, 1);
    m.payer = payer;
  }
  if (m.dead) --c->dead_members;
  m = Member{};  // unknown: the record's NoteMember registers it anew
  m.payer = payer;
  ++c->generation;
  ++stats_.jobless_superseded;
  return absl::OkStatus();
}

absl::Status EngineImpl::JoblessFoothold(const CommState& c, int32_t rank,
                                         absl::string_view host,
                                         const char* field) {
  if (c.job_id.empty()) return absl::OkStatus();
  auto it = c.members.find(rank);
  if (it != c.members.end() && it->second.known && !it->second.host.empty() &&
      !it->second.jobless) {
    return absl::OkStatus();
  }
  ++stats_.claims_refused;
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": member ", rank, " of communicator ", absl::Hex(c.comm_hash),
      " (job '", c.job_id.substr(0, 64),
      "') was not registered by a "
      "communicator record of its job; host ",
      host.substr(0, 64), " may not add it from records of no job"));
}

absl::Status EngineImpl::NoteGlobalRanks(CommState* c,
                                         const v1::CommunicatorInfo& info,
                                         absl::string_view host) {
  // Every entry names a member (memory follows the entries received), all
  // charged to the host that sent the list: a list longer than its share
  // is refused whole, never left half-stored. An entry for a member a live
  // process on another host holds is not used: that host says its own
  // ranks' global ranks (round 21, R21-1: a list renamed them, and a
  // renamed global rank passed ForeignRank).
  const int n = std::min(info.global_ranks_size(), c->ExpectedRanks());
  uint64_t fresh = 0;
  for (int r = 0; r < n; ++r) {
    if (info.global_ranks(r) >= 0 && !c->members.contains(r)) ++fresh;
  }
  const uint32_t payer = host_ids_.Id(host);
  if (fresh > 0) {
    if (absl::Status s = member_budget_.Charge(payer, c->job_id, fresh);
        !s.ok()) {
      CountRefusals();
      return absl::ResourceExhaustedError(
          absl::StrCat("communicator.global_ranks: members: ", s.message()));
    }
    stats_.ranks = static_cast<uint32_t>(member_budget_.used());
  }
  for (int r = 0; r < n; ++r) {
    if (info.global_ranks(r) < 0) continue;
    auto [it, added] = c->members.try_emplace(r);
    if (added) it->second.payer = payer;
    if (it->second.global_rank == info.global_ranks(r)) continue;
    if (it->second.host != host && HeldLive(it->second)) {
      ++stats_.claims_refused;
      continue;
    }
    ++c->generation;
    it->second.global_rank = info.global_ranks(r);
  }
  return absl::OkStatus();
}

bool EngineImpl::OfProcess(const CommState& c, const Member& m,
                           absl::string_view host, const v1::RankLifecycle& l) {
  return l.pid() != 0 && m.pid == l.pid() && m.host == host &&
         (l.process_start() == 0 || m.start == 0 ||
          m.start == l.process_start()) &&
         c.job_id == l.job_id();
}

std::vector<uint64_t> EngineImpl::HeldComms(absl::string_view host,
                                            const v1::RankLifecycle& l) const {
  std::vector<uint64_t> held;
  if (l.pid() == 0) return held;
  for (const auto& [hash, c] : comms_) {
    for (const auto& [rank, m] : c.members) {
      if (OfProcess(c, m, host, l) && !m.dead && !m.exited) {
        held.push_back(hash);
        break;
      }
    }
  }
  return held;
}

bool EngineImpl::DiedBefore(absl::string_view host,
                            const v1::RankLifecycle& l) const {
  if (l.pid() == 0) return false;
  for (const auto& [hash, c] : comms_) {
    if (c.dead_members == 0) continue;
    for (const auto& [rank, m] : c.members) {
      if (m.dead && OfProcess(c, m, host, l)) return true;
    }
  }
  return false;
}

void EngineImpl::NoteDeparted(const CommState& c) {
  for (const auto& [rank, m] : c.members) {
    if (m.pid == 0 || m.host.empty() || m.dead || m.exited) continue;
    auto [it, fresh] = departed_.try_emplace({m.host, m.pid}, c.job_id);
    if (!fresh) continue;
    departed_order_.push_back(it->first);
    if (departed_order_.size() > kMaxDeparted) {
      departed_.erase(departed_order_.front());
      departed_order_.pop_front();
    }
  }
}

absl::Status EngineImpl::AddLifecycle(absl::string_view host,
                                      const v1::RankLifecycle& l) {
  if (host.empty()) return absl::InvalidArgumentError("host: empty");
  const bool died = l.kind() == v1::RankLifecycle::KIND_DIED;
  // What the host was known to hold before this record: the record's own
  // communicators are its claim, not evidence for its death.
  std::vector<uint64_t> held;
  if (died) held = HeldComms(host, l);
  const bool died_before = died && held.empty() && DiedBefore(host, l);
  for (const v1::CommunicatorInfo& info : l.communicators()) {
    v1::CommunicatorInfo copy = info;
    if (copy.pid() == 0) {
      copy.set_pid(l.pid());
      copy.set_process_start(l.process_start());
    }
    if (copy.job_id().empty()) copy.set_job_id(l.job_id());
    if (absl::Status s = AddCommunicator(host, copy); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("lifecycle.communicators: ", s.message()));
    }
  }
  if (l.kind() == v1::RankLifecycle::KIND_COMM_INIT_FAILED) {
    RETURN_IF_ERROR(ScheduledHost(l.job_id(), host));
    RETURN_IF_ERROR(ForeignRank(host, l, &stats_.deaths_refused));
    absl::Status s = config_.Add(host, l, clock_->MonotonicNanos());
    stats_.config_failures_refused = config_.refused();
    return s;
  }
  if (!died && l.kind() != v1::RankLifecycle::KIND_CLEAN_EXIT) {
    return absl::OkStatus();
  }
  if (died_before) return absl::OkStatus();  // nothing new
  if (died) RETURN_IF_ERROR(CheckDeath(host, l, held));
  const int64_t now = clock_->MonotonicNanos();
  for (auto& [hash, c] : comms_) {
    for (auto& [rank, m] : c.members) {
      if (OfProcess(c, m, host, l) && !(died ? m.dead : m.exited)) {
        (died ? m.dead : m.exited) = true;
        if (died) ++c.dead_members;
        ++c.generation;
        if (died && m.died_ns == 0) m.died_ns = now;
      }
    }
  }
  if (died) RaiseProcessDied(host, l);
  return absl::OkStatus();
}

absl::Status EngineImpl::CheckDeath(absl::string_view host,
                                    const v1::RankLifecycle& l,
                                    const std::vector<uint64_t>& held) {
  // A process whose communicator creation failed is known by that record
  // (checked by ForeignRank when it came); its death joins that fault.
  bool known = config_.Failed(host, l.pid());
  if (auto d = departed_.find({std::string(host), l.pid()});
      d != departed_.end()) {
    known = known || l.job_id().empty() || d->second == l.job_id();
  }
  for (uint64_t hash : held) {
    if (known) break;
    auto it = comms_.find(hash);
    known = it != comms_.end() &&
            (l.job_id().empty() || it->second.job_id == l.job_id());
  }
  if (!known) {
    ++stats_.deaths_refused;
    return absl::PermissionDeniedError(absl::StrCat(
        "lifecycle.pid: pid ", l.pid(), " on host ", host.substr(0, 64),
        " was no live member of a communicator of job '",
        l.job_id().substr(0, 64),
        "' before its death record; a host reports deaths of the processes "
        "it is known to hold only"));
  }
  return ForeignRank(host, l, &stats_.deaths_refused);
}

absl::Status EngineImpl::ForeignRank(absl::string_view host,
                                     const v1::RankLifecycle& l,
                                     uint64_t* refused) {
  if (l.global_rank() < 0 || l.job_id().empty()) return absl::OkStatus();
  for (const auto& [hash, c] : comms_) {
    if (c.job_id != l.job_id()) continue;
    for (const auto& [rank, m] : c.members) {
      if (m.global_rank != l.global_rank() || m.host == host || !HeldLive(m)) {
        continue;
      }
      ++*refused;
      return absl::PermissionDeniedError(absl::StrCat(
          "lifecycle.global_rank: ", l.global_rank(), " of job '",
          l.job_id().substr(0, 64), "' is a live process on host ",
          m.host.substr(0, 64), "; host ", host.substr(0, 64),
          " may report deaths and failures of its own processes only"));
    }
  }
  return absl::OkStatus();
}

void EngineImpl::NodeLost(absl::string_view host) {
  LostHost& lost = lost_hosts_[std::string(host)];
  if (!lost.ended) {
    lost.ended = true;
    lost.since_ns = clock_->MonotonicNanos();
  }
  SetUnreachable(host, true);
}

void EngineImpl::NodeSilent(absl::string_view host) {
  lost_hosts_.try_emplace(std::string(host));
  SetUnreachable(host, true);
}

void EngineImpl::NodeBack(absl::string_view host) {
  lost_hosts_.erase(std::string(host));
  SetUnreachable(host, false);
}

void EngineImpl::ForgetNode(absl::string_view host) {
  nodes_.erase(std::string(host));
  // Gone for good: its members may be reported by other hosts at once.
  lost_hosts_[std::string(host)] = {true, std::numeric_limits<int64_t>::min()};
  SetUnreachable(host, true);
  // Its share is given back at the next cycle's start (only a cycle's start
  // erases from comms_): ForgetHosts.
  forgotten_hosts_.insert(host_ids_.Id(host));
}

void EngineImpl::ForgetHosts() {
  // The communicators only a forgotten host reported go (they would expire
  // anyway, comm_expiry after its last report); those other hosts report
  // keep their members until they expire.
  if (forgotten_hosts_.empty()) return;
  for (auto it = comms_.begin(); it != comms_.end();) {
    const CommState& c = it->second;
    bool only_owner = forgotten_hosts_.contains(c.owner);
    const std::string& owner = host_ids_.Name(c.owner);
    for (const auto& [rank, m] : c.members) {
      if (!only_owner) break;
      only_owner = m.host.empty() || m.host == owner;
    }
    auto next = std::next(it);
    if (only_owner && nodes_.count(owner) == 0) {
      ++stats_.comms_expired;
      EraseComm(it);
    }
    it = next;
  }
  forgotten_hosts_.clear();
}

void EngineImpl::SetUnreachable(absl::string_view host, bool lost) {
  for (auto& [hash, c] : comms_) {
    for (auto& [rank, m] : c.members) {
      if (m.host == host && m.unreachable != lost) {
        m.unreachable = lost;
        ++c.generation;
      }
    }
  }
}

}  // namespace pitstop::controller
