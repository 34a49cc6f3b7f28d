// Server TLS credentials whose certificate, key and CA are read again on
// demand (the controller calls Reload() on SIGHUP): the next TLS handshake
// after a successful Reload() uses the new files; connections already open
// keep theirs. A bad set of files (unreadable, not PEM, a key that does not
// belong to the certificate, a CA that does not parse) is refused with the
// reason and the current set stays in use.
//
// Built on gRPC's SSL server certificate-config fetcher (grpc_security.h),
// which gRPC calls at every new handshake; gRPC 1.51 offers no public way to
// push new certificates into its TLS credentials' distributor, and its file
// watcher only polls.
#ifndef PITSTOP_TLS_RELOADER_H_
#define PITSTOP_TLS_RELOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/server_credentials.h"
#include "pitstop/sync.h"
#include "pitstop/tls.h"

namespace pitstop {

// What a loaded certificate says, for logs and tests.
struct CertificateSummary {
  std::string subject;  // one line, e.g. "CN=controller"
  std::string serial;   // hex
  std::string not_after;
};

// The first certificate of PEM text; InvalidArgument when there is none.
absl::StatusOr<CertificateSummary> SummarizeCertificate(const std::string& pem);

// Reads and checks a certificate chain, its key and a CA bundle (PEM text):
// InvalidArgument naming the file and what is wrong.
absl::StatusOr<CertificateSummary> CheckServerPem(const TlsFiles& files,
                                                  const std::string& ca_pem,
                                                  const std::string& cert_pem,
                                                  const std::string& key_pem);

// Thread-safe: Reload() and current() from any thread; gRPC calls the
// fetcher from its own threads. Must outlive every server built with
// credentials().
class ReloadableServerTls {
 public:
  // Reads and checks the files (InvalidArgument naming the file otherwise).
  static absl::StatusOr<std::unique_ptr<ReloadableServerTls>> Create(
      const TlsFiles& files);
  ~ReloadableServerTls();
  ReloadableServerTls(const ReloadableServerTls&) = delete;
  ReloadableServerTls& operator=(const ReloadableServerTls&) = delete;

  // Credentials for a ServerBuilder: present the certificate, verify client
  // certificates against the CA when presented (API clients may come with
  // a bearer token instead; the authorizer decides).
  std::shared_ptr<grpc::ServerCredentials> credentials();

  // Reads the same paths again. OK: new handshakes use them from now on.
  // Otherwise the reason (naming the file), and the current set stays.
  absl::Status Reload();
  // The certificate handshakes present now (after the last good load).
  CertificateSummary current() const;
  // Good loads so far, the first included.
  uint64_t loads() const;

 private:
  struct Pem {
    std::string ca, cert, key;
  };
  // One per credentials() (one listener each): the load it was last given.
  struct Fetcher {
    ReloadableServerTls* tls;
    uint64_t served;  // guarded by tls->mu_
  };
  explicit ReloadableServerTls(TlsFiles files) : files_(std::move(files)) {}
  absl::StatusOr<Pem> Read(CertificateSummary* summary) const;
  static grpc_ssl_certificate_config_reload_status Fetch(
      void* self, grpc_ssl_server_certificate_config** config);

  const TlsFiles files_;
  mutable Mutex mu_;
  Pem pem_ ABSL_GUARDED_BY(mu_);
  CertificateSummary summary_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // good loads
  std::vector<std::unique_ptr<Fetcher>> fetchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop

#endif  // PITSTOP_TLS_RELOADER_H_
