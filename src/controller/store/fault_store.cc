// FaultStore's shared pieces: the factory of the default (SQLite) store and
// the fault state transitions both implementations apply.
#include "src/controller/store/fault_store.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "src/controller/store/sqlite_fault_store.h"

namespace pitstop::controller {

absl::StatusOr<std::unique_ptr<FaultStore>> FaultStore::Open(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<SqliteFaultStore>> s =
      SqliteFaultStore::Open(path);
  if (!s.ok()) return s.status();
  return std::unique_ptr<FaultStore>(std::move(*s));
}

int64_t FaultNumberOf(absl::string_view id) {
  size_t i = id.size();
  while (i > 0 && id[i - 1] >= '0' && id[i - 1] <= '9') --i;
  return i == id.size()
             ? 0
             : std::strtoll(std::string(id.substr(i)).c_str(), nullptr, 10);
}

v1::Fault MergeUpsert(const v1::Fault* old, const v1::Fault& fault,
                      bool* ignored) {
  *ignored = false;
  v1::Fault next = fault;
  if (old == nullptr) return next;
  if (old->state() == v1::FAULT_STATE_RESOLVED) {
    *ignored = true;
    return *old;
  }
  const bool operator_state = old->state() == v1::FAULT_STATE_ACKNOWLEDGED ||
                              old->state() == v1::FAULT_STATE_MITIGATING;
  if (operator_state && fault.state() != v1::FAULT_STATE_RESOLVED) {
    next.set_state(old->state());
  }
  next.set_acknowledged_by(old->acknowledged_by());
  if (next.resolution_note().empty()) {
    next.set_resolution_note(old->resolution_note());
  }
  if (next.confirmed_unix_ns() == 0) {
    next.set_confirmed_unix_ns(old->confirmed_unix_ns());
  }
  // The detection engine's updates carry no trainer profile
  // (src/controller/profiling/): the one attached stays.
  if (!next.has_trainer_profile() && old->has_trainer_profile()) {
    *next.mutable_trainer_profile() = old->trainer_profile();
  }
  return next;
}

absl::StatusOr<bool> ApplyAcknowledge(v1::Fault* f, absl::string_view who,
                                      absl::string_view note,
                                      uint64_t now_unix_ns) {
  if (f->state() == v1::FAULT_STATE_ACKNOWLEDGED) return false;
  if (f->state() == v1::FAULT_STATE_MITIGATING ||
      f->state() == v1::FAULT_STATE_RESOLVED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fault ", f->fault_id(), " is ", v1::FaultState_Name(f->state()),
        "; only suspected or confirmed faults can be acknowledged"));
  }
  f->set_state(v1::FAULT_STATE_ACKNOWLEDGED);
  f->set_acknowledged_by(std::string(who));
  if (!note.empty()) f->set_resolution_note(std::string(note));
  f->set_updated_unix_ns(now_unix_ns);
  return true;
}

bool ApplyResolve(v1::Fault* f, absl::string_view who, absl::string_view note,
                  uint64_t now_unix_ns) {
  if (f->state() == v1::FAULT_STATE_RESOLVED) return false;
  f->set_state(v1::FAULT_STATE_RESOLVED);
  f->set_resolved_unix_ns(now_unix_ns);
  f->set_updated_unix_ns(now_unix_ns);
  f->set_resolution_note(
      absl::StrCat("by ", who, note.empty() ? "" : ": ", note));
  return true;
}

absl::Status CheckPlanWrite(const StoredPlan& plan, bool has_stored,
                            uint64_t stored_epoch) {
  if (plan.job_id.empty()) {
    return absl::InvalidArgumentError("plan.job_id: empty");
  }
  if (has_stored && stored_epoch > plan.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan of job ", plan.job_id, ": epoch ", plan.epoch,
        " is older than the stored epoch ", stored_epoch, "; not stored"));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::controller
