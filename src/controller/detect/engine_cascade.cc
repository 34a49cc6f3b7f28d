// Stragglers that are victims of a slow communicator (cascade without a
// global synchronisation): a rank of comm C arrives late because it spends
// longer in comm D, whose links are slow; and stragglers that are victims
// of another comm's straggler: a rank of C arrives late because it waited
// in D for D's straggler (a slow GPU's node-mates in the DP all-reduces).
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/engine_impl.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

// Lateness within [1/kBand, kBand] x the expected share is a match.
constexpr double kBand = 2.0;

bool HasMember(const CommState& d, const std::string& identity) {
  for (const auto& [rank, member] : d.members) {
    if (RankIdentity(d, rank) == identity) return true;
  }
  return false;
}

// `open` with rank `rank` of `c` added as a victim (once, within
// kMaxVictims) and the evidence that its lateness in `c` is a consequence;
// nullopt when `open` already carries that evidence for `c`.
std::optional<v1::Fault> WithConsequence(const v1::Fault& open,
                                         const CommState& c, int32_t rank,
                                         double lateness_ns, double expected_ns,
                                         std::string text) {
  for (const v1::Evidence& e : open.evidence()) {
    if (e.comm_hash() == c.comm_hash &&
        e.values().count("straggler_lateness_ns")) {
      return std::nullopt;
    }
  }
  v1::Fault f = open;
  const v1::Suspect victim = MemberSuspect(c, rank, v1::SUSPECT_LEVEL_RANK, 0);
  bool listed = false;
  for (const v1::Suspect& x : f.victims()) {
    listed |=
        x.global_rank() == victim.global_rank() && x.host() == victim.host();
  }
  if (!listed && f.victims_size() < kMaxVictims) *f.add_victims() = victim;
  v1::Evidence* e = f.add_evidence();
  e->set_comm_hash(c.comm_hash);
  (*e->mutable_values())[std::string(kConsequenceMark)] = 1;
  (*e->mutable_values())["straggler_lateness_ns"] = lateness_ns;
  (*e->mutable_values())["expected_lateness_ns"] = expected_ns;
  e->set_text(std::move(text));
  return f;
}

}  // namespace

bool EngineImpl::FoldStraggler(const CommState& c, const StragglerVerdict& v,
                               const v1::JobPolicy& policy, int64_t now_ns,
                               std::string* folded_key) {
  const std::string who = RankIdentity(c, v.rank);
  const int64_t fresh_ns =
      2 * static_cast<int64_t>(policy.window_ms()) * 1'000'000;
  for (const auto& [hash, d] : comms_) {
    if (hash == c.comm_hash || d.job_id != c.job_id ||
        d.comm_slow_extra_ns <= 0 || now_ns - d.comm_slow_at_ns > fresh_ns) {
      continue;
    }
    if (!HasMember(d, who) || c.window.collectives == 0) continue;
    // D's added time spread over C's collectives of the window: what the
    // straggler's lateness per collective would be if D explains it.
    const double expected = d.comm_slow_extra_ns / c.window.collectives;
    const double ratio = v.lateness_ns / expected;
    if (ratio < 1 / kBand || ratio > kBand) continue;
    for (const std::string& key :
         tracker_.OpenKeys(absl::StrCat("commslow/", d.job_id, "/"))) {
      const v1::Fault* open = tracker_.Find(key);
      if (open == nullptr || open->comm_hash() != hash) continue;
      *folded_key = key;
      std::optional<v1::Fault> f = WithConsequence(
          *open, c, v.rank, v.lateness_ns, expected,
          absl::StrFormat(
              "consequence: %s arrives late in %s by %.0f us per collective, "
              "the time this slow communicator adds (%.0f us): a victim, not "
              "a straggler",
              DescribeRank(c, v.rank), c.comm_name, v.lateness_ns / 1e3,
              expected / 1e3));
      if (!f) continue;
      tracker_.Raise(key, *f, f->state());
    }
    return true;
  }
  return false;
}

bool EngineImpl::FoldStragglerVictim(const CommState& c,
                                     const StragglerVerdict& v,
                                     const v1::JobPolicy& policy,
                                     int64_t now_ns, std::string* root_key) {
  const std::string who = RankIdentity(c, v.rank);
  const int64_t fresh_ns =
      2 * static_cast<int64_t>(policy.window_ms()) * 1'000'000;
  for (const auto& [hash, d] : comms_) {
    if (hash == c.comm_hash || d.job_id != c.job_id ||
        d.straggler_identity.empty() || d.straggler_identity == who ||
        now_ns - d.straggler_at_ns > fresh_ns || d.straggler_lateness_ns <= 0) {
      continue;
    }
    if (!HasMember(d, who)) continue;
    // It waited in D for D's straggler about as long as it is late here.
    const double ratio = v.others_wait_ns / d.straggler_lateness_ns;
    if (ratio < 1 / kBand || ratio > kBand) continue;
    const v1::Fault* open = tracker_.Find(d.straggler_key);
    if (open != nullptr) {
      std::optional<v1::Fault> f = WithConsequence(
          *open, c, v.rank, v.others_wait_ns, d.straggler_lateness_ns,
          absl::StrFormat(
              "consequence: %s arrives late in %s by %.0f us per collective, "
              "about the time it waits in %s for the straggler (%.0f us): a "
              "victim, not a straggler",
              DescribeRank(c, v.rank), c.comm_name, v.others_wait_ns / 1e3,
              d.comm_name, d.straggler_lateness_ns / 1e3));
      if (f) tracker_.Raise(d.straggler_key, *f, f->state());
    }
    *root_key = d.straggler_key;
    return true;
  }
  return false;
}

}  // namespace pitstop::controller
