#include "src/agent/process_ledger.h"

#include <algorithm>

namespace pitstop::agent {

void ProcessLedger::Hello(uint64_t stream, const shm::HelloFrame& hello) {
  if (hello.counters_start_unix_ns == 0) return;  // library 0.1
  MutexLock lock(&mu_);
  const Key key{hello.pid, hello.counters_start_unix_ns};
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (!MakeRoom()) {
      ++untracked_;
      return;
    }
    Entry e;
    e.rec.set_pid(hello.pid);
    e.rec.set_counters_start_unix_ns(hello.counters_start_unix_ns);
    // Only the first hello to this agent: later ones include what this
    // agent read itself over the process's earlier connections.
    e.rec.set_records_before(hello.records_delivered);
    it = entries_.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  e.heard_ns = clock_->MonotonicNanos();
  ++e.connections;
  e.ended_ns = 0;
  e.rec.set_ended(false);
  streams_[stream] = key;
  e.rec.set_records_produced(
      std::max(e.rec.records_produced(), hello.counters.records_produced));
  e.rec.set_records_dropped(
      std::max(e.rec.records_dropped(), hello.counters.records_dropped));
}

ProcessLedger::Entry* ProcessLedger::Find(uint64_t stream) {
  auto s = streams_.find(stream);
  if (s == streams_.end()) return nullptr;
  auto it = entries_.find(s->second);
  return it == entries_.end() ? nullptr : &it->second;
}

void ProcessLedger::Counters(uint64_t stream, const shm::Counters& counters) {
  MutexLock lock(&mu_);
  Entry* e = Find(stream);
  if (e == nullptr) return;
  e->heard_ns = clock_->MonotonicNanos();
  // Cumulative on the process's side: a smaller value is a reordering or
  // a lie, never a reset (a restarted process has a new key).
  e->rec.set_records_produced(
      std::max(e->rec.records_produced(), counters.records_produced));
  e->rec.set_records_dropped(
      std::max(e->rec.records_dropped(), counters.records_dropped));
}

void ProcessLedger::RecordsRead(uint64_t stream, uint64_t n) {
  MutexLock lock(&mu_);
  if (Entry* e = Find(stream)) {
    e->rec.set_records_read(e->rec.records_read() + n);
    e->heard_ns = clock_->MonotonicNanos();
  }
}

uint64_t ProcessLedger::SilentNs(uint32_t pid) const {
  MutexLock lock(&mu_);
  const uint64_t now = clock_->MonotonicNanos();
  uint64_t silent = 0;
  bool live = false;
  // Several entries share a pid only when pids were reused: the live one
  // (connected) counts; with two live ones (cannot happen in one pid
  // namespace) the one heard last.
  for (auto it = entries_.lower_bound(Key{pid, 0});
       it != entries_.end() && it->first.first == pid; ++it) {
    const Entry& e = it->second;
    if (e.connections == 0 || e.heard_ns == 0) continue;
    const uint64_t s = now > e.heard_ns ? now - e.heard_ns : 0;
    silent = live ? std::min(silent, s) : s;
    live = true;
  }
  return silent;
}

void ProcessLedger::Closed(uint64_t stream) {
  MutexLock lock(&mu_);
  Entry* e = Find(stream);
  streams_.erase(stream);
  if (e == nullptr) return;
  if (--e->connections <= 0) {
    e->connections = 0;
    e->ended_ns = std::max<uint64_t>(1, clock_->MonotonicNanos());
    e->rec.set_ended(true);
  }
}

bool ProcessLedger::MakeRoom() {
  if (entries_.size() < kMaxProcesses) return true;
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.connections != 0) continue;
    if (oldest == entries_.end() ||
        it->second.ended_ns < oldest->second.ended_ns) {
      oldest = it;
    }
  }
  if (oldest == entries_.end()) return false;
  forgotten_sent_ +=
      oldest->second.rec.records_before() + oldest->second.rec.records_read();
  entries_.erase(oldest);
  return true;
}

uint64_t ProcessLedger::Snapshot(std::vector<v1::ProcessRecords>* out) {
  const uint64_t now = clock_->MonotonicNanos();
  MutexLock lock(&mu_);
  uint64_t sent = forgotten_sent_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = it->second;
    if (e.connections == 0 && e.ended_ns != 0 && now > e.ended_ns &&
        now - e.ended_ns > kEndedTtlNs) {
      forgotten_sent_ += e.rec.records_before() + e.rec.records_read();
      sent += e.rec.records_before() + e.rec.records_read();
      it = entries_.erase(it);
      continue;
    }
    sent += e.rec.records_before() + e.rec.records_read();
    out->push_back(e.rec);
    ++it;
  }
  return sent;
}

uint64_t ProcessLedger::untracked() const {
  MutexLock lock(&mu_);
  return untracked_;
}

}  // namespace pitstop::agent
