// Mutual TLS between pitstop processes (docs/reliability.md, "Trust"):
// credentials built from PEM files, and the identity a peer's certificate
// carries. Shared by the controller (server), the agent and pitstopctl
// (clients).
#ifndef PITSTOP_TLS_H_
#define PITSTOP_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace pitstop {

// PEM files: the CA that signs every certificate of the cluster, and this
// process's own certificate (chain) and private key.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;

  // True when any of the three is set.
  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// Checks that ca, cert and key are all set and each is a readable PEM file,
// read through ReadRegularFile (pitstop/bounded_file.h: regular files of at
// most kMaxFlagFileBytes); InvalidArgument naming `what` and the file
// otherwise ("tls.cert: /etc/pitstop/x.pem: cannot open: No such file or
// directory").
absl::Status ValidateTlsFiles(const TlsFiles& files, const std::string& what,
                              bool need_identity = true);

// Server credentials: presents cert/key, verifies client certificates
// against ca. A client without a certificate is let through the handshake
// (it may still carry a bearer token); the authorizer decides. The files are
// watched by gRPC and re-read every `refresh_s` seconds, so a renewed
// certificate is used without a restart.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(
    const TlsFiles& files, unsigned refresh_s = 10);

// Client credentials read from the files now (a new channel re-reads them).
// cert and key may be empty (server authentication only, e.g. with a bearer
// token). InvalidArgument naming the file when unreadable.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsClientCredentials(
    const TlsFiles& files);

// What a peer's verified certificate says about it.
struct PeerCertificate {
  bool present = false;  // a verified client certificate was presented
  std::string common_name;
  std::vector<std::string> dns_names;  // SAN DNS entries
  std::vector<std::string> uris;       // SAN URI entries
};
PeerCertificate PeerCertificateOf(const grpc::AuthContext& auth);

// True when `address` ("host:port", "[::1]:port", "unix:...") binds only
// this machine: loopback IPs, "localhost", or a Unix socket.
bool IsLoopbackAddress(const std::string& address);

}  // namespace pitstop

#endif  // PITSTOP_TLS_H_
