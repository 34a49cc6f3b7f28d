// gRPC call helpers of pitstopctl: one unary call with a deadline, errors
// printed once, status mapped to an exit code (exit_codes.h).
#ifndef PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_
#define PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "pitstop/grpc_util.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/exit_codes.h"

namespace pitstop::ctl {

int ExitCodeFor(const grpc::Status& s);
// Prints "pitstopctl: ADDR: message" to stderr.
void PrintError(const GlobalOptions& g, const grpc::Status& s);
// $USER, or "pitstopctl".
std::string DefaultWho();

// A channel for one-shot CLI calls. Not pitstop::CreateChannel: its
// 100 ms minimum reconnect backoff is also gRPC's connect timeout, too short
// for a loaded controller; here gRPC's defaults (20 s, bounded by the call
// deadline) apply. A refused connection still fails at once.
// With --ca (and --cert/--key) the channel uses TLS; an unreadable or bad
// file is reported and pitstopctl exits with kExitUsage.
std::shared_ptr<grpc::Channel> CliChannel(const GlobalOptions& g);
// Adds "authorization: Bearer TOKEN" when --token / PITSTOP_TOKEN is set.
void AddAuth(const GlobalOptions& g, grpc::ClientContext* ctx);

template <typename Req, typename Resp, typename Method>
int Call(const GlobalOptions& g, Method method, const Req& req, Resp* resp) {
  auto stub = v1::Controller::NewStub(CliChannel(g));
  grpc::ClientContext ctx;
  AddAuth(g, &ctx);
  ctx.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(g.timeout_s * 1000)));
  const grpc::Status s = ((*stub).*method)(&ctx, req, resp);
  if (!s.ok()) PrintError(g, s);
  return ExitCodeFor(s);
}

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_
