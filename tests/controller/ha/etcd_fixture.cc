#include "tests/controller/ha/etcd_fixture.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "src/controller/ha/etcd_client.h"
#include "tests/controller/subprocess.h"

namespace pitstop::controller::testing {
namespace {

// A port the kernel just handed out and released (etcd cannot bind port 0
// and report it back).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

std::string FindEtcd() {
  if (const char* e = std::getenv("PITSTOP_ETCD"); e != nullptr && *e) {
    return e;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/etcd");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool EtcdProcess::Start(const std::string& binary, std::string* error,
                        const EtcdTls* tls) {
  char tmpl[] = "/tmp/pitstop-etcd-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "mkdtemp failed";
    return false;
  }
  dir_ = tmpl;
  const int client = FreePort();
  const int peer = FreePort();
  endpoint_ = absl::StrCat("127.0.0.1:", client);
  const std::string curl =
      absl::StrCat(tls != nullptr ? "https://" : "http://", endpoint_);
  const std::string purl = absl::StrCat("http://127.0.0.1:", peer);
  const std::string log = dir_ + "/etcd.log";
  std::vector<std::string> argv = {binary,
                                   "--name",
                                   "t",
                                   "--data-dir",
                                   dir_ + "/data",
                                   "--listen-client-urls",
                                   curl,
                                   "--advertise-client-urls",
                                   curl,
                                   "--listen-peer-urls",
                                   purl,
                                   "--initial-advertise-peer-urls",
                                   purl,
                                   "--initial-cluster",
                                   absl::StrCat("t=", purl)};
  ha::EtcdClient::Options probe{.endpoints = endpoint_,
                                .timeout = absl::Seconds(1)};
  if (tls != nullptr) {
    for (const std::string& a :
         {std::string("--cert-file"), tls->cert, std::string("--key-file"),
          tls->key, std::string("--trusted-ca-file"), tls->ca,
          std::string("--client-cert-auth")}) {
      argv.push_back(a);
    }
    probe.ca = tls->ca;
    probe.cert = tls->client_cert;
    probe.key = tls->client_key;
  }
  pid_ = Spawn(argv, log);
  if (pid_ < 0) {
    *error = absl::StrCat("cannot start ", binary);
    return false;
  }
  auto client_or = ha::EtcdClient::Create(probe);
  if (!client_or.ok()) {
    *error = std::string(client_or.status().message());
    return false;
  }
  absl::Status last;
  for (int i = 0; i < 300; ++i) {
    last = (*client_or)->Get("/probe").status();
    if (last.ok()) return true;
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string out = ReadFile(log);
  *error = absl::StrCat(
      "etcd at ", endpoint_, " did not answer (", last.ToString(),
      "); log tail: ", out.substr(out.size() > 2000 ? out.size() - 2000 : 0));
  return false;
}

}  // namespace pitstop::controller::testing
