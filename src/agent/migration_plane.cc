#include "src/agent/migration_plane.h"

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

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
        d.phase() == v1::MigrationDirective::PHASE_SWITCH_AT) {
      ack_(AckFor(d, false, kWhy));
    }
  }
  std::string name() const override { return ""; }

 private:
  static constexpr const char* kWhy =
      "this agent has no migration data plane (migration.data_plane)";
  AckFn ack_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MigrationPlane>> MigrationPlane::Create(
    const std::string& kind, AckFn ack) {
  if (kind.empty() || kind == "none") {
    return std::unique_ptr<MigrationPlane>(
        new NoMigrationPlane(std::move(ack)));
  }
  if (kind == "emulated") {
    return std::unique_ptr<MigrationPlane>(
        new EmulatedMigrationPlane(std::move(ack)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "migration.data_plane: expected none or emulated, got '", kind, "'"));
}

void EmulatedMigrationPlane::OnDirective(const v1::MigrationDirective& d) {
  {
    MutexLock lock(&mu_);
    seen_[{d.migration_id(), d.epoch(), static_cast<int>(d.phase())}] = true;
  }
  if (d.phase() == v1::MigrationDirective::PHASE_PREPARE ||
      d.phase() == v1::MigrationDirective::PHASE_SWITCH_AT) {
    ack_(AckFor(d, true, ""));
    return;
  }
  Logger("agent")->info("migration {} of job {}: {}{}", d.migration_id(),
                        d.job_id(),
                        v1::MigrationDirective::Phase_Name(d.phase()),
                        d.reason().empty() ? "" : ": " + d.reason());
}

size_t EmulatedMigrationPlane::applied() const {
  MutexLock lock(&mu_);
  return seen_.size();
}

}  // namespace pitstop::agent
