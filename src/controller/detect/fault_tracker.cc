#include "src/controller/detect/fault_tracker.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pitstop::controller {
namespace {

uint32_t CountHits(const std::deque<bool>& d) {
  return static_cast<uint32_t>(std::count(d.begin(), d.end(), true));
}

// Whether two faults name the same suspects and victims.
bool SameBlame(const v1::Fault& a, const v1::Fault& b) {
  if (a.suspects_size() != b.suspects_size() ||
      a.victims_size() != b.victims_size()) {
    return false;
  }
  for (int i = 0; i < a.suspects_size(); ++i) {
    if (a.suspects(i).SerializeAsString() !=
        b.suspects(i).SerializeAsString()) {
      return false;
    }
  }
  return true;
}

bool IsConsequence(const v1::Evidence& e) {
  return e.values().count(std::string(kConsequenceMark)) > 0;
}

// Consequences folded into `old` (evidence marked kConsequenceMark, and the
// victims they added) that the detector's newer `next` does not restate.
void KeepConsequences(const v1::Fault& old, v1::Fault* next) {
  std::set<uint64_t> stated;
  for (const v1::Evidence& e : next->evidence()) {
    if (IsConsequence(e)) stated.insert(e.comm_hash());
  }
  bool kept = false;
  for (const v1::Evidence& e : old.evidence()) {
    if (IsConsequence(e) && !stated.count(e.comm_hash())) {
      *next->add_evidence() = e;
      kept = true;
    }
  }
  if (!kept) return;
  std::set<std::pair<int32_t, std::string>> have;
  for (const v1::Suspect& s : next->victims()) {
    have.insert({s.global_rank(), s.host()});
  }
  for (const v1::Suspect& s : old.victims()) {
    if (have.insert({s.global_rank(), s.host()}).second) {
      *next->add_victims() = s;
    }
  }
}

// Whether `a` and `b` describe the same condition: class, job, comm and
// the same suspects (level, host, ranks, peer, NIC).
bool SameCondition(const v1::Fault& a, const v1::Fault& b) {
  if (a.fault_class() != b.fault_class() || a.job_id() != b.job_id() ||
      a.comm_hash() != b.comm_hash() ||
      a.suspects_size() != b.suspects_size()) {
    return false;
  }
  auto ids = [](const v1::Fault& f) {
    std::set<std::string> s;
    for (const v1::Suspect& x : f.suspects()) {
      s.insert(absl::StrCat(x.level(), "/", x.host(), "/", x.global_rank(), "/",
                            x.pid(), "/", x.peer_host(), "/",
                            x.peer_global_rank(), "/", x.nic()));
    }
    return s;
  };
  return ids(a) == ids(b);
}

}  // namespace

void FaultTracker::Adopt(const v1::Fault& fault) {
  if (fault.state() != v1::FAULT_STATE_RESOLVED) adopted_.push_back(fault);
}

FaultTracker::FaultTracker(Clock* clock, std::string id_prefix,
                           uint64_t first_number)
    : clock_(clock),
      id_prefix_(std::move(id_prefix)),
      next_number_(first_number) {}

void FaultTracker::EndWindow(uint64_t comm_hash,
                             const std::map<std::string, v1::Fault>& hits,
                             uint32_t n, uint32_t m,
                             const std::set<std::string>& held) {
  for (const auto& [key, fault] : hits) {
    std::deque<bool>& d = history_[key][comm_hash];
    d.push_back(true);
    while (d.size() > m) d.pop_front();
  }
  for (auto it = history_.begin(); it != history_.end();) {
    const std::string& key = it->first;
    auto& per_comm = it->second;
    const auto hit = hits.find(key);
    auto c = per_comm.find(comm_hash);
    if (hit == hits.end() && c != per_comm.end() && !held.count(key)) {
      c->second.push_back(false);
      while (c->second.size() > m) c->second.pop_front();
    }
    uint32_t best = 0;
    for (const auto& [comm, d] : per_comm) best = std::max(best, CountHits(d));
    const bool is_open = open_.count(key) > 0;
    if (hit != hits.end()) {
      if (is_open) {
        const v1::Fault& f = open_[key].fault;
        const uint32_t total = f.windows_hit() + 1;
        OpenOrUpdate(key, hit->second,
                     total >= m ? v1::FAULT_STATE_CONFIRMED : f.state(), total,
                     m);
      } else if (best >= n) {
        OpenOrUpdate(key, hit->second, v1::FAULT_STATE_SUSPECTED, best, m);
      }
    } else if (best == 0) {
      if (is_open) {
        Clear(key,
              absl::StrCat("condition not seen in the last ", m, " windows"));
      }
      it = history_.erase(it);
      continue;
    }
    ++it;
  }
}

const v1::Fault* FaultTracker::Find(const std::string& key) const {
  auto it = open_.find(key);
  return it == open_.end() ? nullptr : &it->second.fault;
}

void FaultTracker::Raise(const std::string& key, const v1::Fault& fault,
                         v1::FaultState state) {
  auto it = open_.find(key);
  const uint32_t hits = it == open_.end() ? 1 : it->second.fault.windows_hit();
  OpenOrUpdate(key, fault, state, hits, 0);
}

void FaultTracker::OpenOrUpdate(const std::string& key, const v1::Fault& fault,
                                v1::FaultState state, uint32_t windows_hit,
                                uint32_t windows_total) {
  const uint64_t now = absl::ToUnixNanos(clock_->Now());
  auto it = open_.find(key);
  if (it == open_.end()) {
    Open o{fault};
    o.fault.set_state(state);
    o.fault.set_first_seen_unix_ns(now);
    o.fault.set_updated_unix_ns(now);
    if (state == v1::FAULT_STATE_CONFIRMED) o.fault.set_confirmed_unix_ns(now);
    o.fault.set_windows_hit(windows_hit);
    o.fault.set_windows_total(windows_total);
    for (auto a = adopted_.begin(); a != adopted_.end(); ++a) {
      if (!SameCondition(*a, fault)) continue;
      // The condition of a fault open before a restart: it keeps its
      // identity, state, history and folded consequences. A confirmed (or
      // acknowledged: the store keeps operator states) fault never falls
      // back to SUSPECTED, and its confirmed time does not move.
      o.fault.set_fault_id(a->fault_id());
      o.fault.set_first_seen_unix_ns(a->first_seen_unix_ns());
      if (a->state() >= v1::FAULT_STATE_CONFIRMED) {
        o.fault.set_state(v1::FAULT_STATE_CONFIRMED);
        if (a->confirmed_unix_ns() != 0) {
          o.fault.set_confirmed_unix_ns(a->confirmed_unix_ns());
        }
      }
      o.fault.set_windows_hit(std::max(windows_hit, a->windows_hit()));
      if (windows_total == 0) o.fault.set_windows_total(a->windows_total());
      KeepConsequences(*a, &o.fault);
      adopted_.erase(a);
      break;
    }
    if (o.fault.fault_id().empty()) {
      o.fault.set_fault_id(absl::StrCat(id_prefix_, next_number_++));
    }
    open_.emplace(key, std::move(o));
    MarkChanged(key);
    return;
  }
  v1::Fault& f = it->second.fault;
  v1::Fault next = fault;
  KeepConsequences(f, &next);
  const bool blame_changed = !SameBlame(f, next);
  const bool upgraded = state == v1::FAULT_STATE_CONFIRMED &&
                        f.state() == v1::FAULT_STATE_SUSPECTED;
  // Keep identity and history; take the newest blame and evidence.
  next.set_fault_id(f.fault_id());
  next.set_first_seen_unix_ns(f.first_seen_unix_ns());
  next.set_confirmed_unix_ns(f.confirmed_unix_ns());
  next.set_state(upgraded ? state : f.state());
  next.set_windows_hit(windows_hit);
  next.set_windows_total(windows_total ? windows_total : f.windows_total());
  next.set_updated_unix_ns(f.updated_unix_ns());
  if (upgraded) next.set_confirmed_unix_ns(now);
  if (upgraded || blame_changed) next.set_updated_unix_ns(now);
  f = std::move(next);
  if (upgraded || blame_changed) MarkChanged(key);
}

void FaultTracker::Clear(const std::string& key, absl::string_view note) {
  auto it = open_.find(key);
  if (it == open_.end()) return;
  const uint64_t now = absl::ToUnixNanos(clock_->Now());
  v1::Fault f = std::move(it->second.fault);
  f.set_state(v1::FAULT_STATE_RESOLVED);
  f.set_resolved_unix_ns(now);
  f.set_updated_unix_ns(now);
  f.set_resolution_note(absl::StrCat("auto: ", note));
  open_.erase(it);
  changed_.erase(key);
  resolved_.push_back(std::move(f));
}

std::vector<std::string> FaultTracker::OpenKeys(
    absl::string_view prefix) const {
  std::vector<std::string> keys;
  for (const auto& [key, o] : open_) {
    if (absl::StartsWith(key, prefix)) keys.push_back(key);
  }
  return keys;
}

bool FaultTracker::IsOpen(const std::string& key) const {
  return open_.count(key) > 0;
}

std::string FaultTracker::FaultIdOf(const std::string& key) const {
  auto it = open_.find(key);
  return it == open_.end() ? "" : it->second.fault.fault_id();
}

void FaultTracker::Forget(absl::string_view fault_id) {
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->second.fault.fault_id() == fault_id) {
      changed_.erase(it->first);
      history_.erase(it->first);
      open_.erase(it);
      return;
    }
  }
}

void FaultTracker::MarkChanged(const std::string& key) { changed_.insert(key); }

std::vector<v1::Fault> FaultTracker::TakeChanged() {
  std::vector<v1::Fault> out = std::move(resolved_);
  resolved_.clear();
  for (const std::string& key : changed_) {
    auto it = open_.find(key);
    if (it != open_.end()) out.push_back(it->second.fault);
  }
  changed_.clear();
  return out;
}

}  // namespace pitstop::controller
