// What the migration state machine tells an observer (MigrationMetrics, a
// test): a migration started, committed, or aborted and why, as one of a
// few fixed causes (the abort reason text stays on the record).
#ifndef PITSTOP_CONTROLLER_MIGRATION_MIGRATION_EVENTS_H_
#define PITSTOP_CONTROLLER_MIGRATION_MIGRATION_EVENTS_H_

#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// Why a migration was aborted (docs/migration.md, the abort table).
enum class AbortCause {
  kPrepareTimeout,  // PREPARE (or the joiner's MAKE_IDS) timed out
  kSwitchTimeout,   // SWITCH_AT timed out
  kMemberFailed,    // a member answered ok = false, or unusable ids
  kJoinerDied,      // the joiner's agent stream or a rank of it died
  kLeaverDied,      // the leaver died before its state went
  kMemberDied,      // a stayer died
  kUnreachable,     // a member's agent was not connected for PREPARE
  kRestart,         // a restarted controller with migrate.resume off
  kOperator,        // MigrationManager::Abort
};
inline constexpr AbortCause kAbortCauses[] = {
    AbortCause::kPrepareTimeout, AbortCause::kSwitchTimeout,
    AbortCause::kMemberFailed,   AbortCause::kJoinerDied,
    AbortCause::kLeaverDied,     AbortCause::kMemberDied,
    AbortCause::kUnreachable,    AbortCause::kRestart,
    AbortCause::kOperator};
// "prepare_timeout", "switch_timeout", "member_failed", "joiner_died",
// "leaver_died", "member_died", "unreachable", "restart", "operator".
const char* AbortCauseName(AbortCause c);

// Called by MigrationManager from inside its calls (MigrationService holds
// its lock): must not block nor call back into migrations. Each migration
// is Started once and Committed or Aborted once, with the record as stored
// (its phase times set).
class MigrationEvents {
 public:
  virtual ~MigrationEvents() = default;
  virtual void Started(const v1::Migration& m) = 0;
  virtual void Committed(const v1::Migration& m) = 0;
  virtual void Aborted(const v1::Migration& m, AbortCause cause) = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_MIGRATION_MIGRATION_EVENTS_H_
