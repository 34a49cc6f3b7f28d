// gRPC adapter of TrainerHub: pitstop.v1.TrainerService (callback API),
// registered on the agent's ingest server next to Telemetry.
//
// Thread-safe (gRPC calls it from its threads).
#ifndef PITSTOP_AGENT_TRAINER_SERVICE_H_
#define PITSTOP_AGENT_TRAINER_SERVICE_H_

#include "pitstop/v1/trainer.grpc.pb.h"
#include "src/agent/agent_core.h"
#include "src/agent/peer_cred.h"
#include "src/agent/trainer_hub.h"

namespace pitstop::agent {

class TrainerServiceImpl final : public v1::TrainerService::CallbackService {
 public:
  // With `core` and `creds` (the ingest server's SO_PEERCRED record, not
  // owned), a caller may report only for the job and global rank its
  // process may (AgentCore::CheckTrainer, R18-8): other reports are
  // refused with PERMISSION_DENIED and counted. A caller whose connection
  // the registry does not know (ingest.verify_pid off) is believed.
  explicit TrainerServiceImpl(TrainerHub* hub, AgentCore* core = nullptr,
                              const PeerCredRegistry* creds = nullptr)
      : hub_(hub), core_(core), creds_(creds) {}

  grpc::ServerUnaryReactor* ReportSteps(
      grpc::CallbackServerContext* ctx, const v1::ReportStepsRequest* request,
      v1::ReportStepsResponse* response) override;

 private:
  TrainerHub* const hub_;
  AgentCore* const core_;
  const PeerCredRegistry* const creds_;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_TRAINER_SERVICE_H_
