// pitstopctl standby | migrate NODE [--to STANDBY] | migrations | migration
// ID: standby migration (docs/migration.md).
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

std::string State(v1::MigrationState s) {
  return ShortEnum(v1::MigrationState_Name(s), "MIGRATION_STATE_");
}

std::string Ms(uint64_t from, uint64_t to) {
  if (from == 0 || to == 0 || to < from) return "-";
  return absl::StrCat((to - from) / 1000000);
}

void PrintMigrationTable(const v1::ListMigrationsResponse& r) {
  Table t({"ID", "JOB", "STATE", "LEAVER", "JOINER", "EPOCH", "PREPARE_MS",
           "SWITCH_MS", "BY", "CREATED", "WHY"});
  for (const v1::Migration& m : r.migrations()) {
    t.AddRow({m.migration_id(), m.job_id(), State(m.state()), m.leaver_host(),
              m.joiner_host(), absl::StrCat(m.epoch()),
              Ms(m.prepare_unix_ns(), m.ready_unix_ns()),
              Ms(m.ready_unix_ns(), m.switched_unix_ns()), m.requested_by(),
              Age(m.created_unix_ns()),
              m.abort_reason().empty() ? m.reason() : m.abort_reason()});
  }
  t.Print(std::cout);
}

void PrintMigration(const v1::Migration& m) {
  std::cout << "migration " << m.migration_id() << " of job " << m.job_id()
            << ": " << State(m.state()) << "\n"
            << "  " << m.leaver_host() << " -> " << m.joiner_host()
            << ", epoch " << m.epoch() << ", " << m.comms_size()
            << " communicators to rebuild, switch at seq " << m.switch_seq()
            << " of comm " << absl::StrCat(absl::Hex(m.switch_comm_hash()))
            << "\n"
            << "  requested by " << m.requested_by()
            << (m.reason().empty() ? "" : ": ") << m.reason()
            << (m.from_replica() ? " (state from a replica)" : "") << "\n"
            << "  created " << Age(m.created_unix_ns()) << ", prepare "
            << Ms(m.prepare_unix_ns(), m.ready_unix_ns()) << " ms, switch "
            << Ms(m.ready_unix_ns(), m.switched_unix_ns()) << " ms"
            << (m.resumed() ? absl::StrCat(", resumed ", m.resumed(),
                                           "x after a controller restart")
                            : "")
            << "\n";
  if (!m.abort_reason().empty()) {
    std::cout << "  aborted: " << m.abort_reason() << "\n";
  }
  Table t({"HOST", "ROLE", "RANKS", "READY", "SWITCHED"});
  for (const v1::MigrationMember& mem : m.members()) {
    t.AddRow({mem.host(),
              ShortEnum(v1::MigrationRole_Name(mem.role()), "MIGRATION_ROLE_"),
              absl::StrCat(mem.global_ranks_size()), mem.ready() ? "yes" : "-",
              mem.switched() ? "yes" : "-"});
  }
  t.Print(std::cout);
}

}  // namespace

void AddMigrateCommands(CLI::App* app, GlobalOptions* g, int* rc) {
  CLI::App* standby = app->add_subcommand(
      "standby",
      "list standby nodes (agents started with --standby): FREE, RESERVED "
      "by a queued or running migration, IN_USE (runs ranks), UNREACHABLE");
  standby->callback([g, rc] {
    v1::ListStandbyResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::ListStandby,
                    v1::ListStandbyRequest(), &r))) {
      return;
    }
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    Table t({"HOST", "STATE", "MIGRATION", "JOB", "GPUS", "DATA_PLANE",
             "LAST_SEEN"});
    for (const v1::StandbyNode& n : r.nodes()) {
      t.AddRow(
          {n.host(),
           ShortEnum(v1::StandbyState_Name(n.state()), "STANDBY_STATE_"),
           n.migration_id().empty() ? "-" : n.migration_id(),
           n.job_id().empty() ? "-" : n.job_id(), absl::StrCat(n.gpus()),
           n.migration_data_plane().empty() ? "none" : n.migration_data_plane(),
           Age(n.last_seen_unix_ns())});
    }
    t.Print(std::cout);
    if (r.nodes().empty()) std::cout << "(no standby nodes registered)\n";
  });

  static std::string host, to, job, reason;
  static bool from_replica = false;
  CLI::App* migrate = app->add_subcommand(
      "migrate",
      "move NODE's ranks to a standby node while the job keeps running: "
      "PREPARE (new communicators, state transfer, joiner warm-up) -> "
      "SWITCH_AT a collective past every rank -> COMMIT, or ABORT with the "
      "old communicators untouched. A second migration of the same job is "
      "queued. Prints the migration; follow it with `pitstopctl migration "
      "ID`.");
  migrate->add_option("NODE", host, "the node to leave (the leaver)")
      ->required();
  migrate->add_option("--to", to,
                      "standby node to move to (default: a free one)");
  migrate->add_option("--job", job, "job to move when several run on NODE");
  migrate->add_option("--reason", reason, "why (recorded)");
  migrate->add_flag("--from-replica", from_replica,
                    "NODE is dead: take its ranks' state from a "
                    "data-parallel replica");
  migrate->callback([g, rc] {
    v1::MigrateNodeRequest req;
    req.set_host(host);
    req.set_to(to);
    req.set_job_id(job);
    req.set_who(DefaultWho());
    req.set_reason(reason);
    req.set_from_replica(from_replica);
    v1::MigrateNodeResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::MigrateNode, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    PrintMigration(r.migration());
  });

  static std::string list_job;
  static bool all = false;
  CLI::App* list = app->add_subcommand(
      "migrations",
      "list migrations: queued and running ones, with --all also committed "
      "and aborted ones (oldest first), with per-phase times in ms");
  list->add_option("--job", list_job, "only this job");
  list->add_flag("--all", all, "include finished migrations");
  list->callback([g, rc] {
    v1::ListMigrationsRequest req;
    req.set_job_id(list_job);
    req.set_include_finished(all);
    v1::ListMigrationsResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::ListMigrations, req, &r))) {
      return;
    }
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    PrintMigrationTable(r);
    if (r.migrations().empty()) {
      std::cout << (all ? "(no migrations)\n"
                        : "(no queued or running migrations; --all shows "
                          "finished ones)\n");
    }
  });

  static std::string id;
  CLI::App* show = app->add_subcommand(
      "migration", "one migration: phases, members and their answers");
  show->add_option("ID", id, "migration id (M1, ...)")->required();
  show->callback([g, rc] {
    v1::GetMigrationRequest req;
    req.set_migration_id(id);
    v1::GetMigrationResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetMigration, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    PrintMigration(r.migration());
  });
}

}  // namespace pitstop::ctl
