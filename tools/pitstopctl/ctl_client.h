// gRPC call helpers of pitstopctl: one unary call with a deadline, errors
// printed once, status mapped to an exit code (exit_codes.h).
#ifndef PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_
#define PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "pitstop/grpc_util.h"
#include "pitstop/leader_hint.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/exit_codes.h"
#include "tools/pitstopctl/utf8_check.h"

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
std::shared_ptr<grpc::Channel> CliChannel(const GlobalOptions& g,
                                          const std::string& target);
// The same to the first address of --controller.
std::shared_ptr<grpc::Channel> CliChannel(const GlobalOptions& g);
// Adds "authorization: Bearer TOKEN" when --token / PITSTOP_TOKEN is set.
void AddAuth(const GlobalOptions& g, grpc::ClientContext* ctx);

// One call to `target`, no error printed.
template <typename Req, typename Resp, typename Method>
grpc::Status CallOne(const GlobalOptions& g, const std::string& target,
                     Method method, const Req& req, Resp* resp) {
  auto stub = v1::Controller::NewStub(CliChannel(g, target));
  grpc::ClientContext ctx;
  AddAuth(g, &ctx);
  ctx.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(g.timeout_s * 1000)));
  return ((*stub).*method)(&ctx, req, resp);
}

// Calls the controller; with several (--controller a,b: docs/ha.md) it
// follows a follower's "leader=" hint, else tries the next address. A
// request with text that is not UTF-8 is not sent (kExitUsage, naming the
// field).
template <typename Req, typename Resp, typename Method>
int Call(const GlobalOptions& g, Method method, const Req& req, Resp* resp) {
  if (const std::string bad = NonUtf8Field(req); !bad.empty()) {
    std::cerr << "pitstopctl: " << bad << " (arguments must be UTF-8)\n";
    return kExitUsage;
  }
  const std::vector<std::string> list = SplitControllerList(g.controller);
  grpc::Status s;
  if (list.size() <= 1) {
    s = CallOne(g, g.controller, method, req, resp);
  } else {
    std::string target = list[0];
    size_t next = 0;
    for (size_t attempt = 0; attempt < 2 * list.size() + 1; ++attempt) {
      s = CallOne(g, target, method, req, resp);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      const std::string hint = LeaderFromMessage(s.error_message());
      if (!hint.empty() && hint != target) {
        target = hint;
      } else {
        next = (next + 1) % list.size();
        target = list[next];
      }
    }
  }
  if (!s.ok()) PrintError(g, s);
  return ExitCodeFor(s);
}

// status with several controllers: each one's role (ha_status.cc).
int PrintHaStatus(const GlobalOptions& g);

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_CTL_CLIENT_H_
