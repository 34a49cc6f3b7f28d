// Watchers of one kind of change (fault changes, migration changes) and the
// client streams among them that a controller stepping down must end
// (docs/ha.md): each watcher has a job filter ("" = every job), a callback
// and, for a client's stream, an `end` that finishes it.
//
// Not thread-safe: its owner (FaultService, MigrationService) guards it with
// its own lock and calls the callbacks with that lock held, so they must not
// block or call any service (they may take a leaf lock of their own).
#ifndef PITSTOP_CONTROLLER_COMMON_WATCH_HUB_H_
#define PITSTOP_CONTROLLER_COMMON_WATCH_HUB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace pitstop::controller {

// Ends a client's watch stream (the gRPC reactor's Finish); called with the
// owner's lock held, so it must not block or call back.
using WatchEndFn = std::function<void(const absl::Status&)>;

// How long the watches of a term this controller lost wait for the new
// leader's name before they are ended without it.
inline constexpr absl::Duration kWatchEndWait = absl::Seconds(5);

template <typename Response>
class WatchHub {
 public:
  using Fn = std::function<void(const Response&)>;

  // `end` null for a watcher inside the controller (fault actions, metrics,
  // the planner), which a step-down leaves alone.
  void Add(uint64_t id, std::string job_id, Fn fn, WatchEndFn end) {
    watchers_[id] = Watcher{std::move(job_id), std::move(fn), std::move(end)};
  }
  void Remove(uint64_t id) {
    watchers_.erase(id);
    ending_.erase(id);
  }
  // Calls every watcher of `job_id` (and every unfiltered one).
  void Notify(const std::string& job_id, const Response& r) const {
    for (const auto& [id, w] : watchers_) {
      if (w.job_id.empty() || w.job_id == job_id) w.fn(r);
    }
  }
  // Step-down: the client streams stop receiving and wait in ending_ to be
  // ended naming the new leader (EndFormer). Returns how many.
  size_t DetachClients(const std::string& why, absl::Time deadline) {
    size_t n = 0;
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (!it->second.end) {
        ++it;
        continue;
      }
      ending_[it->first] = std::move(it->second.end);
      it = watchers_.erase(it);
      ++n;
    }
    if (n > 0) {
      ending_why_ = why;
      ending_deadline_ = deadline;
    }
    return n;
  }
  bool ending() const { return !ending_.empty(); }
  // Ends the detached streams with Unavailable naming `leader` ("" = none
  // known) — unless no leader is known yet, `now` is false and the deadline
  // has not passed. Returns the status they were ended with (OK: none).
  absl::Status EndFormer(const std::string& leader, bool now,
                         absl::Time clock_now) {
    if (ending_.empty()) return absl::OkStatus();
    if (leader.empty() && !now && clock_now < ending_deadline_) {
      return absl::OkStatus();
    }
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "controller stepped down (", ending_why_, "); watch again at ",
        leader.empty() ? "another controller (no leader known yet)"
                       : absl::StrCat("the leader; leader=", leader)));
    for (auto& [id, end] : ending_) end(why);
    ending_.clear();
    return why;
  }
  size_t ending_count() const { return ending_.size(); }

 private:
  struct Watcher {
    std::string job_id;
    Fn fn;
    WatchEndFn end;
  };
  std::map<uint64_t, Watcher> watchers_;
  // Client watches of the term this controller lost, by subscription id.
  std::map<uint64_t, WatchEndFn> ending_;
  std::string ending_why_;
  absl::Time ending_deadline_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_COMMON_WATCH_HUB_H_
