#include "src/controller/migration/migration_metrics.h"

#include <cstdint>

namespace pitstop::controller {
namespace {

const prometheus::Histogram::BucketBoundaries& PhaseBuckets() {
  static const prometheus::Histogram::BucketBoundaries b{
      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return b;
}

// Seconds from `from` to `to` (unix ns); negative when either is unset.
double Seconds(uint64_t from, uint64_t to) {
  if (from == 0 || to == 0 || to < from) return -1;
  return static_cast<double>(to - from) / 1e9;
}

}  // namespace

const char* AbortCauseName(AbortCause c) {
  switch (c) {
    case AbortCause::kPrepareTimeout:
      return "prepare_timeout";
    case AbortCause::kSwitchTimeout:
      return "switch_timeout";
    case AbortCause::kMemberFailed:
      return "member_failed";
    case AbortCause::kJoinerDied:
      return "joiner_died";
    case AbortCause::kLeaverDied:
      return "leaver_died";
    case AbortCause::kMemberDied:
      return "member_died";
    case AbortCause::kUnreachable:
      return "unreachable";
    case AbortCause::kRestart:
      return "restart";
    case AbortCause::kOperator:
      return "operator";
  }
  return "operator";
}

MigrationMetrics::MigrationMetrics(prometheus::Registry* registry)
    : started_(&prometheus::BuildCounter()
                    .Name("pitstop_controller_migrations_started_total")
                    .Help("Standby migrations requested, by origin: policy "
                          "(ACT) or operator (MigrateNode)")
                    .Register(*registry)),
      committed_(&prometheus::BuildCounter()
                      .Name("pitstop_controller_migrations_committed_total")
                      .Help("Standby migrations committed")
                      .Register(*registry)
                      .Add({})),
      aborted_(&prometheus::BuildCounter()
                    .Name("pitstop_controller_migrations_aborted_total")
                    .Help("Standby migrations aborted, by reason class")
                    .Register(*registry)),
      phase_(&prometheus::BuildHistogram()
                  .Name("pitstop_controller_migration_phase_seconds")
                  .Help("Time a migration spent in each phase it went "
                        "through: queued, make_ids, prepare, switch")
                  .Register(*registry)),
      downtime_(&prometheus::BuildHistogram()
                     .Name("pitstop_controller_migration_downtime_seconds")
                     .Help("Pause of a committed migration as the controller "
                           "bounds it: expected (SWITCH_AT sent to the last "
                           "SWITCHED), from_replica (request to the last "
                           "SWITCHED)")
                     .Register(*registry)) {
  for (const char* origin : {"policy", "operator"}) {
    started_->Add({{"origin", origin}});
  }
  for (AbortCause c : kAbortCauses) {
    aborted_->Add({{"reason", AbortCauseName(c)}});
  }
  for (const char* phase : {"queued", "make_ids", "prepare", "switch"}) {
    phase_->Add({{"phase", phase}}, PhaseBuckets());
  }
  for (const char* kind : {"expected", "from_replica"}) {
    downtime_->Add({{"kind", kind}}, PhaseBuckets());
  }
}

void MigrationMetrics::Started(const v1::Migration& m) {
  started_
      ->Add({{"origin", m.requested_by() == "policy" ? "policy" : "operator"}})
      .Increment();
}

void MigrationMetrics::Committed(const v1::Migration& m) {
  committed_->Increment();
  ObservePhases(m);
  const double down = m.from_replica()
                          ? Seconds(m.created_unix_ns(), m.switched_unix_ns())
                          : Seconds(m.ready_unix_ns(), m.switched_unix_ns());
  if (down >= 0) {
    downtime_
        ->Add({{"kind", m.from_replica() ? "from_replica" : "expected"}},
              PhaseBuckets())
        .Observe(down);
  }
}

void MigrationMetrics::Aborted(const v1::Migration& m, AbortCause cause) {
  aborted_->Add({{"reason", AbortCauseName(cause)}}).Increment();
  ObservePhases(m);
}

void MigrationMetrics::ObservePhases(const v1::Migration& m) {
  const uint64_t ids = m.ids_from_joiner() ? m.ids_unix_ns() : 0;
  const uint64_t prepare_from = m.ids_from_joiner() ? ids : m.prepare_unix_ns();
  const struct {
    const char* phase;
    double s;
  } phases[] = {
      {"queued", Seconds(m.created_unix_ns(), m.prepare_unix_ns())},
      {"make_ids", Seconds(m.prepare_unix_ns(), ids)},
      {"prepare", Seconds(prepare_from, m.ready_unix_ns())},
      {"switch", Seconds(m.ready_unix_ns(), m.switched_unix_ns())},
  };
  for (const auto& p : phases) {
    if (p.s >= 0)
      phase_->Add({{"phase", p.phase}}, PhaseBuckets()).Observe(p.s);
  }
}

}  // namespace pitstop::controller
