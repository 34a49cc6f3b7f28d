#include "src/controller/nodes/record_loss.h"

#include <algorithm>

namespace pitstop::controller {

bool RecordLossLedger::Observe(const std::string& agent_id,
                               const v1::ProcessRecords& rec, int64_t* budget,
                               uint64_t* lost) {
  *lost = 0;
  if (rec.counters_start_unix_ns() == 0) return false;  // not accounted
  const Key key{rec.pid(), rec.counters_start_unix_ns()};
  const uint64_t sent = rec.records_produced() >= rec.records_dropped()
                            ? rec.records_produced() - rec.records_dropped()
                            : 0;
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxProcessesPerHost) {
      auto oldest = std::min_element(
          entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
            return a.second.last_seen < b.second.last_seen;
          });
      Forget(oldest);
      ++*budget;
    }
    if (*budget <= 0) return false;
    --*budget;
    Entry e;
    e.agent_id = agent_id;
    e.before = e.baseline = e.delivered = rec.records_before();
    it = entries_.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  e.last_seen = ++observations_;
  // Since the controller first heard of the process, like `received`.
  e.sent = std::max(e.sent, sent > e.baseline ? sent - e.baseline : 0);
  if (e.agent_id != agent_id) {
    // A new agent incarnation reports the process: the previous one's last
    // report is what it delivered; the process says what it had read.
    e.delivered += e.read;
    e.agent_id = agent_id;
    e.read = 0;
    e.before = rec.records_before();
    if (e.before > e.delivered && e.before - e.delivered > e.lost) {
      *lost = e.before - e.delivered - e.lost;
      e.lost = e.before - e.delivered;
    }
  }
  // Cumulative per agent: a smaller value is an older batch.
  e.read = std::max(e.read, rec.records_read());
  return true;
}

void RecordLossLedger::Forget(std::map<Key, Entry>::iterator it) {
  const Entry& e = it->second;
  base_sent_ += e.sent;
  base_received_ += e.delivered - e.baseline + e.read;
  base_lost_ += e.lost;
  entries_.erase(it);
}

RecordLossLedger::Totals RecordLossLedger::totals() const {
  Totals t;
  t.sent = base_sent_;
  t.received = base_received_;
  t.lost_in_agent = base_lost_;
  for (const auto& [key, e] : entries_) {
    t.sent += e.sent;
    t.received += e.delivered - e.baseline + e.read;
    t.lost_in_agent += e.lost;
  }
  t.processes = entries_.size();
  return t;
}

void RecordLossLedger::Release(int64_t* budget) {
  *budget += static_cast<int64_t>(entries_.size());
  entries_.clear();
}

}  // namespace pitstop::controller
