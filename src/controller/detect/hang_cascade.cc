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

// True when rank `id` waits in a hang of another comm of i's job.
bool WaitsElsewhere(const std::vector<HangVerdict>& v, size_t i,
                    const std::string& id) {
  for (size_t j = 0; j < v.size(); ++j) {
    if (j != i && v[j].fault.comm_hash() != v[i].fault.comm_hash() &&
        v[j].fault.job_id() == v[i].fault.job_id() && v[j].waiting.count(id)) {
      return true;
    }
  }
  return false;
}

// Marks as roots the unassigned candidates with a missing rank that waits
// in no other hang: nothing else explains that rank (it stopped). With
// `pure_only`, only those whose missing ranks all wait nowhere: the hang
// that sees the stopped rank(s) and nothing else.
void MarkStoppedRoots(const std::vector<HangVerdict>& v, bool pure_only,
                      std::vector<int>* root) {
  for (size_t i = 0; i < v.size(); ++i) {
    if ((*root)[i] >= 0) continue;
    int stopped = 0;
    for (const std::string& id : v[i].missing) {
      if (!WaitsElsewhere(v, i, id)) ++stopped;
    }
    const bool all = stopped == static_cast<int>(v[i].missing.size());
    if (pure_only ? all : stopped > 0) (*root)[i] = static_cast<int>(i);
  }
}

// Folds candidates whose missing ranks are all explained by hangs that lead
// to a root, until nothing changes (chains fold transitively). A missing
// rank is explained by root j when it waits in j's comm, or when j is a
// candidate that names the same stopped rank: the world all-reduce that
// misses the hung rank and its DP-ring mates (blocked in the DP all-reduce
// that misses only the hung rank) is that DP hang seen from farther away.
void FoldIntoRoots(const std::vector<HangVerdict>& v, FaultTracker* tracker,
                   std::vector<int>* root) {
  const size_t n = v.size();
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if ((*root)[i] >= 0) continue;
      int target = -1;
      bool all = true;
      for (const std::string& id : v[i].missing) {
        int found = -1;
        for (size_t j = 0; j < n && found < 0; ++j) {
          const int r = (*root)[j];
          // A pending hang holds back new faults, never clears open ones.
          if (j == i || r < 0 || (v[r].pending && tracker->IsOpen(v[i].key)) ||
              v[j].fault.comm_hash() == v[i].fault.comm_hash() ||
              v[j].fault.job_id() != v[i].fault.job_id()) {
            continue;
          }
          const bool stopped_there = r == static_cast<int>(j) &&
                                     IsCandidate(v[j]) &&
                                     v[j].missing.count(id) > 0;
          if (v[j].waiting.count(id) || stopped_there) found = r;
        }
        if (found < 0) {
          all = false;
          break;
        }
        if (target < 0) target = found;
      }
      if (all && target >= 0) {
        (*root)[i] = target;
        changed = true;
      }
    }
  }
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
  // Roots first where only stopped ranks are missing, fold what they
  // explain, then the mixed hangs with a stopped rank nothing explained (a
  // TP-mate waiting for the stopped rank in their TP all-reduce is missing
  // from the DP one, which folds into the TP hang), and fold again.
  MarkStoppedRoots(v, /*pure_only=*/true, &root);
  FoldIntoRoots(v, tracker, &root);
  MarkStoppedRoots(v, /*pure_only=*/false, &root);
  FoldIntoRoots(v, tracker, &root);
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
