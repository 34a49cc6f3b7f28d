// Server TLS reloaded on demand: files checked with OpenSSL, handed to gRPC
// through its SSL certificate-config fetcher.
#include "pitstop/tls_reloader.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "pitstop/bounded_file.h"

namespace pitstop {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

Bio MemBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

X509Ptr FirstCertificate(const std::string& pem) {
  Bio b = MemBio(pem);
  return X509Ptr(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
}

CertificateSummary Summarize(X509* x) {
  CertificateSummary s;
  Bio subject(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(subject.get(), X509_get_subject_name(x), 0,
                     XN_FLAG_RFC2253);
  s.subject = BioText(subject.get());
  std::unique_ptr<BIGNUM, BnFree> bn(
      ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), nullptr));
  if (bn != nullptr) {
    char* hex = BN_bn2hex(bn.get());
    s.serial = hex;
    OPENSSL_free(hex);
  }
  Bio when(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(when.get(), X509_get0_notAfter(x));
  s.not_after = BioText(when.get());
  return s;
}

// A C++ face for the C server credentials (gRPC 1.51 keeps its own wrapper
// private): the builder calls AddPortToServer once per listening address.
class FetcherServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit FetcherServerCredentials(grpc_server_credentials* creds)
      : creds_(creds) {}
  ~FetcherServerCredentials() override {
    grpc_server_credentials_release(creds_);
  }
  // pitstop authorizes inside its services (Authorizer), not here.
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* const creds_;
};

}  // namespace

absl::StatusOr<CertificateSummary> SummarizeCertificate(
    const std::string& pem) {
  X509Ptr cert = FirstCertificate(pem);
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError("no PEM certificate could be parsed");
  }
  return Summarize(cert.get());
}

absl::StatusOr<CertificateSummary> CheckServerPem(const TlsFiles& files,
                                                  const std::string& ca_pem,
                                                  const std::string& cert_pem,
                                                  const std::string& key_pem) {
  struct ClearErrors {
    ~ClearErrors() { ERR_clear_error(); }
  } clear;
  X509Ptr cert = FirstCertificate(cert_pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.cert: ", files.cert, ": no PEM certificate could be parsed"));
  }
  Bio kb = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.key: ", files.key, ": no PEM private key could be parsed"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.key: ", files.key, " does not belong to the ",
                     "certificate in ", files.cert));
  }
  const CertificateSummary summary = Summarize(cert.get());
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.cert: ", files.cert, " expired on ", summary.not_after));
  }
  if (FirstCertificate(ca_pem) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.ca: ", files.ca, ": no PEM certificate could be parsed"));
  }
  return summary;
}

absl::StatusOr<std::unique_ptr<ReloadableServerTls>>
ReloadableServerTls::Create(const TlsFiles& files) {
  if (absl::Status s = ValidateTlsFiles(files, "tls"); !s.ok()) return s;
  std::unique_ptr<ReloadableServerTls> tls(new ReloadableServerTls(files));
  if (absl::Status s = tls->Reload(); !s.ok()) return s;
  return tls;
}

ReloadableServerTls::~ReloadableServerTls() = default;

absl::StatusOr<ReloadableServerTls::Pem> ReloadableServerTls::Read(
    CertificateSummary* summary) const {
  Pem pem;
  const std::pair<const std::string*, std::string*> parts[] = {
      {&files_.ca, &pem.ca},
      {&files_.cert, &pem.cert},
      {&files_.key, &pem.key}};
  const char* names[] = {"tls.ca", "tls.cert", "tls.key"};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> text =
        ReadRegularFile(*parts[i].first, names[i]);
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    *parts[i].second = std::move(*text);
  }
  absl::StatusOr<CertificateSummary> s =
      CheckServerPem(files_, pem.ca, pem.cert, pem.key);
  if (!s.ok()) return s.status();
  *summary = *s;
  return pem;
}

absl::Status ReloadableServerTls::Reload() {
  CertificateSummary summary;
  absl::StatusOr<Pem> pem = Read(&summary);
  if (!pem.ok()) return pem.status();
  MutexLock lock(&mu_);
  pem_ = std::move(*pem);
  summary_ = std::move(summary);
  ++generation_;
  return absl::OkStatus();
}

CertificateSummary ReloadableServerTls::current() const {
  MutexLock lock(&mu_);
  return summary_;
}

uint64_t ReloadableServerTls::loads() const {
  MutexLock lock(&mu_);
  return generation_;
}

std::shared_ptr<grpc::ServerCredentials> ReloadableServerTls::credentials() {
  Fetcher* fetcher;
  {
    MutexLock lock(&mu_);
    fetchers_.push_back(std::make_unique<Fetcher>(Fetcher{this, 0}));
    fetcher = fetchers_.back().get();
  }
  grpc_ssl_server_credentials_options* options =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY, &Fetch, fetcher);
  return std::make_shared<FetcherServerCredentials>(
      grpc_ssl_server_credentials_create_with_options(options));
}

// gRPC calls this when a listener starts and before every handshake.
grpc_ssl_certificate_config_reload_status ReloadableServerTls::Fetch(
    void* user_data, grpc_ssl_server_certificate_config** config) {
  Fetcher* f = static_cast<Fetcher*>(user_data);
  ReloadableServerTls* self = f->tls;
  MutexLock lock(&self->mu_);
  if (f->served == self->generation_) {
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  }
  const grpc_ssl_pem_key_cert_pair pair = {self->pem_.key.c_str(),
                                           self->pem_.cert.c_str()};
  *config = grpc_ssl_server_certificate_config_create(self->pem_.ca.c_str(),
                                                      &pair, 1);
  if (*config == nullptr) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
  f->served = self->generation_;
  return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

}  // namespace pitstop
