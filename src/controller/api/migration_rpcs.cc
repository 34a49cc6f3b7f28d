// The Controller API's standby-migration calls: thin adapters over
// MigrationService; the WatchMigrations stream is in streams.cc with
// WatchFaults.
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/streams.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/migration/migration_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::MigrateNode(
    grpc::CallbackServerContext* ctx, const v1::MigrateNodeRequest* req,
    v1::MigrateNodeResponse* resp) {
  PITSTOP_AUTHORIZE(MigrateNode);
  absl::StatusOr<v1::Migration> m = s_.migration->MigrateNode(*req);
  if (m.ok()) *resp->mutable_migration() = std::move(*m);
  return FinishUnary(ctx, m.status());
}

grpc::ServerUnaryReactor* ControllerService::GetMigration(
    grpc::CallbackServerContext* ctx, const v1::GetMigrationRequest* req,
    v1::GetMigrationResponse* resp) {
  PITSTOP_AUTHORIZE(GetMigration);
  absl::StatusOr<v1::Migration> m =
      s_.migration->GetMigration(req->migration_id());
  if (m.ok()) *resp->mutable_migration() = std::move(*m);
  return FinishUnary(ctx, m.status());
}

grpc::ServerUnaryReactor* ControllerService::ListMigrations(
    grpc::CallbackServerContext* ctx, const v1::ListMigrationsRequest* req,
    v1::ListMigrationsResponse* resp) {
  PITSTOP_AUTHORIZE(ListMigrations);
  for (v1::Migration& m :
       s_.migration->ListMigrations(req->job_id(), req->include_finished())) {
    *resp->add_migrations() = std::move(m);
  }
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::WatchMigrationsResponse>*
ControllerService::WatchMigrations(grpc::CallbackServerContext* ctx,
                                   const v1::WatchMigrationsRequest* req) {
  if (absl::Status st =
          Authorize(ctx, "/pitstop.v1.Controller/WatchMigrations");
      !st.ok()) {
    return NewRefusedMigrationWatchReactor(st);
  }
  return NewMigrationWatchReactor(s_.migration, *req);
}

grpc::ServerUnaryReactor* ControllerService::ListStandby(
    grpc::CallbackServerContext* ctx, const v1::ListStandbyRequest*,
    v1::ListStandbyResponse* resp) {
  PITSTOP_AUTHORIZE(ListStandby);
  for (v1::StandbyNode& n : s_.migration->Standby())
    *resp->add_nodes() = std::move(n);
  return FinishUnary(ctx, absl::OkStatus());
}

}  // namespace pitstop::controller
