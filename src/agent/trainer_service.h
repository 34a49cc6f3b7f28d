// gRPC adapter of TrainerHub: pitstop.v1.TrainerService (callback API),
// registered on the agent's ingest server next to Telemetry.
//
// Thread-safe (gRPC calls it from its threads).
#ifndef PITSTOP_AGENT_TRAINER_SERVICE_H_
#define PITSTOP_AGENT_TRAINER_SERVICE_H_

#include "pitstop/v1/trainer.grpc.pb.h"
#include "src/agent/trainer_hub.h"

namespace pitstop::agent {

class TrainerServiceImpl final : public v1::TrainerService::CallbackService {
 public:
  explicit TrainerServiceImpl(TrainerHub* hub) : hub_(hub) {}

  grpc::ServerUnaryReactor* ReportSteps(
      grpc::CallbackServerContext* ctx, const v1::ReportStepsRequest* request,
      v1::ReportStepsResponse* response) override;

 private:
  TrainerHub* const hub_;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_TRAINER_SERVICE_H_
