// TLS to etcd (issue #15): the controller's etcd client with a CA, a
// client certificate and key against a real etcd on loopback that requires
// client certificates. Skips loudly without the etcd binary.
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/controller/controller.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/ha_controller.h"
#include "tests/controller/ha/etcd_fixture.h"
#include "tests/controller/ha/ha_fixture.h"

namespace pitstop::controller::ha {
namespace {

using ::testing::HasSubstr;

// TLS to etcd: an etcd on loopback that requires client certificates
// (--client-cert-auth), certificates from tools/gen-dev-certs.sh. With the
// CA, a certificate and its key the controller elects itself and writes;
// without its certificate, or in plaintext, etcd cannot be reached; bad
// TLS settings are refused at start naming the key.
TEST(EtcdTlsTest, ControllerReachesEtcdWithClientCertificatesOnly) {
  const std::string bin = testing::FindEtcd();
  if (bin.empty()) {
    GTEST_SKIP() << "SKIPPED: etcd binary not found (install etcd-server "
                    "via tools/install-deps.sh, or set PITSTOP_ETCD)";
  }
  char tmpl[] = "/tmp/pitstop-etcd-pki-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string pki = tmpl;
  const std::string gen =
      absl::StrCat(PITSTOP_GEN_CERTS, " ", pki, " --hosts n1 >/dev/null");
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  testing::EtcdTls tls{pki + "/ca.pem", pki + "/controller.pem",
                       pki + "/controller.key", pki + "/controller.pem",
                       pki + "/controller.key"};
  testing::EtcdProcess etcd;
  std::string error;
  ASSERT_TRUE(etcd.Start(bin, &error, &tls)) << error;

  // Without a client certificate, and in plaintext: no answer.
  EtcdClient::Options no_cert{.endpoints = etcd.endpoint(),
                              .timeout = absl::Seconds(1)};
  no_cert.ca = tls.ca;
  auto c = EtcdClient::Create(no_cert);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->Get("/x").ok());
  c = EtcdClient::Create(
      {.endpoints = etcd.endpoint(), .timeout = absl::Seconds(1)});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->Get("/x").ok());

  // A controller with its certificate: elected, its fenced writes land.
  HaOptions ho;
  ho.etcd_endpoints = etcd.endpoint();
  ho.etcd_prefix = "/tls/";
  ho.etcd_ca = tls.ca;
  ho.etcd_cert = pki + "/controller.pem";
  ho.etcd_key = pki + "/controller.key";
  auto ha = HaController::Create(ho, "127.0.0.1:7003");
  ASSERT_TRUE(ha.ok()) << ha.status();
  Controller::Options o;
  HaController* h = ha->get();
  o.open_store = [h] { return h->OpenStore(); };
  o.leadership = h;
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  (*ha)->Start(core->get());
  ASSERT_TRUE(WaitFor(
      [&] { return (*core)->Status().role() == v1::CONTROLLER_ROLE_LEADER; }));
  v1::JobPolicy p;
  p.set_window_ms(2500);
  ASSERT_TRUE((*core)->ingest().SetPolicy("job1", p).ok());
  EXPECT_EQ((*h->OpenStore())->Policies()["job1"].window_ms(), 2500u);
  (*ha)->Stop();

  // Bad TLS settings: refused at start, naming the key.
  HaOptions bad = ho;
  bad.etcd_ca = pki + "/missing.pem";
  absl::Status s = HaController::Create(bad, "127.0.0.1:7004").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ha.etcd_ca"));
  bad = ho;
  bad.etcd_key.clear();
  s = HaController::Create(bad, "127.0.0.1:7004").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ha.etcd_key"));
  bad = ho;
  bad.etcd_cert = pki + "/tokens";  // not PEM
  s = HaController::Create(bad, "127.0.0.1:7004").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not PEM"));
  // Without the client certificate etcd refuses the handshake: the
  // controller does not start (its start-up probe fails).
  bad = ho;
  bad.etcd_cert.clear();
  bad.etcd_key.clear();
  s = HaController::Create(bad, "127.0.0.1:7004").status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  std::filesystem::remove_all(pki);
}

}  // namespace
}  // namespace pitstop::controller::ha
