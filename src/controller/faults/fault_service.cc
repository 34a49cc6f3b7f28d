#include "src/controller/faults/fault_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/profiling/trainer_profiles.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

absl::Status Required(const std::string& value, absl::string_view field) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  return absl::OkStatus();
}

}  // namespace

FaultService::FaultService(Options options) : options_(std::move(options)) {}

uint64_t FaultService::NowUnixNs() const {
  return static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()));
}

absl::StatusOr<std::vector<v1::Fault>> FaultService::Faults(
    const std::string& job_id, bool include_resolved, uint32_t limit) const {
  return options_.store->List(job_id, include_resolved, limit);
}

absl::StatusOr<v1::Fault> FaultService::Fault(
    const std::string& fault_id) const {
  if (absl::Status s = Required(fault_id, "fault_id"); !s.ok()) return s;
  return options_.store->Get(fault_id);
}

absl::StatusOr<std::vector<v1::Fault>> FaultService::OpenFaults() const {
  return options_.store->List("", /*include_resolved=*/false, 0);
}

uint32_t FaultService::OpenCount() const { return options_.store->OpenCount(); }

absl::StatusOr<v1::Fault> FaultService::Acknowledge(const std::string& fault_id,
                                                    const std::string& who,
                                                    const std::string& note) {
  return MoveFault(fault_id, who, note, /*resolve=*/false);
}

absl::StatusOr<v1::Fault> FaultService::Resolve(const std::string& fault_id,
                                                const std::string& who,
                                                const std::string& note) {
  return MoveFault(fault_id, who, note, /*resolve=*/true);
}

absl::StatusOr<v1::Fault> FaultService::MoveFault(const std::string& fault_id,
                                                  const std::string& who,
                                                  const std::string& note,
                                                  bool resolve) {
  if (absl::Status s = Required(fault_id, "fault_id"); !s.ok()) return s;
  if (absl::Status s = Required(who, "who"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  ServiceLock writes(&write_mu_);
  const absl::StatusOr<v1::Fault> before = options_.store->Get(fault_id);
  absl::StatusOr<v1::Fault> f =
      resolve ? options_.store->Resolve(fault_id, who, note, NowUnixNs())
              : options_.store->Acknowledge(fault_id, who, note, NowUnixNs());
  if (f.ok() && before.ok() && before->state() != f->state()) {
    ServiceLock lock(&mu_);
    if (resolve) resolved_.push_back(fault_id);
    Notify(resolve ? v1::WatchFaultsResponse::CHANGE_RESOLVED
                   : v1::WatchFaultsResponse::CHANGE_UPDATED,
           *f);
  }
  return f;
}

std::vector<std::string> FaultService::StoreCycleFaults(
    const std::vector<v1::Fault>& faults) {
  std::vector<std::string> forget;
  if (faults.empty()) return forget;
  struct Stored {
    v1::Fault fault;
    bool is_new = false;
  };
  std::vector<Stored> stored;
  // write_mu_ keeps the notifications in the order of the writes.
  ServiceLock writes(&write_mu_);
  for (const v1::Fault& f : faults) {
    const bool is_new =
        absl::IsNotFound(options_.store->Get(f.fault_id()).status());
    bool ignored = false;
    absl::StatusOr<v1::Fault> s = options_.store->Upsert(f, &ignored);
    if (!s.ok()) {
      Logger("controller")
          ->error("storing fault {}: {}", f.fault_id(), s.status().ToString());
      continue;
    }
    if (ignored) {
      forget.push_back(f.fault_id());
      continue;
    }
    stored.push_back(Stored{std::move(*s), is_new});
  }
  ServiceLock lock(&mu_);
  for (const Stored& s : stored) {
    if (s.is_new) {
      Logger("controller")
          ->warn("fault {} opened: {}", s.fault.fault_id(), s.fault.summary());
      if (options_.metrics) {
        options_.metrics->FaultOpened(s.fault.fault_class());
      }
    }
    Notify(s.is_new ? v1::WatchFaultsResponse::CHANGE_OPENED
           : s.fault.state() == v1::FAULT_STATE_RESOLVED
               ? v1::WatchFaultsResponse::CHANGE_RESOLVED
               : v1::WatchFaultsResponse::CHANGE_UPDATED,
           s.fault);
  }
  return forget;
}

std::vector<std::string> FaultService::TakeResolved() {
  ServiceLock lock(&mu_);
  std::vector<std::string> out;
  out.swap(resolved_);
  return out;
}

void FaultService::MarkMitigating(v1::Fault f, const std::string& why) {
  if (f.state() != v1::FAULT_STATE_CONFIRMED &&
      f.state() != v1::FAULT_STATE_SUSPECTED &&
      f.state() != v1::FAULT_STATE_ACKNOWLEDGED) {
    return;
  }
  f.set_state(v1::FAULT_STATE_MITIGATING);
  f.set_updated_unix_ns(NowUnixNs());
  f.set_resolution_note(why);
  ServiceLock writes(&write_mu_);
  bool ignored = false;
  absl::StatusOr<v1::Fault> stored = options_.store->Upsert(f, &ignored);
  if (stored.ok() && !ignored) {
    ServiceLock lock(&mu_);
    Notify(v1::WatchFaultsResponse::CHANGE_UPDATED, *stored);
  }
}

bool FaultService::AttachTrainerProfile(const std::string& fault_id,
                                        const v1::TrainerProfile& profile) {
  ServiceLock writes(&write_mu_);
  absl::StatusOr<v1::Fault> f =
      StoreTrainerProfile(options_.store, fault_id, profile);
  if (!f.ok() || f->trainer_profile().state() != profile.state()) {
    Logger("controller.profiling")
        ->warn("fault {}: profile not stored ({}): {}", fault_id,
               f.ok() ? "fault resolved" : f.status().ToString(),
               profile.text());
    return false;
  }
  ServiceLock lock(&mu_);
  Notify(v1::WatchFaultsResponse::CHANGE_UPDATED, *f);
  return true;
}

void FaultService::Notify(v1::WatchFaultsResponse::Change change,
                          const v1::Fault& f) {
  v1::WatchFaultsResponse resp;
  resp.set_change(change);
  *resp.mutable_fault() = f;
  watchers_.Notify(f.job_id(), resp);
}

uint64_t FaultService::Subscribe(const std::string& job_id,
                                 bool include_existing, WatchFn fn) {
  ServiceLock lock(&mu_);
  return AddWatcher(job_id, include_existing, std::move(fn), nullptr);
}

absl::StatusOr<uint64_t> FaultService::SubscribeClient(
    const std::string& job_id, bool include_existing, WatchFn fn,
    WatchEndFn end) {
  ServiceLock lock(&mu_);
  // Checked under the lock: the election stops leading before it steps
  // down (DetachClientWatches takes the lock), so a watch is either refused
  // here or detached then, never left silent.
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  return AddWatcher(job_id, include_existing, std::move(fn), std::move(end));
}

uint64_t FaultService::AddWatcher(const std::string& job_id,
                                  bool include_existing, WatchFn fn,
                                  WatchEndFn end) {
  if (include_existing) {
    absl::StatusOr<std::vector<v1::Fault>> open =
        options_.store->List(job_id, false, 0);
    if (open.ok()) {
      v1::WatchFaultsResponse resp;
      resp.set_change(v1::WatchFaultsResponse::CHANGE_EXISTING);
      for (auto it = open->rbegin(); it != open->rend(); ++it) {
        *resp.mutable_fault() = *it;
        fn(resp);
      }
    }
  }
  const uint64_t id = next_watcher_++;
  watchers_.Add(id, job_id, std::move(fn), std::move(end));
  return id;
}

void FaultService::Unsubscribe(uint64_t id) {
  ServiceLock lock(&mu_);
  watchers_.Remove(id);
}

void FaultService::AnnounceExisting(const std::vector<v1::Fault>& open) {
  ServiceLock lock(&mu_);
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    Notify(v1::WatchFaultsResponse::CHANGE_EXISTING, *it);
  }
  // Watches of an earlier term of this controller: they missed what
  // happened in between; their clients watch again here.
  EndFormerLocked(/*now=*/true);
}

void FaultService::DetachClientWatches(const std::string& why) {
  ServiceLock lock(&mu_);
  if (watchers_.DetachClients(why, options_.clock->Now() + kWatchEndWait) ==
      0) {
    return;
  }
  // Usually the new leader is not known yet (its campaign follows the
  // lease's end); the controller's loop ends them once it is.
  EndFormerLocked(/*now=*/false);
}

void FaultService::EndFormerWatches(bool now) {
  ServiceLock lock(&mu_);
  EndFormerLocked(now);
}

void FaultService::EndFormerLocked(bool now) {
  if (!watchers_.ending()) return;
  const size_t n = watchers_.ending_count();
  const absl::Status why = watchers_.EndFormer(KnownLeader(options_.leadership),
                                               now, options_.clock->Now());
  if (why.ok()) return;
  Logger("controller")
      ->info("{} fault watch streams of the former term ended: {}", n,
             std::string(why.message()));
}

}  // namespace pitstop::controller
