// The Controller API's standby-migration calls: thin adapters over
// ControllerCore (controller_migrate.cc), and the WatchMigrations stream.
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/write_queue.h"

namespace pitstop::controller {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(ToGrpcStatus(status));
  return r;
}

class MigrationWatchReactor final
    : public grpc::ServerWriteReactor<v1::WatchMigrationsResponse> {
 public:
  MigrationWatchReactor(ControllerCore* core,
                        const v1::WatchMigrationsRequest& req)
      : core_(core), out_(this) {
    // Refused on a follower, ended when this controller steps down: both
    // UNAVAILABLE naming the leader (controller_ha.cc).
    absl::StatusOr<uint64_t> id = core_->SubscribeMigrationsClient(
        req.job_id(), req.include_existing(),
        [this](const v1::WatchMigrationsResponse& r) { out_.Enqueue(r); },
        [this](const absl::Status& why) { out_.Finish(ToGrpcStatus(why)); });
    if (id.ok()) {
      id_ = *id;
    } else {
      out_.Finish(ToGrpcStatus(id.status()));
    }
  }
  void OnWriteDone(bool ok) override {
    if (!out_.WriteDone(ok)) out_.Finish(grpc::Status::CANCELLED);
  }
  void OnCancel() override { out_.Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    core_->UnsubscribeMigrations(id_);
    delete this;
  }

 private:
  ControllerCore* const core_;
  WriteQueue<MigrationWatchReactor, v1::WatchMigrationsResponse> out_;
  uint64_t id_ = 0;
};

class RefusedMigrationWatch final
    : public grpc::ServerWriteReactor<v1::WatchMigrationsResponse> {
 public:
  explicit RefusedMigrationWatch(const absl::Status& why) {
    Finish(ToGrpcStatus(why));
  }
  void OnDone() override { delete this; }
};

}  // namespace

#define PITSTOP_AUTHORIZE(name)                                          \
  if (absl::Status st = Authorize(ctx, "/pitstop.v1.Controller/" #name); \
      !st.ok()) {                                                        \
    return Done(ctx, st);                                                \
  }

grpc::ServerUnaryReactor* ControllerService::MigrateNode(
    grpc::CallbackServerContext* ctx, const v1::MigrateNodeRequest* req,
    v1::MigrateNodeResponse* resp) {
  PITSTOP_AUTHORIZE(MigrateNode);
  absl::StatusOr<v1::Migration> m = core_->MigrateNode(*req);
  if (m.ok()) *resp->mutable_migration() = std::move(*m);
  return Done(ctx, m.status());
}

grpc::ServerUnaryReactor* ControllerService::GetMigration(
    grpc::CallbackServerContext* ctx, const v1::GetMigrationRequest* req,
    v1::GetMigrationResponse* resp) {
  PITSTOP_AUTHORIZE(GetMigration);
  absl::StatusOr<v1::Migration> m = core_->GetMigration(req->migration_id());
  if (m.ok()) *resp->mutable_migration() = std::move(*m);
  return Done(ctx, m.status());
}

grpc::ServerUnaryReactor* ControllerService::ListMigrations(
    grpc::CallbackServerContext* ctx, const v1::ListMigrationsRequest* req,
    v1::ListMigrationsResponse* resp) {
  PITSTOP_AUTHORIZE(ListMigrations);
  for (v1::Migration& m :
       core_->ListMigrations(req->job_id(), req->include_finished())) {
    *resp->add_migrations() = std::move(m);
  }
  return Done(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::WatchMigrationsResponse>*
ControllerService::WatchMigrations(grpc::CallbackServerContext* ctx,
                                   const v1::WatchMigrationsRequest* req) {
  if (absl::Status st =
          Authorize(ctx, "/pitstop.v1.Controller/WatchMigrations");
      !st.ok()) {
    return new RefusedMigrationWatch(st);
  }
  return new MigrationWatchReactor(core_, *req);
}

grpc::ServerUnaryReactor* ControllerService::ListStandby(
    grpc::CallbackServerContext* ctx, const v1::ListStandbyRequest*,
    v1::ListStandbyResponse* resp) {
  PITSTOP_AUTHORIZE(ListStandby);
  for (v1::StandbyNode& n : core_->Standby()) *resp->add_nodes() = std::move(n);
  return Done(ctx, absl::OkStatus());
}

}  // namespace pitstop::controller
