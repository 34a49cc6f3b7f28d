#include "src/controller/controller_links.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

namespace pitstop::controller {
namespace {

// The batch's trainer reports' answers to profile requests; the first error
// names its report ("trainer_reports[i]: ...").
absl::Status ProfileAnswers(TrainerProfileService* profiles,
                            const std::string& host,
                            const v1::ConnectRequest& batch) {
  for (int i = 0; i < batch.trainer_reports_size(); ++i) {
    absl::Status s = profiles->OnReport(host, batch.trainer_reports(i));
    if (s.ok()) continue;
    // FAILED_PRECONDITION is reserved for a superseded session.
    const absl::StatusCode code = absl::IsFailedPrecondition(s)
                                      ? absl::StatusCode::kInvalidArgument
                                      : s.code();
    return absl::Status(
        code, absl::StrCat("trainer_reports[", i, "]: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Controller::Links::Joined(uint64_t session,
                                       const std::string& host,
                                       const v1::ConnectRequest& batch,
                                       absl::Status engine_status) {
  absl::Status first = c_->nodes_->AfterJoin(session, batch);
  auto keep = [&first](absl::Status s) {
    if (first.ok()) first = std::move(s);
  };
  keep(std::move(engine_status));
  keep(c_->trainers_->OnReports(host, batch));
  keep(ProfileAnswers(c_->profiles_.get(), host, batch));
  c_->planning_->ObserveBatch(host, batch);
  keep(c_->migration_->OnBatch(host, batch));
  return first;
}

bool Controller::Links::SendTrainerDirective(const std::string& host,
                                             const v1::TrainerDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_trainer_directive() = d;
  return c_->nodes_->SendIfConnected(host, std::move(cmd));
}

PathDirectiveSender::Sent Controller::Links::SendPathDirective(
    const std::string& host, const v1::PathDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_path() = d;
  const NodeService::Sent s = c_->nodes_->Send(host, std::move(cmd));
  return PathDirectiveSender::Sent{s.command_id, s.written, s.known};
}

std::vector<v1::Communicator> Controller::Links::Communicators() {
  return c_->ingest_->Communicators("");
}

v1::JobPolicy Controller::Links::JobPolicy(const std::string& job_id) {
  return c_->ingest_->JobPolicy(job_id);
}

std::vector<std::string> Controller::Links::JobHosts(
    const std::string& job_id) {
  return c_->ingest_->JobHosts(job_id);
}

void Controller::Links::SetJobHosts(const std::string& job_id,
                                    const std::vector<std::string>& hosts) {
  absl::StatusOr<std::vector<std::string>> named =
      c_->ingest_->SetJobHosts(job_id, hosts, "migration");
  if (!named.ok()) {
    Logger("controller")
        ->error("job {}: the migration's joiner not named with its hosts: {}",
                job_id.substr(0, 64), named.status().ToString());
  }
}

void Controller::Links::RetireComms(const std::vector<uint64_t>& comm_hashes,
                                    const std::string& why) {
  c_->ingest_->RetireComms(comm_hashes, why);
}

std::vector<NodeFacts> Controller::Links::ListFacts(bool standby_only) {
  return c_->nodes_->ListFacts(standby_only);
}

bool Controller::Links::SendMigration(const std::string& host,
                                      const v1::MigrationDirective& d) {
  v1::AgentCommand cmd;
  *cmd.mutable_migration() = d;
  return c_->nodes_->SendIfConnected(host, std::move(cmd));
}

void Controller::Links::DrainMigrated(const std::string& host,
                                      const std::string& why) {
  c_->nodes_->DrainMigrated(host, why);
}

absl::StatusOr<std::vector<v1::Fault>> Controller::Links::OpenFaults() {
  return c_->faults_->OpenFaults();
}

absl::StatusOr<v1::Fault> Controller::Links::Fault(const std::string& id) {
  return c_->faults_->Fault(id);
}

void Controller::Links::MarkMitigating(const v1::Fault& f,
                                       const std::string& why) {
  c_->faults_->MarkMitigating(f, why);
}

}  // namespace pitstop::controller
