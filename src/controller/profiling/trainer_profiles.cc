#include "src/controller/profiling/trainer_profiles.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

constexpr size_t kMaxErrorBytes = 1024;

bool Confirmed(const v1::Fault& f) {
  return f.confirmed_unix_ns() != 0 || f.state() == v1::FAULT_STATE_CONFIRMED;
}

// The fault's first suspect with a global rank; -1 when none.
int32_t SuspectRank(const v1::Fault& f) {
  for (const v1::Suspect& s : f.suspects()) {
    if (s.global_rank() >= 0) return s.global_rank();
  }
  return -1;
}

bool IsSuspect(const v1::Fault& f, int32_t rank) {
  for (const v1::Suspect& s : f.suspects()) {
    if (s.global_rank() == rank) return true;
  }
  return false;
}

absl::Status ValidateAnswer(const v1::ProfileResult& r) {
  if (r.steps() > kMaxProfileSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "steps: ", r.steps(), " captured, at most ", kMaxProfileSteps));
  }
  if (r.ops_size() > static_cast<int>(kMaxProfileOps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ops: ", r.ops_size(), " ops, at most ", kMaxProfileOps));
  }
  for (int i = 0; i < r.ops_size(); ++i) {
    if (r.ops(i).name().empty() ||
        r.ops(i).name().size() > kMaxProfileOpNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("ops[", i, "].name: required, at most ",
                       kMaxProfileOpNameBytes, " bytes"));
    }
  }
  if (r.error().size() > kMaxErrorBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("error: longer than ", kMaxErrorBytes, " bytes"));
  }
  return absl::OkStatus();
}

// Per-step sums of one capture, by op name.
struct PerStep {
  double calls = 0, self_ms = 0, total_ms = 0;
};

std::map<std::string, PerStep> PerStepOps(const v1::ProfileResult& r) {
  std::map<std::string, PerStep> out;
  const double steps = std::max<uint32_t>(r.steps(), 1);
  for (const v1::ProfileOpStat& op : r.ops()) {
    PerStep& p = out[op.name()];
    p.calls += op.calls() / steps;
    p.self_ms += op.self_cpu_ns() / 1e6 / steps;
    p.total_ms += op.total_cpu_ns() / 1e6 / steps;
  }
  return out;
}

std::string OpsText(
    const google::protobuf::RepeatedPtrField<v1::TrainerProfileOp>& ops,
    bool suspect_first) {
  std::vector<std::string> parts;
  for (const v1::TrainerProfileOp& op : ops) {
    const double a = suspect_first ? op.suspect_self_ms() : op.peer_self_ms();
    const double b = suspect_first ? op.peer_self_ms() : op.suspect_self_ms();
    parts.push_back(
        absl::StrFormat("%s (%.1f vs %.1f ms/step)", op.name(), a, b));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

void DiffProfiles(const v1::ProfileResult& suspect,
                  const v1::ProfileResult& peer,
                  const TrainerProfileService::Options& options,
                  v1::TrainerProfile* profile) {
  const std::map<std::string, PerStep> s = PerStepOps(suspect);
  const std::map<std::string, PerStep> p = PerStepOps(peer);
  std::set<std::string> names;
  for (const auto& [n, unused] : s) names.insert(n);
  for (const auto& [n, unused] : p) names.insert(n);
  // (excess ms per step, op) for each side.
  std::vector<std::pair<double, v1::TrainerProfileOp>> more_s, more_p;
  for (const std::string& n : names) {
    const PerStep a = s.contains(n) ? s.at(n) : PerStep{};
    const PerStep b = p.contains(n) ? p.at(n) : PerStep{};
    v1::TrainerProfileOp op;
    op.set_name(n);
    op.set_suspect_self_ms(a.self_ms);
    op.set_peer_self_ms(b.self_ms);
    op.set_suspect_total_ms(a.total_ms);
    op.set_peer_total_ms(b.total_ms);
    op.set_suspect_calls(a.calls);
    op.set_peer_calls(b.calls);
    if (a.self_ms - b.self_ms >= options.min_excess_ms &&
        a.self_ms >= options.min_ratio * b.self_ms) {
      more_s.emplace_back(a.self_ms - b.self_ms, op);
    } else if (b.self_ms - a.self_ms >= options.min_excess_ms &&
               b.self_ms >= options.min_ratio * a.self_ms) {
      more_p.emplace_back(b.self_ms - a.self_ms, op);
    }
  }
  auto largest_first = [](const auto& x, const auto& y) {
    return x.first > y.first;
  };
  std::sort(more_s.begin(), more_s.end(), largest_first);
  std::sort(more_p.begin(), more_p.end(), largest_first);
  for (size_t i = 0; i < more_s.size() && i < options.max_diff_ops; ++i) {
    *profile->add_ops() = more_s[i].second;
  }
  for (size_t i = 0; i < more_p.size() && i < options.max_diff_ops; ++i) {
    *profile->add_peer_ops() = more_p[i].second;
  }
  profile->set_steps(std::min(suspect.steps(), peer.steps()));
  profile->set_suspect_step_ms(suspect.wall_ns() / 1e6 /
                               std::max<uint32_t>(suspect.steps(), 1));
  profile->set_peer_step_ms(peer.wall_ns() / 1e6 /
                            std::max<uint32_t>(peer.steps(), 1));
  std::string text = absl::StrFormat(
      "torch.profiler, rank %d (suspect) vs rank %d (healthy peer), %u / %u "
      "steps: %.1f vs %.1f ms per step",
      profile->suspect_rank(), profile->peer_rank(), suspect.steps(),
      peer.steps(), profile->suspect_step_ms(), profile->peer_step_ms());
  if (profile->ops_size() > 0) {
    absl::StrAppend(&text, "; rank ", profile->suspect_rank(),
                    " spends more in ", OpsText(profile->ops(), true));
  } else {
    absl::StrAppend(&text, "; no op takes rank ", profile->suspect_rank(),
                    " notably longer");
  }
  if (profile->peer_ops_size() > 0) {
    absl::StrAppend(&text, "; rank ", profile->peer_rank(), " spends more in ",
                    OpsText(profile->peer_ops(), false));
  }
  profile->set_text(text);
}

absl::StatusOr<v1::Fault> StoreTrainerProfile(
    FaultStore* store, const std::string& fault_id,
    const v1::TrainerProfile& profile) {
  absl::StatusOr<v1::Fault> f = store->Get(fault_id);
  if (!f.ok() || f->state() == v1::FAULT_STATE_RESOLVED) return f;
  *f->mutable_trainer_profile() = profile;
  bool ignored = false;
  return store->Upsert(*f, &ignored);
}

TrainerProfileService::TrainerProfileService(Options options)
    : options_(options) {}

TrainerProfileService::Stats TrainerProfileService::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

size_t TrainerProfileService::TrainersOf(const std::string& host) const {
  auto it = trainers_per_host_.find(host);
  return it == trainers_per_host_.end() ? 0 : it->second;
}

bool TrainerProfileService::RoomFor(const std::string& host, int64_t now) {
  const size_t share = options_.max_trainers_per_host;
  if (trainers_.size() < options_.max_trainers &&
      (share == 0 || TrainersOf(host) < share)) {
    return true;
  }
  // Full: forget the trainers gone quiet, else refuse the new one.
  const int64_t max_age = absl::ToInt64Nanoseconds(options_.trainer_max_age);
  for (auto it = trainers_.begin(); it != trainers_.end();) {
    if (now - it->second.seen_ns <= max_age) {
      ++it;
      continue;
    }
    if (--trainers_per_host_[it->second.host] == 0) {
      trainers_per_host_.erase(it->second.host);
    }
    it = trainers_.erase(it);
  }
  if (share > 0 && TrainersOf(host) >= share) {
    // A host's share (issue #33): its made-up trainers end here and never
    // fill the table for another host's.
    stats_.trainers_refused_host++;
    return false;
  }
  if (trainers_.size() >= options_.max_trainers) {
    stats_.trainers_refused++;
    return false;
  }
  return true;
}

void TrainerProfileService::NoteTrainer(const std::string& host,
                                        const v1::TrainerIdentity& t,
                                        int64_t now) {
  const std::pair<std::string, int32_t> key{t.job_id(), t.global_rank()};
  auto it = trainers_.find(key);
  if (it != trainers_.end() && it->second.host != host &&
      now - it->second.seen_ns <=
          absl::ToInt64Nanoseconds(options_.trainer_max_age)) {
    // Another host's live trainer: an agent reports for its own host's
    // trainers only (a rank restarted here is taken once its old host's
    // reports stopped for trainer_max_age).
    stats_.trainers_refused_foreign++;
    return;
  }
  if (it == trainers_.end() || it->second.host != host) {
    // A new trainer, or one that moved here: charged to this host.
    if (!RoomFor(host, now)) return;
    it = trainers_.find(key);  // RoomFor may have forgotten it
    if (it != trainers_.end() && --trainers_per_host_[it->second.host] == 0) {
      trainers_per_host_.erase(it->second.host);
    }
    ++trainers_per_host_[host];
  }
  Trainer& tr = trainers_[key];
  tr.host = host;
  tr.seen_ns = now;
}

absl::Status TrainerProfileService::OnReport(const std::string& host,
                                             const v1::ReportStepsRequest& r) {
  if (!enabled()) return absl::OkStatus();
  const v1::TrainerIdentity& t = r.trainer();
  if (t.job_id().empty() || t.global_rank() < 0) return absl::OkStatus();
  MutexLock lock(&mu_);
  NoteTrainer(host, t, options_.clock->MonotonicNanos());
  absl::Status first;
  for (int i = 0; i < r.profiles_size(); ++i) {
    if (absl::Status s = ValidateAnswer(r.profiles(i)); !s.ok()) {
      if (first.ok()) {
        first = absl::InvalidArgumentError(
            absl::StrCat("profiles[", i, "].", s.message()));
      }
      continue;
    }
    if (!TakeAnswer(host, t, r.profiles(i))) {
      stats_.answers_refused++;
      Logger("controller.profiling")
          ->warn(
              "profile answer {} from {} (job {} rank {}) answers no "
              "request sent there; dropped",
              r.profiles(i).request_id(), host, t.job_id(), t.global_rank());
    }
  }
  return first;
}

bool TrainerProfileService::TakeAnswer(const std::string& host,
                                       const v1::TrainerIdentity& t,
                                       const v1::ProfileResult& result) {
  auto req = by_request_.find(result.request_id());
  if (req == by_request_.end()) return false;
  auto cap = in_flight_.find(req->second);
  if (cap == in_flight_.end()) return false;
  Capture& c = cap->second;
  Side* side =
      c.suspect.request_id == result.request_id() ? &c.suspect : &c.peer;
  if (side->request_id != result.request_id() || side->answered ||
      side->host != host || side->rank != t.global_rank() ||
      c.job_id != t.job_id()) {
    return false;
  }
  side->answered = true;
  side->result = result;
  return true;
}

const TrainerProfileService::Trainer* TrainerProfileService::FindTrainer(
    const std::string& job, int32_t rank, int64_t now) const {
  auto it = trainers_.find({job, rank});
  if (it == trainers_.end() ||
      now - it->second.seen_ns >
          absl::ToInt64Nanoseconds(options_.trainer_max_age)) {
    return nullptr;
  }
  return &it->second;
}

int32_t TrainerProfileService::PickPeer(const v1::Fault& f, int32_t suspect,
                                        int64_t now) const {
  const Trainer* s = FindTrainer(f.job_id(), suspect, now);
  int32_t same_host = -1;
  for (auto it = trainers_.lower_bound({f.job_id(), 0});
       it != trainers_.end() && it->first.first == f.job_id(); ++it) {
    const int32_t rank = it->first.second;
    if (rank == suspect || IsSuspect(f, rank) ||
        FindTrainer(f.job_id(), rank, now) == nullptr) {
      continue;
    }
    // Another host first: a cause on the suspect's node (CPU contention,
    // thermal throttling) may slow its neighbours too.
    if (s == nullptr || it->second.host != s->host) return rank;
    if (same_host < 0) same_host = rank;
  }
  return same_host;
}

v1::ProfileRequest TrainerProfileService::MakeRequest(const Capture& c,
                                                      const Side& side,
                                                      int32_t other) const {
  v1::ProfileRequest r;
  r.set_request_id(side.request_id);
  r.set_job_id(c.job_id);
  r.set_global_rank(side.rank);
  r.set_steps(std::min(options_.steps, kMaxProfileSteps));
  r.set_max_ops(std::min(options_.max_ops, kMaxProfileOps));
  r.set_max_duration_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(options_.capture_timeout)));
  r.set_reason(absl::StrCat("fault ", c.fault_id, ": rank ", c.suspect.rank,
                            " slow; compared with rank ", other));
  return r;
}

int32_t TrainerProfileService::SuspectToProfile(const v1::Fault& f,
                                                int64_t now) const {
  if (f.fault_class() != v1::FAULT_CLASS_NON_COMM_SLOW ||
      f.state() == v1::FAULT_STATE_RESOLVED || !Confirmed(f) ||
      f.has_trainer_profile() || done_faults_.contains(f.fault_id()) ||
      in_flight_.contains(f.fault_id()) || busy_jobs_.contains(f.job_id()) ||
      in_flight_.size() >= options_.max_in_flight) {
    return -1;
  }
  const int32_t suspect = SuspectRank(f);
  if (suspect < 0) return -1;
  auto last = profiled_at_.find({f.job_id(), suspect});
  if (last != profiled_at_.end() &&
      now - last->second <
          absl::ToInt64Nanoseconds(options_.suspect_interval)) {
    return -1;
  }
  return suspect;
}

void TrainerProfileService::MaybeStart(const v1::Fault& f, int64_t now,
                                       CycleOut* out) {
  const int32_t suspect = SuspectToProfile(f, now);
  if (suspect < 0) return;
  const Trainer* st = FindTrainer(f.job_id(), suspect, now);
  if (st == nullptr) return;  // no trainer library on the suspect's rank
  const int32_t peer = PickPeer(f, suspect, now);
  if (peer < 0) return;
  Capture c;
  c.fault_id = f.fault_id();
  c.job_id = f.job_id();
  c.suspect.rank = suspect;
  c.suspect.host = st->host;
  c.suspect.request_id = ++next_id_;
  c.peer.rank = peer;
  c.peer.host = FindTrainer(f.job_id(), peer, now)->host;
  c.peer.request_id = ++next_id_;
  c.deadline_ns = now + absl::ToInt64Nanoseconds(options_.capture_timeout +
                                                 options_.answer_slack);
  c.requested_unix_ns = absl::ToUnixNanos(options_.clock->Now());
  out->requests.push_back({c.suspect.host, MakeRequest(c, c.suspect, peer)});
  out->requests.push_back({c.peer.host, MakeRequest(c, c.peer, suspect)});
  // The fault says at once that a capture is on its way.
  v1::TrainerProfile p;
  p.set_state(v1::TRAINER_PROFILE_STATE_REQUESTED);
  p.set_suspect_rank(suspect);
  p.set_suspect_host(c.suspect.host);
  p.set_peer_rank(peer);
  p.set_peer_host(c.peer.host);
  p.set_steps(options_.steps);
  p.set_requested_unix_ns(c.requested_unix_ns);
  p.set_text(absl::StrFormat(
      "torch.profiler window of %u steps asked of rank %d (%s, suspect) and "
      "rank %d (%s, healthy peer)",
      options_.steps, suspect, c.suspect.host, peer, c.peer.host));
  out->profiles.push_back({f.fault_id(), p});
  by_request_[c.suspect.request_id] = f.fault_id();
  by_request_[c.peer.request_id] = f.fault_id();
  busy_jobs_.insert(f.job_id());
  const int64_t interval = absl::ToInt64Nanoseconds(options_.suspect_interval);
  std::erase_if(profiled_at_,
                [&](const auto& e) { return now - e.second >= interval; });
  profiled_at_[{f.job_id(), suspect}] = now;
  stats_.requested++;
  Logger("controller.profiling")->info("fault {}: {}", f.fault_id(), p.text());
  in_flight_.emplace(f.fault_id(), std::move(c));
}

v1::TrainerProfile TrainerProfileService::Finish(const Capture& c,
                                                 bool expired) {
  v1::TrainerProfile p;
  p.set_suspect_rank(c.suspect.rank);
  p.set_suspect_host(c.suspect.host);
  p.set_peer_rank(c.peer.rank);
  p.set_peer_host(c.peer.host);
  p.set_requested_unix_ns(c.requested_unix_ns);
  p.set_finished_unix_ns(absl::ToUnixNanos(options_.clock->Now()));
  p.set_steps(options_.steps);
  std::vector<std::string> why;
  for (const Side* s : {&c.suspect, &c.peer}) {
    if (!s->answered) {
      why.push_back(absl::StrFormat(
          "rank %d's trainer (%s) did not answer within %s", s->rank, s->host,
          absl::FormatDuration(options_.capture_timeout +
                               options_.answer_slack)));
    } else if (!s->result.error().empty() || s->result.steps() == 0) {
      why.push_back(absl::StrFormat(
          "rank %d's trainer (%s) could not capture: %s", s->rank, s->host,
          s->result.error().empty() ? "no step captured" : s->result.error()));
    }
  }
  if (expired || !why.empty()) {
    p.set_state(expired ? v1::TRAINER_PROFILE_STATE_NO_ANSWER
                        : v1::TRAINER_PROFILE_STATE_FAILED);
    p.set_text(
        absl::StrCat("no torch.profiler diff: ", absl::StrJoin(why, "; ")));
    (expired ? stats_.no_answer : stats_.failed)++;
    return p;
  }
  p.set_state(v1::TRAINER_PROFILE_STATE_DONE);
  DiffProfiles(c.suspect.result, c.peer.result, options_, &p);
  stats_.done++;
  return p;
}

void TrainerProfileService::Remember(const std::string& fault_id) {
  if (!done_faults_.insert(fault_id).second) return;
  done_order_.push_back(fault_id);
  while (done_order_.size() > options_.max_remembered_faults) {
    done_faults_.erase(done_order_.front());
    done_order_.pop_front();
  }
}

TrainerProfileService::CycleOut TrainerProfileService::RunCycle(
    const std::vector<v1::Fault>& open_faults) {
  CycleOut out;
  if (!enabled()) return out;
  MutexLock lock(&mu_);
  const int64_t now = options_.clock->MonotonicNanos();
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    const Capture& c = it->second;
    const bool both = c.suspect.answered && c.peer.answered;
    if (!both && now < c.deadline_ns) {
      ++it;
      continue;
    }
    v1::TrainerProfile p = Finish(c, !both);
    Logger("controller.profiling")->info("fault {}: {}", c.fault_id, p.text());
    out.profiles.push_back({c.fault_id, std::move(p)});
    by_request_.erase(c.suspect.request_id);
    by_request_.erase(c.peer.request_id);
    busy_jobs_.erase(c.job_id);
    Remember(c.fault_id);
    it = in_flight_.erase(it);
  }
  for (const v1::Fault& f : open_faults) MaybeStart(f, now, &out);
  return out;
}

}  // namespace pitstop::controller
