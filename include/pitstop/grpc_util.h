// Shared gRPC plumbing: status conversion and channel/server settings with
// keepalive, so every process talks with the same timeouts.
#ifndef PITSTOP_GRPC_UTIL_H_
#define PITSTOP_GRPC_UTIL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace pitstop {

// absl and gRPC share canonical codes; messages are kept.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Channel arguments for long-lived streams: keepalive ping every 10 s, dead
// after 5 s without an answer, pings allowed without calls in flight,
// reconnect backoff 100 ms .. 5 s, and up to 5 s for one connect attempt.
grpc::ChannelArguments StreamChannelArguments();

// Creates an insecure channel to `target` ("unix:/path", "host:port") with
// StreamChannelArguments().
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target);

// Applies matching server-side keepalive settings to `builder`.
void ApplyServerKeepalive(grpc::ServerBuilder* builder);

}  // namespace pitstop

#endif  // PITSTOP_GRPC_UTIL_H_
