// Restarts, checkpoints, deaths and migrations of a job's processes
// (intelligent-machine-learning/dlrover#1749, meta-pytorch/torchft#63):
// deaths of one job close together are one fault, communicators of an
// earlier generation stop holding anyone once the job moved on, and those a
// committed migration replaced are forgotten.
#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/engine_impl.h"

namespace pitstop::controller {
namespace {

// Deaths of one job within this long of its first death share its fault:
// a launcher (torchrun, dlrover) tears the other workers down within
// seconds of one failing, and a restart kills them all at once.
constexpr int64_t kDeathFoldWindowNs = 30'000'000'000;
// Later deaths listed as suspects of the episode's fault; more are counted.
constexpr int kMaxFoldedSuspects = 16;

}  // namespace

std::string EngineImpl::DeathEpisodeOf(absl::string_view host,
                                       absl::string_view job) {
  // A job's name is at most 256 bytes and never starts with a NUL.
  if (job.empty()) return absl::StrCat(absl::string_view("\0", 1), host);
  return std::string(job);
}

bool EngineImpl::FoldDeath(absl::string_view host, const v1::RankLifecycle& l,
                           int64_t now_ns) {
  auto it = job_deaths_.find(DeathEpisodeOf(host, l.job_id()));
  if (it == job_deaths_.end()) return false;
  DeathEpisode& episode = it->second;
  if (now_ns - episode.first_ns > kDeathFoldWindowNs) return false;
  const v1::Fault* open = tracker_.Find(episode.key);
  if (open == nullptr) return false;
  v1::Fault f = *open;
  ++episode.deaths;
  for (auto& [hash, c] : comms_) {
    for (auto& [r, m] : c.members) {
      if (m.dead && OfProcess(c, m, host, l)) {
        m.death_key = episode.key;
      }
    }
  }
  if (f.suspects_size() < kMaxFoldedSuspects) {
    v1::Suspect* s = f.add_suspects();
    s->set_level(v1::SUSPECT_LEVEL_PROCESS);
    s->set_host(std::string(host));
    s->set_pid(l.pid());
    s->set_global_rank(l.global_rank());
    s->set_comm_rank(-1);
    s->set_gpu_index(-1);
    s->set_peer_global_rank(-1);
    s->set_peer_comm_rank(-1);
    // Likelier torn down after the first than failed on its own.
    s->set_confidence(0.3);
    // A suspect is never also a victim.
    auto* victims = f.mutable_victims();
    for (int i = victims->size() - 1; i >= 0; --i) {
      const v1::Suspect& v = victims->Get(i);
      if ((l.global_rank() >= 0 && v.global_rank() == l.global_rank()) ||
          (v.host() == host && v.pid() == l.pid() && l.pid() != 0)) {
        victims->DeleteSubrange(i, 1);
      }
    }
  }
  if (f.evidence_size() > 0) {
    auto& values = *f.mutable_evidence(0)->mutable_values();
    values["deaths_in_job"] = episode.deaths;
    values["deaths_window_s"] = (now_ns - episode.first_ns) / 1e9;
  }
  std::string summary = f.summary();
  const size_t cut = summary.find("; then ");
  if (cut != std::string::npos) summary.resize(cut);
  f.set_summary(absl::StrFormat(
      "%s; then %d more process(es) of %s ended within %.1f s (the "
      "launcher tearing the job down or restarting it: one fault, the first "
      "death is the likely cause)",
      summary, episode.deaths - 1,
      l.job_id().empty() ? absl::StrCat("no job on ", host)
                         : absl::StrCat("job ", l.job_id()),
      (now_ns - episode.first_ns) / 1e9));
  tracker_.Raise(episode.key, f, v1::FAULT_STATE_CONFIRMED);
  return true;
}

void EngineImpl::RetireOldGenerations() {
  // Runs every cycle under the controller's lock, before its first yield
  // (docs/reliability.md, "Round 8"): only communicators with a dead member
  // can retire, and only their live members' (host, pid) need looking up,
  // so a cluster without deaths costs a look at each communicator's
  // dead_members, and one with deaths a lookup table of those members only.
  struct Dying {
    std::map<uint64_t, CommState>::iterator it;
    int64_t first_death = 0;
  };
  std::vector<Dying> dying;
  for (auto it = comms_.begin(); it != comms_.end(); ++it) {
    if (it->second.dead_members == 0) continue;
    int64_t first_death = 0;
    for (const auto& [r, m] : it->second.members) {
      if (m.dead && (first_death == 0 || m.died_ns < first_death)) {
        first_death = m.died_ns;
      }
    }
    if (first_death != 0) dying.push_back({it, first_death});
  }
  if (dying.empty()) return;
  // (host, pid) of the dying comms' live members -> engine clock of the
  // newest creation among the comms it belongs to that have no dead member
  // (kNotSeen: none). The keys view the members' own strings, which
  // nothing changes until the erasures below.
  constexpr int64_t kNotSeen = -1;
  absl::flat_hash_map<std::pair<absl::string_view, uint32_t>, int64_t>
      newest_live_comm;
  for (const Dying& d : dying) {
    for (const auto& [r, m] : d.it->second.members) {
      if (m.dead || m.exited || m.pid == 0) continue;
      newest_live_comm.try_emplace({m.host, m.pid}, kNotSeen);
    }
  }
  if (!newest_live_comm.empty()) {
    for (const auto& [hash, c] : comms_) {
      if (c.dead_members > 0) continue;
      for (const auto& [r, m] : c.members) {
        if (m.pid == 0) continue;
        auto t = newest_live_comm.find(
            std::make_pair(absl::string_view(m.host), m.pid));
        if (t == newest_live_comm.end()) continue;
        t->second =
            std::max<int64_t>(std::max<int64_t>(t->second, 0), c.created_ns);
      }
    }
  }
  std::vector<std::map<uint64_t, CommState>::iterator> retire;
  for (const Dying& d : dying) {
    bool all_gone = true;
    bool live_moved_on = true;
    for (const auto& [r, m] : d.it->second.members) {
      all_gone &= m.dead || m.Left();
      if (m.dead || m.Left()) continue;
      auto moved = newest_live_comm.find(
          std::make_pair(absl::string_view(m.host), m.pid));
      live_moved_on &= m.pid != 0 && moved != newest_live_comm.end() &&
                       moved->second != kNotSeen &&
                       moved->second > d.first_death;
    }
    if (all_gone || live_moved_on) retire.push_back(d.it);
  }
  newest_live_comm.clear();  // its keys view members about to be erased
  for (auto it : retire) {
    ++stats_.comms_retired;
    EraseComm(it);
  }
}

void EngineImpl::RetireComms(const std::vector<uint64_t>& comm_hashes,
                             absl::string_view why) {
  for (uint64_t hash : comm_hashes) {
    if (hash == 0 || !retired_.insert(hash).second) continue;
    retire_pending_[hash] = std::string(why);
    retired_order_.push_back(hash);
    if (retired_order_.size() > kMaxRetiredComms) {
      retired_.erase(retired_order_.front());
      retired_order_.pop_front();
    }
  }
}

void EngineImpl::RetireReplacedComms() {
  for (const auto& [hash, why] : retire_pending_) {
    for (const std::string& key :
         tracker_.OpenKeys(absl::StrFormat("hang/%x/", hash))) {
      tracker_.Clear(key, why);
    }
    auto it = comms_.find(hash);
    if (it == comms_.end()) continue;
    ++stats_.comms_retired;
    EraseComm(it);
  }
  retire_pending_.clear();
}

}  // namespace pitstop::controller
