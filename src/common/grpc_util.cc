#include "pitstop/grpc_util.h"

namespace pitstop {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

grpc::ChannelArguments StreamChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);    // ping every 10 s
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);  // dead after 5 s
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // unlimited
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // gRPC also uses the minimum backoff as the connect timeout of one attempt;
  // 100 ms was too short on a loaded machine (and under sanitizers), so a
  // connect may take up to 5 s while retries still start 100 ms apart.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5'000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5'000);
  return args;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   StreamChannelArguments());
}

void ApplyServerKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);    // 10 s
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);  // 5 s
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Accept client pings as often as every 5 s (clients ping every 10 s).
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

}  // namespace pitstop
