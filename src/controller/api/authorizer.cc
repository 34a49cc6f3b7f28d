// Authorizer: the role table, bearer tokens and certificate identities.
#include "src/controller/api/authorizer.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pitstop/bounded_file.h"
#include "pitstop/logging.h"
#include "pitstop/tls.h"

namespace pitstop::controller {

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kOperator:
      return "operator";
    case Role::kScheduler:
      return "scheduler";
    case Role::kAgent:
      return "agent";
    case Role::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role r :
       {Role::kViewer, Role::kOperator, Role::kScheduler, Role::kAgent}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", name,
                   "' (expected viewer, operator, scheduler or agent)"));
}

bool RoleSatisfies(Role held, Role needed) {
  if (needed == Role::kNone) return false;  // unknown methods: nobody
  if (needed == Role::kAgent || held == Role::kAgent) return held == needed;
  return static_cast<int>(held) >= static_cast<int>(needed);
}

const std::map<std::string, Role>& MethodRoles() {
  static const auto* const kTable = new std::map<std::string, Role>{
      // Reads and watches.
      {"/pitstop.v1.Controller/GetStatus", Role::kViewer},
      {"/pitstop.v1.Controller/ListNodes", Role::kViewer},
      {"/pitstop.v1.Controller/GetNode", Role::kViewer},
      {"/pitstop.v1.Controller/ListJobs", Role::kViewer},
      {"/pitstop.v1.Controller/GetJob", Role::kViewer},
      {"/pitstop.v1.Controller/ListCommunicators", Role::kViewer},
      {"/pitstop.v1.Controller/GetCommunicator", Role::kViewer},
      {"/pitstop.v1.Controller/ListFaults", Role::kViewer},
      {"/pitstop.v1.Controller/GetFault", Role::kViewer},
      {"/pitstop.v1.Controller/WatchFaults", Role::kViewer},
      {"/pitstop.v1.Controller/GetJobPolicy", Role::kViewer},
      {"/pitstop.v1.Controller/GetJobSync", Role::kViewer},
      // Changes: acknowledge, resolve, drain, policies.
      {"/pitstop.v1.Controller/AcknowledgeFault", Role::kOperator},
      {"/pitstop.v1.Controller/ResolveFault", Role::kOperator},
      {"/pitstop.v1.Controller/DrainNode", Role::kOperator},
      {"/pitstop.v1.Controller/UncordonNode", Role::kOperator},
      {"/pitstop.v1.Controller/SetJobPolicy", Role::kOperator},
      {"/pitstop.v1.Controller/SetSyncPolicy", Role::kOperator},
      {"/pitstop.v1.Controller/GetJobLora", Role::kViewer},
      {"/pitstop.v1.Controller/SetLoraPolicy", Role::kOperator},
      // Standby migration: operators and schedulers move nodes.
      {"/pitstop.v1.Controller/MigrateNode", Role::kOperator},
      {"/pitstop.v1.Controller/GetMigration", Role::kViewer},
      {"/pitstop.v1.Controller/ListMigrations", Role::kViewer},
      {"/pitstop.v1.Controller/WatchMigrations", Role::kViewer},
      {"/pitstop.v1.Controller/ListStandby", Role::kViewer},
      {"/pitstop.v1.Controller/GetFlowPlan", Role::kViewer},
      {"/pitstop.v1.Controller/ListLinks", Role::kViewer},
      {"/pitstop.v1.Controller/SetLinkHealth", Role::kOperator},
      // The scheduler names a job's hosts (docs/reliability.md, "Trust
      // model"): an operator may not widen a job to another host.
      {"/pitstop.v1.Controller/SetJobHosts", Role::kScheduler},
      // Agents only, for the host their certificate names.
      {"/pitstop.v1.AgentLink/Connect", Role::kAgent},
  };
  return *kTable;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokens(const std::string& text,
                                                    const std::string& path) {
  std::vector<TokenEntry> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": ", why));
    };
    if (f.size() != 3) {
      return bad(absl::StrCat("expected 'TOKEN ROLE NAME', got ", f.size(),
                              " fields"));
    }
    if (f[0].size() < 16) return bad("token shorter than 16 characters");
    absl::StatusOr<Role> role = ParseRole(f[1]);
    if (!role.ok()) return bad(role.status().message());
    for (const TokenEntry& e : out) {
      if (e.secret == f[0]) return bad("token listed twice");
    }
    out.push_back(TokenEntry{std::string(f[0]), *role, std::string(f[2])});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(
    Options options) {
  std::unique_ptr<Authorizer> a(new Authorizer(std::move(options)));
  if (absl::Status s = a->Reload(); !s.ok()) return s;
  return a;
}

absl::Status Authorizer::Reload() {
  if (options_.tokens_file.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadRegularFile(
      options_.tokens_file, "auth.tokens_file (--auth-tokens-file)");
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  absl::StatusOr<std::vector<TokenEntry>> tokens =
      ParseTokens(*text, options_.tokens_file);
  if (!tokens.ok()) return tokens.status();
  MutexLock lock(&mu_);
  tokens_ = std::move(*tokens);
  return absl::OkStatus();
}

size_t Authorizer::tokens() const {
  MutexLock lock(&mu_);
  return tokens_.size();
}

absl::Status Authorizer::Deny(const grpc::ServerContextBase& ctx,
                              std::string reason) {
  const uint64_t n = ++denied_;
  // Every refusal up to 100, then every 1000th: one misconfigured client
  // must not flood the log.
  if (n <= 100 || n % 1000 == 0) {
    Logger("controller.auth")
        ->warn("refused {}: {} ({} refusals so far)", ctx.peer(), reason, n);
  }
  return absl::PermissionDeniedError(reason);
}

absl::StatusOr<Caller> Authorizer::FromToken(const grpc::ServerContextBase& ctx,
                                             bool* sent) {
  *sent = false;
  auto range = ctx.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ")) continue;
    *sent = true;
    MutexLock lock(&mu_);
    const TokenEntry* match = nullptr;
    for (const TokenEntry& e : tokens_) {
      // Compares every byte of equal-length tokens: the time taken does
      // not tell how much of a guess was right.
      if (e.secret.size() != value.size()) continue;
      unsigned char diff = 0;
      for (size_t i = 0; i < value.size(); ++i) diff |= e.secret[i] ^ value[i];
      if (diff == 0) match = &e;
    }
    if (match == nullptr) break;
    Caller c;
    c.role = match->role;
    c.name = match->name;
    if (c.role == Role::kAgent) c.hosts.push_back(match->name);
    c.via = "token";
    return c;
  }
  return absl::PermissionDeniedError("unknown bearer token");
}

absl::StatusOr<Caller> Authorizer::Check(const grpc::ServerContextBase& ctx,
                                         absl::string_view method) {
  auto it = MethodRoles().find(std::string(method));
  if (it == MethodRoles().end()) {
    // Fail closed: a method without a table entry is nobody's.
    return Deny(ctx, absl::StrCat(method, " is not in the role table"));
  }
  const Role needed = it->second;
  if (!options_.enforce) {
    Caller open;
    open.role = needed;
    open.name = "anonymous";
    open.via = "none (no TLS, no tokens)";
    return open;
  }
  bool sent = false;
  absl::StatusOr<Caller> caller = FromToken(ctx, &sent);
  if (sent && !caller.ok()) {
    return Deny(ctx, absl::StrCat(method, ": unknown bearer token"));
  }
  if (!sent) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    const PeerCertificate cert =
        auth ? PeerCertificateOf(*auth) : PeerCertificate();
    if (!cert.present) {
      return Deny(ctx, absl::StrCat(method,
                                    ": no credentials (present a client "
                                    "certificate or a bearer token)"));
    }
    Caller c;
    c.name = cert.common_name;
    c.via = "certificate";
    for (const std::string& uri : cert.uris) {
      absl::string_view v = uri;
      if (!absl::ConsumePrefix(&v, kRoleUriPrefix)) continue;
      absl::StatusOr<Role> r = ParseRole(v);
      if (r.ok() && static_cast<int>(*r) > static_cast<int>(c.role)) {
        c.role = *r;
      }
    }
    if (c.role == Role::kNone) {
      return Deny(ctx, absl::StrCat(method, ": certificate CN=", c.name,
                                    " names no role (SAN URI ", kRoleUriPrefix,
                                    "<role>)"));
    }
    if (!cert.common_name.empty()) c.hosts.push_back(cert.common_name);
    for (const std::string& d : cert.dns_names) {
      if (d != cert.common_name) c.hosts.push_back(d);
    }
    caller = std::move(c);
  }
  if (!RoleSatisfies(caller->role, needed)) {
    return Deny(ctx, absl::StrCat(method, " needs role ", RoleName(needed),
                                  "; ", caller->name, " (", caller->via,
                                  ") has role ", RoleName(caller->role)));
  }
  return caller;
}

absl::Status Authorizer::CheckAgentHost(const grpc::ServerContextBase& ctx,
                                        const Caller& caller,
                                        const std::string& host) {
  if (!options_.enforce) return absl::OkStatus();
  if (std::find(caller.hosts.begin(), caller.hosts.end(), host) !=
      caller.hosts.end()) {
    return absl::OkStatus();
  }
  return Deny(ctx, absl::StrCat("registration.host '", host, "': ", caller.name,
                                " (", caller.via, ") may only speak for ",
                                absl::StrJoin(caller.hosts, ", ")));
}

}  // namespace pitstop::controller
