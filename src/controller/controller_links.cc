// ControllerCore: the small interfaces the services are given over each
// other. Each call takes the one service's lock it needs (or the core's, for
// the detection engine) and no other.
#include "src/controller/controller_core.h"

namespace pitstop::controller {

bool ControllerCore::TrainerLink::SendTrainerDirective(
    const std::string& host, const v1::TrainerDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_trainer_directive() = d;
  return core_->nodes_->SendIfConnected(host, std::move(cmd));
}

PathDirectiveSender::Sent ControllerCore::PlanningLink::SendPathDirective(
    const std::string& host, const v1::PathDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_path() = d;
  const NodeService::Sent s = core_->nodes_->Send(host, std::move(cmd));
  return Sent{s.command_id, s.written, s.known};
}

std::vector<v1::Communicator> ControllerCore::MigrationLinks::Communicators() {
  CoreLock lock(core_);
  return core_->engine_->Communicators();
}

v1::JobPolicy ControllerCore::MigrationLinks::JobPolicy(
    const std::string& job_id) {
  CoreLock lock(core_);
  return core_->engine_->GetJobPolicy(job_id);
}

void ControllerCore::MigrationLinks::RetireComms(
    const std::vector<uint64_t>& comm_hashes, const std::string& why) {
  CoreLock lock(core_);
  core_->engine_->RetireComms(comm_hashes, why);
}

std::vector<NodeFacts> ControllerCore::MigrationLinks::ListFacts(
    bool standby_only) {
  return core_->nodes_->ListFacts(standby_only);
}

bool ControllerCore::MigrationLinks::SendMigration(
    const std::string& host, const v1::MigrationDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_migration() = d;
  return core_->nodes_->SendIfConnected(host, std::move(cmd));
}

void ControllerCore::MigrationLinks::DrainMigrated(const std::string& host,
                                                   const std::string& why) {
  core_->nodes_->DrainMigrated(host, why);
}

absl::StatusOr<std::vector<v1::Fault>>
ControllerCore::MigrationLinks::OpenFaults() {
  return core_->faults_->OpenFaults();
}

absl::StatusOr<v1::Fault> ControllerCore::MigrationLinks::Fault(
    const std::string& id) {
  return core_->faults_->Fault(id);
}

void ControllerCore::MigrationLinks::MarkMitigating(const v1::Fault& f,
                                                    const std::string& why) {
  core_->faults_->MarkMitigating(f, why);
}

}  // namespace pitstop::controller
