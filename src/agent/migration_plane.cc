#include "src/agent/migration_plane.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "pitstop/status_macros.h"
#include "src/agent/joiner_config.h"
#include "src/agent/library_migration_plane.h"

namespace pitstop::agent {
namespace {

v1::MigrationAck AckFor(const v1::MigrationDirective& d, bool ok,
                        const std::string& error) {
  v1::MigrationAck a;
  a.set_migration_id(d.migration_id());
  a.set_epoch(d.epoch());
  a.set_phase(d.phase());
  a.set_ok(ok);
  a.set_error(error);
  return a;
}

// No data plane: PREPARE fails with the reason, so the migration aborts at
// once; the other phases need no answer.
class NoMigrationPlane final : public MigrationPlane {
 public:
  explicit NoMigrationPlane(AckFn ack) : ack_(std::move(ack)) {}
  void OnDirective(const v1::MigrationDirective& d) override {
    Logger("agent")->warn("migration {} of job {}: {} refused: {}",
                          d.migration_id(), d.job_id(),
                          v1::MigrationDirective::Phase_Name(d.phase()), kWhy);
    if (d.phase() == v1::MigrationDirective::PHASE_PREPARE ||
        d.phase() == v1::MigrationDirective::PHASE_SWITCH_AT ||
        d.phase() == v1::MigrationDirective::PHASE_MAKE_IDS) {
      ack_(AckFor(d, false, kWhy));
    }
  }
  std::string name() const override { return ""; }

 private:
  static constexpr const char* kWhy =
      "this agent has no migration data plane (migration.data_plane)";
  AckFn ack_;
};

// Random ids stand in for what a library would make.
std::string RandomId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); i += 8) {
    const uint64_t r = rng();
    std::copy_n(reinterpret_cast<const char*>(&r), 8, id.begin() + i);
  }
  return id;
}

v1::MigrationAck EmulatedAck(const v1::MigrationDirective& d) {
  v1::MigrationAck a = AckFor(d, true, "");
  if (d.phase() != v1::MigrationDirective::PHASE_MAKE_IDS) return a;
  for (const v1::CommRebuild& c : d.comms()) {
    v1::CommRebuild* m = a.add_made_comms();
    m->set_old_comm_hash(c.old_comm_hash());
    m->set_comm_name(c.comm_name());
    m->set_new_comm_id(RandomId());
  }
  for (int32_t rank : d.moved_global_ranks()) {
    v1::TransferComm* t = a.add_made_transfers();
    t->set_global_rank(rank);
    t->set_comm_id(RandomId());
  }
  return a;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MigrationPlane>> MigrationPlane::Create(
    const std::string& kind, AckFn ack, AgentCore* core,
    const JoinerLaunchOptions& joiners) {
  if (!joiners.joiners_file.empty() && kind != "library") {
    return absl::InvalidArgumentError(
        absl::StrCat("migration.joiners_file (--migration-joiners-file): needs "
                     "migration.data_plane library, got '",
                     kind, "'"));
  }
  if (kind.empty() || kind == "none") {
    return std::unique_ptr<MigrationPlane>(
        new NoMigrationPlane(std::move(ack)));
  }
  if (kind == "emulated") {
    return std::unique_ptr<MigrationPlane>(
        new EmulatedMigrationPlane(std::move(ack)));
  }
  if (kind == "library" && core != nullptr) {
    LibraryMigrationPlane::Launch launch;
    if (!joiners.joiners_file.empty()) {
      ASSIGN_OR_RETURN(
          launch.launchers,
          LoadJoinerLaunchers(joiners.joiners_file, joiners.clock));
    }
    launch.host = joiners.host;
    launch.agent_socket = joiners.agent_socket;
    return std::unique_ptr<MigrationPlane>(
        new LibraryMigrationPlane(core, std::move(ack), std::move(launch)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("migration.data_plane: expected none, emulated or library, "
                   "got '",
                   kind, "'"));
}

void EmulatedMigrationPlane::OnDirective(const v1::MigrationDirective& d) {
  const bool answered = d.phase() == v1::MigrationDirective::PHASE_PREPARE ||
                        d.phase() == v1::MigrationDirective::PHASE_SWITCH_AT ||
                        d.phase() == v1::MigrationDirective::PHASE_MAKE_IDS;
  if (!answered) {
    Logger("agent")->info("migration {} of job {}: {}{}", d.migration_id(),
                          d.job_id(),
                          v1::MigrationDirective::Phase_Name(d.phase()),
                          d.reason().empty() ? "" : ": " + d.reason());
  }
  v1::MigrationAck a;
  {
    MutexLock lock(&mu_);
    auto [it, fresh] = seen_.try_emplace(
        {d.migration_id(), d.epoch(), static_cast<int>(d.phase())});
    if (fresh) it->second = EmulatedAck(d);
    a = it->second;
  }
  if (answered) ack_(a);
}

size_t EmulatedMigrationPlane::applied() const {
  MutexLock lock(&mu_);
  return seen_.size();
}

}  // namespace pitstop::agent
