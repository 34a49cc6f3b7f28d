// Cross-communicator folding of hang verdicts (see RaiseHangs()).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/hang_detector.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

bool IsCandidate(const HangVerdict& v) {
  return !v.dead_comm && !v.missing.empty() &&
         v.fault.fault_class() == v1::FAULT_CLASS_NON_COMM_HANG;
}

// Adds the consequence `c` (a folded hang) to `root`: its victims and one
// evidence entry. Returns false when `root` already holds it.
bool AddConsequence(const HangVerdict& c, v1::Fault* root) {
  for (const v1::Evidence& e : root->evidence()) {
    if (e.comm_hash() == c.fault.comm_hash() &&
        e.values().count("consequence_seq") &&
        e.values().at("consequence_seq") ==
            static_cast<double>(c.fault.seq_number())) {
      return false;
    }
  }
  std::set<int32_t> have;
  for (const v1::Suspect& s : root->suspects()) have.insert(s.global_rank());
  for (const v1::Suspect& s : root->victims()) have.insert(s.global_rank());
  for (const v1::Suspect& s : c.fault.victims()) {
    if (root->victims_size() >= kMaxVictims) break;
    if (s.global_rank() < 0 || have.insert(s.global_rank()).second) {
      *root->add_victims() = s;
    }
  }
  v1::Evidence* e = root->add_evidence();
  e->set_comm_hash(c.fault.comm_hash());
  e->add_seq_numbers(c.fault.seq_number());
  (*e->mutable_values())[std::string(kConsequenceMark)] = 1;
  (*e->mutable_values())["consequence_seq"] =
      static_cast<double>(c.fault.seq_number());
  (*e->mutable_values())["consequence_waiting"] =
      static_cast<double>(c.waiting.size());
  e->set_text(absl::StrFormat(
      "consequence: %d rank(s) of %s wait in seq %d for %d rank(s) blocked "
      "by this fault (folded, not a fault of its own)",
      c.waiting.size(), c.fault.comm_name(), c.fault.seq_number(),
      c.missing.size()));
  return true;
}

}  // namespace

void RaiseHangs(const std::vector<HangVerdict>& v, FaultTracker* tracker) {
  const size_t n = v.size();
  std::vector<int> root(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (v[i].dead_comm ? tracker->IsOpen(v[i].key) : !IsCandidate(v[i])) {
      root[i] = static_cast<int>(i);
    }
  }
  // A candidate with a missing rank that waits in no other hang of its job
  // is a root too: nothing else explains it (the rank that stopped is
  // missing there), so the hangs behind it can fold into it (a TP-mate
  // waiting for it in their TP all-reduce is missing from the DP one).
  for (size_t i = 0; i < n; ++i) {
    if (root[i] >= 0) continue;
    bool all_wait = true;
    for (const std::string& id : v[i].missing) {
      bool waits = false;
      for (size_t j = 0; j < n && !waits; ++j) {
        waits = j != i && v[j].fault.comm_hash() != v[i].fault.comm_hash() &&
                v[j].fault.job_id() == v[i].fault.job_id() &&
                v[j].waiting.count(id);
      }
      if (!waits) {
        all_wait = false;
        break;
      }
    }
    if (!all_wait) root[i] = static_cast<int>(i);
  }
  // Fold candidates whose missing ranks are all blocked in hangs that lead
  // to a root, until nothing changes (chains fold transitively).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (root[i] >= 0) continue;
      int target = -1;
      bool all = true;
      for (const std::string& id : v[i].missing) {
        int found = -1;
        for (size_t j = 0; j < n && found < 0; ++j) {
          // A pending hang holds back new faults, never clears open ones.
          if (j != i && root[j] >= 0 &&
              !(v[root[j]].pending && tracker->IsOpen(v[i].key)) &&
              v[j].fault.comm_hash() != v[i].fault.comm_hash() &&
              v[j].fault.job_id() == v[i].fault.job_id() &&
              v[j].waiting.count(id)) {
            found = root[j];
          }
        }
        if (found < 0) {
          all = false;
          break;
        }
        if (target < 0) target = found;
      }
      if (all && target >= 0) {
        root[i] = target;
        changed = true;
      }
    }
  }
  // What folds nowhere stands on its own (incl. cross-comm deadlocks).
  std::vector<bool> folded(n, false);
  for (size_t i = 0; i < n; ++i) {
    folded[i] = root[i] >= 0 && root[i] != static_cast<int>(i);
    if (root[i] < 0 && IsCandidate(v[i])) root[i] = static_cast<int>(i);
  }
  for (size_t i = 0; i < n; ++i) {
    if (root[i] != static_cast<int>(i)) continue;
    const v1::Fault* open = v[i].dead_comm ? tracker->Find(v[i].key) : nullptr;
    v1::Fault f = open != nullptr ? *open : v[i].fault;
    bool added = false;
    for (size_t j = 0; j < n; ++j) {
      if (j != i && root[j] == static_cast<int>(i)) {
        added |= AddConsequence(v[j], &f);
      }
    }
    if (v[i].pending) continue;
    if (!v[i].dead_comm) {
      tracker->Raise(v[i].key, f, v[i].state);
    } else if (added) {
      tracker->Raise(v[i].key, f, f.state());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (folded[i]) {
      tracker->Clear(v[i].key, absl::StrCat("consequence of ", v[root[i]].key));
    }
  }
}

}  // namespace pitstop::controller
