// TLS credentials from PEM files and the identity in a peer's certificate.
#include "pitstop/tls.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "pitstop/bounded_file.h"

namespace pitstop {

namespace {

absl::Status CheckPem(const std::string& key, const std::string& path,
                      const char* marker) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": required when TLS is configured"));
  }
  absl::StatusOr<std::string> text = ReadRegularFile(path, key);
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  if (!absl::StrContains(*text, marker)) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": ", path, " is not a PEM file (no '", marker, "')"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTlsFiles(const TlsFiles& files, const std::string& what,
                              bool need_identity) {
  if (absl::Status s = CheckPem(what + ".ca", files.ca, "BEGIN CERTIFICATE");
      !s.ok()) {
    return s;
  }
  if (!need_identity && files.cert.empty() && files.key.empty()) {
    return absl::OkStatus();
  }
  if (absl::Status s =
          CheckPem(what + ".cert", files.cert, "BEGIN CERTIFICATE");
      !s.ok()) {
    return s;
  }
  return CheckPem(what + ".key", files.key, "PRIVATE KEY");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(
    const TlsFiles& files, unsigned refresh_s) {
  if (absl::Status s = ValidateTlsFiles(files, "tls"); !s.ok()) return s;
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          files.key, files.cert, files.ca, refresh_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // Verified when presented; API clients with a bearer token may come
  // without one. The authorizer refuses calls without any credential.
  options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsClientCredentials(
    const TlsFiles& files) {
  if (absl::Status s = ValidateTlsFiles(files, "tls", /*need_identity=*/false);
      !s.ok()) {
    return s;
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadRegularFile(files.ca, "tls.ca");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = std::move(*ca);
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadRegularFile(files.cert, "tls.cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadRegularFile(files.key, "tls.key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = std::move(*cert);
    ssl.pem_private_key = std::move(*key);
  }
  return grpc::SslCredentials(ssl);
}

PeerCertificate PeerCertificateOf(const grpc::AuthContext& auth) {
  PeerCertificate p;
  if (!auth.IsPeerAuthenticated()) return p;
  for (const grpc::string_ref& v :
       auth.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    p.common_name.assign(v.data(), v.size());
    p.present = true;
  }
  for (const grpc::string_ref& v :
       auth.FindPropertyValues(GRPC_PEER_DNS_PROPERTY_NAME)) {
    p.dns_names.emplace_back(v.data(), v.size());
    p.present = true;
  }
  for (const grpc::string_ref& v :
       auth.FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    p.uris.emplace_back(v.data(), v.size());
    p.present = true;
  }
  return p;
}

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  std::string host = address;
  if (absl::StartsWith(host, "ipv4:")) host = host.substr(5);
  if (absl::StartsWith(host, "ipv6:")) host = host.substr(5);
  if (!host.empty() && host[0] == '[') {
    const size_t end = host.find(']');
    if (end == std::string::npos) return false;
    host = host.substr(1, end - 1);
  } else {
    const size_t colon = host.rfind(':');
    if (colon != std::string::npos) host = host.substr(0, colon);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

}  // namespace pitstop
