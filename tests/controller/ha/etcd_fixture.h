// A real single-member etcd for tests: temp data dir, free loopback ports,
// killed and removed at the end. Tests skip loudly (GTEST_SKIP) when the
// etcd binary is absent (Debian: etcd-server; tools/install-deps.sh).
#ifndef PITSTOP_TESTS_CONTROLLER_HA_ETCD_FIXTURE_H_
#define PITSTOP_TESTS_CONTROLLER_HA_ETCD_FIXTURE_H_

#include <sys/types.h>

#include <string>

namespace pitstop::controller::testing {

// $PITSTOP_ETCD, else etcd on PATH; "" when not found.
std::string FindEtcd();

// TLS on etcd's client port (PEM files): its certificate and key, and the
// CA client certificates must be signed by (etcd --client-cert-auth). The
// fixture's own probe connects with `client_cert` / `client_key`.
struct EtcdTls {
  std::string ca;
  std::string cert;
  std::string key;
  std::string client_cert;
  std::string client_key;
};

class EtcdProcess {
 public:
  EtcdProcess() = default;
  ~EtcdProcess();  // kill -9, wait, remove the data dir
  // Starts etcd (with `tls`: https and client certificates required) and
  // waits (up to 30 s) until it answers; false with *error (including the
  // tail of its log) otherwise.
  bool Start(const std::string& binary, std::string* error,
             const EtcdTls* tls = nullptr);
  const std::string& endpoint() const { return endpoint_; }  // host:port

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
};

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_HA_ETCD_FIXTURE_H_
