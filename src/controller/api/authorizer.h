// Who may call what on the controller's port (docs/reliability.md, "Trust").
//
// Every RPC of every service the controller serves has one entry in
// MethodRoles(), the only table of required roles; the service adapters ask
// Authorizer::Check() with their method's full name before doing anything.
// A caller's role comes from its client certificate (a SAN URI
// pitstop://role/<role>; an agent's certificate also names its host in CN or
// a SAN DNS entry) or from a bearer token listed in the tokens file.
#ifndef PITSTOP_CONTROLLER_API_AUTHORIZER_H_
#define PITSTOP_CONTROLLER_API_AUTHORIZER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"

namespace pitstop::controller {

// viewer < operator < scheduler; agent is apart (it only streams).
enum class Role { kNone = 0, kViewer, kOperator, kScheduler, kAgent };

absl::string_view RoleName(Role role);
// "viewer", "operator", "scheduler", "agent"; InvalidArgument otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view name);
// True when a caller holding `held` may call a method requiring `needed`.
bool RoleSatisfies(Role held, Role needed);

// Full gRPC method name ("/pitstop.v1.Controller/AcknowledgeFault") ->
// required role. Every method served on the controller port is listed;
// tests/controller/auth_test.cc fails for a method missing here.
const std::map<std::string, Role>& MethodRoles();

// The URI SAN naming a role in a certificate: pitstop://role/<role>.
inline constexpr absl::string_view kRoleUriPrefix = "pitstop://role/";

// One line of the tokens file.
struct TokenEntry {
  std::string secret;
  Role role = Role::kNone;
  std::string name;
};
// Parses a tokens file's text; InvalidArgument "PATH:LINE: ..." on error.
// Tokens shorter than 16 characters are refused (guessable).
absl::StatusOr<std::vector<TokenEntry>> ParseTokens(const std::string& text,
                                                    const std::string& path);

// An authenticated caller.
struct Caller {
  Role role = Role::kNone;
  std::string name;                // CN or the token's name
  std::vector<std::string> hosts;  // hosts an agent may speak for
  std::string via;                 // "certificate" or "token"
};

// Thread-safe: Check() from gRPC threads, Reload() from main (SIGHUP).
class Authorizer {
 public:
  struct Options {
    // false: every call is allowed (no TLS and no tokens: the controller
    // then listens on loopback only unless --insecure).
    bool enforce = true;
    // "TOKEN ROLE NAME" per line, '#' comments; empty = no tokens.
    std::string tokens_file;
  };
  // InvalidArgument naming file:line for a bad tokens file.
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(Options options);

  // Re-reads the tokens file; on error the previous tokens stay.
  absl::Status Reload();

  // OK with the caller, or PermissionDenied with the reason (logged with
  // the peer). `method` must be a key of MethodRoles().
  absl::StatusOr<Caller> Check(const grpc::ServerContextBase& ctx,
                               absl::string_view method);
  // An agent stream registering `host`: PermissionDenied (logged with the
  // peer) unless the caller's certificate (or token) names that host.
  absl::Status CheckAgentHost(const grpc::ServerContextBase& ctx,
                              const Caller& caller, const std::string& host);

  bool enforcing() const { return options_.enforce; }
  uint64_t denied() const { return denied_.load(); }
  size_t tokens() const;

 private:
  explicit Authorizer(Options options) : options_(std::move(options)) {}
  absl::Status Deny(const grpc::ServerContextBase& ctx, std::string reason);
  // The caller from a bearer token (*sent = false: none was sent).
  absl::StatusOr<Caller> FromToken(const grpc::ServerContextBase& ctx,
                                   bool* sent);

  const Options options_;
  mutable Mutex mu_;
  std::vector<TokenEntry> tokens_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> denied_{0};
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_AUTHORIZER_H_
