// The agent's side of standby migration (docs/migration.md): directives
// from the controller go to a MigrationPlane, which answers READY /
// SWITCHED for the node's ranks of the job.
//
// The kinds:
//  - library: the relay to the in-process library's rebuilder
//    (library_migration_plane.h): the real data plane.
//  - none (default): every PREPARE is answered with a failure naming the
//    reason, so a migration of this node's job aborts cleanly instead of
//    hanging until its timeout; the registration says
//    migration_data_plane "" and the controller refuses such jobs upfront.
//  - emulated: the agent answers for its ranks itself, at once. For tests
//    and the control-plane benchmark only: nothing moves on the ranks.
#ifndef PITSTOP_AGENT_MIGRATION_PLANE_H_
#define PITSTOP_AGENT_MIGRATION_PLANE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::agent {
class AgentCore;
}  // namespace pitstop::agent

namespace pitstop::agent {

// Where the library relay's joiner launchers come from.
struct JoinerLaunchOptions {
  std::string joiners_file;  // "" = none
  std::string host;
  std::string agent_socket;
  Clock* clock = Clock::Real();
};

// Thread-safe. `ack` may be called from inside OnDirective or later, from
// any thread; it must not block.
class MigrationPlane {
 public:
  using AckFn = std::function<void(const v1::MigrationAck&)>;
  virtual ~MigrationPlane() = default;
  // "none", "emulated" or "library" (needs `core`, which must outlive
  // the plane; `joiners_file`: its joiner launchers, joiner_config.h);
  // InvalidArgument otherwise, or for a bad joiners file.
  static absl::StatusOr<std::unique_ptr<MigrationPlane>> Create(
      const std::string& kind, AckFn ack, AgentCore* core = nullptr,
      const JoinerLaunchOptions& joiners = {});
  virtual void OnDirective(const v1::MigrationDirective& d) = 0;
  // What the registration reports ("" for none).
  virtual std::string name() const = 0;
};

// Answers every directive at once (tests, benchmarks); MAKE_IDS with
// random ids. A repeated
// directive (same migration, epoch and phase) gets the same answer again.
class EmulatedMigrationPlane final : public MigrationPlane {
 public:
  explicit EmulatedMigrationPlane(AckFn ack) : ack_(std::move(ack)) {}
  void OnDirective(const v1::MigrationDirective& d) override;
  std::string name() const override { return "emulated"; }
  // Directives applied (repeats not counted).
  size_t applied() const;

 private:
  AckFn ack_;
  mutable Mutex mu_;
  std::map<std::tuple<std::string, uint64_t, int>, v1::MigrationAck> seen_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_MIGRATION_PLANE_H_
