#include "src/agent/library_migration_plane.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"

namespace pitstop::agent {
namespace {

using Phase = v1::MigrationDirective;
using RankDirective = v1::RankMigrationDirective;

// The phases in the order a rank must get them.
constexpr int kRelayOrder[] = {Phase::PHASE_MAKE_IDS, Phase::PHASE_PREPARE,
                               Phase::PHASE_SWITCH_AT};

bool Answered(int phase) {
  return phase == Phase::PHASE_MAKE_IDS || phase == Phase::PHASE_PREPARE ||
         phase == Phase::PHASE_SWITCH_AT;
}

RankDirective::Role RankRole(v1::MigrationRole role) {
  switch (role) {
    case v1::MIGRATION_ROLE_STAYER:
      return RankDirective::ROLE_STAYER;
    case v1::MIGRATION_ROLE_LEAVER:
      return RankDirective::ROLE_LEAVER;
    case v1::MIGRATION_ROLE_JOINER:
      return RankDirective::ROLE_JOINER;
    default:
      return RankDirective::ROLE_UNSPECIFIED;
  }
}

std::string PhaseName(int phase) {
  return Phase::Phase_Name(static_cast<Phase::Phase>(phase));
}

}  // namespace

LibraryMigrationPlane::LibraryMigrationPlane(AgentCore* core, AckFn ack,
                                             Launch launch)
    : core_(core), ack_(std::move(ack)), launch_(std::move(launch)) {
  core_->SetMigrationListener(this);
}

LibraryMigrationPlane::~LibraryMigrationPlane() {
  core_->SetMigrationListener(nullptr);
}

LibraryMigrationPlane::Relay* LibraryMigrationPlane::RelayFor(
    const v1::MigrationDirective& d) {
  Relay& r = relays_[d.job_id()];
  if (r.migration_id != d.migration_id() || r.epoch != d.epoch()) {
    r = Relay();
    r.migration_id = d.migration_id();
    r.epoch = d.epoch();
    r.job_id = d.job_id();
  }
  return &r;
}

JoinerLauncher* LibraryMigrationPlane::LauncherFor(
    const v1::MigrationDirective& d) {
  if (d.role() != v1::MIGRATION_ROLE_JOINER ||
      (d.phase() != Phase::PHASE_MAKE_IDS &&
       d.phase() != Phase::PHASE_PREPARE)) {
    return nullptr;
  }
  auto it = launch_.launchers.find(d.job_id());
  if (it == launch_.launchers.end()) return nullptr;
  auto existing = relays_.find(d.job_id());
  if (existing != relays_.end() && existing->second.epoch > d.epoch()) {
    return nullptr;  // stale: OnDirective ignores it
  }
  if (!launched_.insert({d.migration_id(), d.epoch()}).second) return nullptr;
  return it->second.get();
}

absl::Status LibraryMigrationPlane::LaunchJoiners(
    JoinerLauncher* launcher, const v1::MigrationDirective& d) {
  Logger("agent")->info(
      "migration {} of job {}: starting {} joiner(s) with the {} launcher",
      d.migration_id(), d.job_id(), d.moved_global_ranks_size(),
      launcher->name());
  if (d.moved_global_ranks_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("joiner launcher ", launcher->name(), ": ",
                     PhaseName(d.phase()), " names no moved ranks to start"));
  }
  JoinerSpec spec;
  spec.job_id = d.job_id();
  spec.migration_id = d.migration_id();
  spec.host = launch_.host;
  spec.leaver_host = d.leaver_host();
  spec.agent_socket = launch_.agent_socket;
  for (int32_t rank : d.moved_global_ranks()) {
    spec.global_rank = rank;
    if (absl::Status s = launcher->Launch(spec); !s.ok()) {
      launcher->Stop(d.migration_id());  // the ranks started before it
      return s;
    }
    ++spec.local_rank;
  }
  return absl::OkStatus();
}

void LibraryMigrationPlane::OnDirective(const v1::MigrationDirective& d) {
  JoinerLauncher* launcher = nullptr;
  {
    MutexLock lock(&mu_);
    launcher = LauncherFor(d);
  }
  absl::Status launched = absl::OkStatus();
  if (launcher != nullptr) launched = LaunchJoiners(launcher, d);
  MutexLock lock(&mu_);
  auto existing = relays_.find(d.job_id());
  if (existing != relays_.end() && existing->second.epoch > d.epoch()) {
    Logger("agent")->warn(
        "migration {} of job {}: {} of epoch {} ignored "
        "(epoch {} is newer)",
        d.migration_id(), d.job_id(), PhaseName(d.phase()), d.epoch(),
        existing->second.epoch);
    return;
  }
  Relay* r = RelayFor(d);
  const int phase = d.phase();
  if (auto it = r->answered.find(phase); it != r->answered.end()) {
    ack_(it->second);  // a repeat: the same answer again
    return;
  }
  r->directives[phase] = d;
  if (!launched.ok()) {
    r->expected.insert(d.moved_global_ranks().begin(),
                       d.moved_global_ranks().end());
    Answer(r, phase, false, std::string(launched.message()));
    return;
  }
  Logger("agent")->info("migration {} of job {}: {} relayed to the ranks{}",
                        d.migration_id(), d.job_id(), PhaseName(phase),
                        d.reason().empty() ? "" : ": " + d.reason());
  Dispatch(r, phase);
  Fold(r, phase);
}

void LibraryMigrationPlane::Dispatch(Relay* r, int phase) {
  const v1::MigrationDirective& d = r->directives.at(phase);
  const std::vector<AgentCore::LocalRank> ranks = core_->RanksOfJob(r->job_id);
  if (r->expected.empty()) {
    if (d.role() == v1::MIGRATION_ROLE_JOINER &&
        d.moved_global_ranks_size() > 0) {
      r->expected.insert(d.moved_global_ranks().begin(),
                         d.moved_global_ranks().end());
    } else {
      for (const AgentCore::LocalRank& lr : ranks) {
        if (lr.global_rank < 0 && Answered(phase)) {
          Answer(r, phase, false,
                 absl::StrCat("a process of job ", r->job_id,
                              " did not say its global rank (set RANK in "
                              "its environment)"));
          return;
        }
        if (lr.global_rank >= 0) r->expected.insert(lr.global_rank);
      }
    }
  }
  if (r->expected.empty() && Answered(phase)) {
    Answer(r, phase, false,
           absl::StrCat("no rank of job ", r->job_id,
                        " is connected to this agent"));
    return;
  }
  // The latest stream of each expected rank (a reconnect makes a new one).
  std::map<int32_t, uint64_t> stream_of;
  for (const AgentCore::LocalRank& lr : ranks) {
    if (r->expected.count(lr.global_rank))
      stream_of[lr.global_rank] = lr.stream;
  }
  std::vector<int32_t> sent_now;
  for (const auto& [rank, stream] : stream_of) {
    if (r->sent.count({phase, rank})) continue;
    v1::StreamTelemetryResponse resp;
    *resp.add_migration_directive() = ForRank(*r, d, rank);
    if (core_->SendToStream(stream, resp)) {
      r->sent[{phase, rank}] = stream;
      sent_now.push_back(rank);
    }
  }
  if (!sent_now.empty()) {
    Logger("agent")->info("migration {} of job {}: {} sent to ranks {}",
                          r->migration_id, r->job_id, PhaseName(phase),
                          absl::StrJoin(sent_now, ","));
  }
}

v1::RankMigrationDirective LibraryMigrationPlane::ForRank(
    const Relay& r, const v1::MigrationDirective& d,
    int32_t global_rank) const {
  RankDirective out;
  out.set_phase(static_cast<RankDirective::Phase>(d.phase()));
  out.set_migration_id(d.migration_id());
  out.set_epoch(d.epoch());
  out.set_role(RankRole(d.role()));
  out.set_global_rank(global_rank);
  for (const v1::CommRebuild& c : d.comms()) {
    RankDirective::Comm* rc = out.add_comms();
    rc->set_old_comm_hash(c.old_comm_hash());
    rc->set_new_comm_id(c.new_comm_id());
  }
  out.set_switch_comm_hash(d.switch_comm_hash());
  out.set_switch_seq(d.switch_seq());
  out.set_reason(d.reason());
  out.set_from_replica(d.from_replica());
  for (const v1::TransferComm& t : d.transfers()) {
    // The joiner and the leaver take the moved rank's transfer; with
    // from_replica a stayer takes the one it is the source of.
    const bool mine =
        d.role() == v1::MIGRATION_ROLE_STAYER
            ? d.from_replica() && t.source_global_rank() == global_rank
            : t.global_rank() == global_rank;
    if (mine) out.set_transfer_comm_id(t.comm_id());
  }
  // One joiner makes the communicators' ids; each makes its transfer id.
  out.set_make_comm_ids(d.phase() == Phase::PHASE_MAKE_IDS &&
                        !r.expected.empty() &&
                        global_rank == *r.expected.begin());
  return out;
}

void LibraryMigrationPlane::OnRankHello(uint64_t /*stream*/,
                                        const std::string& job_id,
                                        int32_t /*global_rank*/) {
  MutexLock lock(&mu_);
  auto it = relays_.find(job_id);
  if (it == relays_.end()) return;
  Relay* r = &it->second;
  // Nothing to start on a rank once the migration ended here.
  if (r->directives.count(Phase::PHASE_COMMIT) ||
      r->directives.count(Phase::PHASE_ABORT)) {
    return;
  }
  for (int phase : kRelayOrder) {
    if (r->directives.count(phase) && !r->answered.count(phase)) {
      Dispatch(r, phase);
    }
  }
}

void LibraryMigrationPlane::OnRankAcks(
    uint64_t stream,
    const google::protobuf::RepeatedPtrField<v1::RankMigrationAck>& acks) {
  MutexLock lock(&mu_);
  for (const v1::RankMigrationAck& a : acks) {
    Logger("agent")->debug("migration {} epoch {}: rank {} answered {} ok={}",
                           a.migration_id(), a.epoch(), a.global_rank(),
                           PhaseName(a.phase()), a.ok());
    for (auto& [job, r] : relays_) {
      if (r.migration_id != a.migration_id() || r.epoch != a.epoch()) continue;
      if (!a.ok()) {
        Logger("agent")->warn("migration {}: rank {} (stream {}) failed {}: {}",
                              a.migration_id(), a.global_rank(), stream,
                              PhaseName(a.phase()), a.error());
      }
      r.acks[a.phase()][a.global_rank()] = a;
      Fold(&r, a.phase());
    }
  }
}

void LibraryMigrationPlane::Fold(Relay* r, int phase) {
  if (!Answered(phase) || r->answered.count(phase) ||
      !r->directives.count(phase)) {
    return;
  }
  const auto& acks = r->acks[phase];
  for (const auto& [rank, a] : acks) {
    if (!a.ok()) {
      Answer(r, phase, false,
             absl::StrCat("rank ", rank, ": ",
                          a.error().empty() ? "no reason" : a.error()));
      return;
    }
  }
  for (int32_t rank : r->expected) {
    if (!acks.count(rank)) return;
  }
  if (!r->expected.empty()) Answer(r, phase, true, "");
}

void LibraryMigrationPlane::Answer(Relay* r, int phase, bool ok,
                                   const std::string& error) {
  v1::MigrationAck a;
  a.set_migration_id(r->migration_id);
  a.set_epoch(r->epoch);
  a.set_phase(static_cast<Phase::Phase>(phase));
  a.set_ok(ok);
  a.set_error(error);
  for (int32_t rank : r->expected) a.add_global_ranks(rank);
  const v1::MigrationDirective& d = r->directives.at(phase);
  bool first = true;
  for (const auto& [rank, ra] : r->acks[phase]) {
    // From a replica READY carries the failed step: the lowest counts.
    a.set_progress_seq(
        d.from_replica()
            ? (first ? ra.progress_seq()
                     : std::min(a.progress_seq(), ra.progress_seq()))
            : std::max(a.progress_seq(), ra.progress_seq()));
    first = false;
    if (phase != Phase::PHASE_MAKE_IDS || !ok) continue;
    for (const RankDirective::Comm& c : ra.made_comms()) {
      v1::CommRebuild* out = a.add_made_comms();
      out->set_old_comm_hash(c.old_comm_hash());
      out->set_new_comm_id(c.new_comm_id());
      for (const v1::CommRebuild& dc : d.comms()) {
        if (dc.old_comm_hash() == c.old_comm_hash()) {
          out->set_comm_name(dc.comm_name());
        }
      }
    }
    v1::TransferComm* t = a.add_made_transfers();
    t->set_global_rank(rank);
    t->set_comm_id(ra.made_transfer_id());
  }
  Logger("agent")->info(
      "migration {} of job {}: {} {} for ranks of this host{}", r->migration_id,
      r->job_id, PhaseName(phase), ok ? "answered" : "FAILED",
      ok ? "" : ": " + error);
  r->answered[phase] = a;
  ack_(a);
}

}  // namespace pitstop::agent
