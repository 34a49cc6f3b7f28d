// Prometheus metrics of standby migrations (docs/migration.md, "Metrics"),
// fed by the migration state machine (MigrationEvents):
//   pitstop_controller_migrations_started_total{origin}  policy | operator
//   pitstop_controller_migrations_committed_total
//   pitstop_controller_migrations_aborted_total{reason}  AbortCauseName
//   pitstop_controller_migration_phase_seconds{phase}    histogram: queued,
//       make_ids, prepare, switch (each phase a migration went through,
//       observed when it finishes)
//   pitstop_controller_migration_downtime_seconds{kind}  histogram, at
//       commit: expected (SWITCH_AT sent to the last SWITCHED) or
//       from_replica (the request to the last SWITCHED)
// Every series exists (at 0) from the start, so dashboards and alerts see
// them before the first migration.
#ifndef PITSTOP_CONTROLLER_MIGRATION_MIGRATION_METRICS_H_
#define PITSTOP_CONTROLLER_MIGRATION_MIGRATION_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/controller/migration/migration_events.h"

namespace pitstop::controller {

// Thread-safe (prometheus-cpp metrics are atomic); never blocks.
class MigrationMetrics final : public MigrationEvents {
 public:
  explicit MigrationMetrics(prometheus::Registry* registry);
  void Started(const v1::Migration& m) override;
  void Committed(const v1::Migration& m) override;
  void Aborted(const v1::Migration& m, AbortCause cause) override;

 private:
  // The phases `m` went through, each observed once.
  void ObservePhases(const v1::Migration& m);

  prometheus::Family<prometheus::Counter>* started_;
  prometheus::Counter* committed_;
  prometheus::Family<prometheus::Counter>* aborted_;
  prometheus::Family<prometheus::Histogram>* phase_;
  prometheus::Family<prometheus::Histogram>* downtime_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_MIGRATION_MIGRATION_METRICS_H_
