// Controller's links: the small interfaces each service is given over the
// others (controller_links.cc). Each call takes only the lock of the one
// service it reaches; none is made with another service's lock held.
#ifndef PITSTOP_CONTROLLER_CONTROLLER_LINKS_H_
#define PITSTOP_CONTROLLER_CONTROLLER_LINKS_H_

#include <string>
#include <vector>

#include "src/controller/controller.h"

namespace pitstop::controller {

class Controller::Links final : public AfterJoin,
                                public DirectiveSender,
                                public PathDirectiveSender,
                                public MigrationService::Detection,
                                public MigrationService::Nodes,
                                public MigrationService::Faults {
 public:
  explicit Links(Controller* c) : c_(c) {}

  // AfterJoin (IngestService): a joined batch's parts for the other
  // services, in the order a reader meets them: counters, records and
  // command acks (nodes), the detection records' status, trainer reports,
  // flows (planning), migration acks and rank deaths.
  absl::Status Joined(uint64_t session, const std::string& host,
                      const v1::ConnectRequest& batch,
                      absl::Status engine_status) override;
  // DirectiveSender (TrainerPolicyService) -> NodeService.
  bool SendTrainerDirective(const std::string& host,
                            const v1::TrainerDirective& d) override;
  // PathDirectiveSender (PlanningService) -> NodeService.
  PathDirectiveSender::Sent SendPathDirective(
      const std::string& host, const v1::PathDirective& d) override;
  // MigrationService::Detection -> IngestService.
  std::vector<v1::Communicator> Communicators() override;
  v1::JobPolicy JobPolicy(const std::string& job_id) override;
  std::vector<std::string> JobHosts(const std::string& job_id) override;
  void SetJobHosts(const std::string& job_id,
                   const std::vector<std::string>& hosts) override;
  void RetireComms(const std::vector<uint64_t>& comm_hashes,
                   const std::string& why) override;
  // MigrationService::Nodes -> NodeService.
  std::vector<NodeFacts> ListFacts(bool standby_only) override;
  bool SendMigration(const std::string& host,
                     const v1::MigrationDirective& d) override;
  void DrainMigrated(const std::string& host, const std::string& why) override;
  // MigrationService::Faults -> FaultService.
  absl::StatusOr<std::vector<v1::Fault>> OpenFaults() override;
  absl::StatusOr<v1::Fault> Fault(const std::string& id) override;
  void MarkMitigating(const v1::Fault& f, const std::string& why) override;

 private:
  Controller* const c_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_LINKS_H_
