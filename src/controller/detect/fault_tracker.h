// Turns detector observations into fault records with a lifecycle:
// persistence (N of M windows) for the slow classes, level-triggered raising
// and clearing for hangs and deaths. Assigns stable fault ids. Internal to
// pitstop_detect; not thread-safe.
#ifndef PITSTOP_CONTROLLER_DETECT_FAULT_TRACKER_H_
#define PITSTOP_CONTROLLER_DETECT_FAULT_TRACKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// Evidence value key marking a consequence folded into a fault from
// another detector or communicator (hang cascades, straggler victims of a
// slow comm). Such evidence, and the victims it added, survive updates of
// the fault that do not restate them.
inline constexpr absl::string_view kConsequenceMark = "consequence";

class FaultTracker {
 public:
  FaultTracker(Clock* clock, std::string id_prefix, uint64_t first_number);

  // A detection window of communicator `comm_hash` closed. `hits` maps fault
  // keys seen in this window to the fault they would raise; every other key
  // with history on this comm counts a miss. A key opens (SUSPECTED) once it
  // hit in >= n of the last m windows of some comm, is CONFIRMED after m hits
  // and auto-RESOLVED once no comm saw it in its last m windows. Keys in
  // `held` count neither (the window could not tell, e.g. too short).
  void EndWindow(uint64_t comm_hash,
                 const std::map<std::string, v1::Fault>& hits, uint32_t n,
                 uint32_t m, const std::set<std::string>& held = {});

  // Level-triggered: the condition of `key` holds now with `state`
  // (SUSPECTED or CONFIRMED). Opens or updates the fault.
  void Raise(const std::string& key, const v1::Fault& fault,
             v1::FaultState state);
  // The condition of `key` no longer holds: resolves it if open.
  void Clear(const std::string& key, absl::string_view note);
  // Open keys that start with `prefix`.
  std::vector<std::string> OpenKeys(absl::string_view prefix) const;
  bool IsOpen(const std::string& key) const;
  // The open fault of `key`, null if none.
  const v1::Fault* Find(const std::string& key) const;
  // Fault id of an open key, empty if none.
  std::string FaultIdOf(const std::string& key) const;

  // A fault that was open when the controller last stopped (from the
  // store). The first fault the tracker opens for the same condition (same
  // class, job, comm and suspects) takes its id and first-seen time instead
  // of a new id.
  void Adopt(const v1::Fault& fault);

  // An operator closed the fault: stop tracking it (a new one may open).
  void Forget(absl::string_view fault_id);
  // Faults opened or changed since the last call.
  std::vector<v1::Fault> TakeChanged();
  size_t open_count() const { return open_.size(); }

 private:
  struct Open {
    v1::Fault fault;
  };
  void OpenOrUpdate(const std::string& key, const v1::Fault& fault,
                    v1::FaultState state, uint32_t windows_hit,
                    uint32_t windows_total);
  void MarkChanged(const std::string& key);

  Clock* clock_;
  std::string id_prefix_;
  uint64_t next_number_;
  std::map<std::string, Open> open_;
  // key -> comm -> recent hits (front = oldest).
  std::map<std::string, std::map<uint64_t, std::deque<bool>>> history_;
  std::set<std::string> changed_;
  std::vector<v1::Fault> resolved_;
  std::vector<v1::Fault> adopted_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_FAULT_TRACKER_H_
