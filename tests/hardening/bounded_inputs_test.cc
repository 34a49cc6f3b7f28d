// Issue #33, inputs: the real binaries given files, flags and addresses as
// an attacker or a typo would. Each case used to hang, eat the machine's
// memory, bind somewhere else or retry forever; each must now end at once
// with exit 2 (or 1) and a message naming the flag, or be counted.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_util.h"

namespace pitstop {
namespace {

using agent::testing::BinaryPath;
using agent::testing::Eventually;
using agent::testing::Process;
using agent::testing::ReadFile;
using agent::testing::TempDir;
using ::testing::HasSubstr;

// Time a refused start may take; the old behaviour (blocking on a FIFO,
// reading /dev/zero) never ends, so a timeout is the failure.
constexpr absl::Duration kPrompt = absl::Seconds(20);

struct Outcome {
  int exit_code = -1;  // -1: did not exit within kPrompt (killed)
  std::string output;
};

Outcome RunBinary(const TempDir& dir, const std::string& name,
                  std::vector<std::string> argv) {
  const std::string out = dir.file(name + ".out");
  const std::string err = dir.file(name + ".err");
  Process p(argv, {}, out, err);
  const int status = p.Wait(kPrompt);
  Outcome r;
  r.output = ReadFile(out) + ReadFile(err);
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

std::string Controller() {
  return BinaryPath("src/controller/pitstop-controller");
}
std::string Agent() { return BinaryPath("src/agent/pitstop-agent"); }

std::vector<std::string> ControllerArgs(const TempDir& dir) {
  return {
      Controller(),        "--listen", "127.0.0.1:0", "--db", dir.file("c.db"),
      "--metrics-address", ""};
}
std::vector<std::string> AgentArgs(const TempDir& dir) {
  return {Agent(),
          "--ingest-socket",
          dir.file("a.sock"),
          "--controller",
          "",
          "--metrics-address",
          ""};
}

std::string Fifo(const TempDir& dir) {
  const std::string path = dir.file("fifo");
  ::unlink(path.c_str());
  EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
  return path;
}

std::vector<std::string> With(std::vector<std::string> argv,
                              const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// --auth-tokens-file, --tls-ca (both daemons) and pitstopctl --ca pointed
// at /dev/zero or a FIFO read until the kernel killed the process.
TEST(BoundedInputsTest, FileFlagsRefuseDevicesAndFifos) {
  TempDir dir;
  std::ofstream(dir.file("pem")) << "-----BEGIN CERTIFICATE-----\n";
  for (const std::string& special : {std::string("/dev/zero"), Fifo(dir)}) {
    const std::string kind =
        special == "/dev/zero" ? "a character device" : "a FIFO";
    Outcome r =
        RunBinary(dir, "tokens",
                  With(ControllerArgs(dir), {"--auth-tokens-file", special}));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--auth-tokens-file"));
    EXPECT_THAT(r.output,
                HasSubstr(special + ": not a regular file (" + kind + ")"));

    r = RunBinary(dir, "ctl-ca",
                  With(ControllerArgs(dir),
                       {"--tls-ca", special, "--tls-cert", dir.file("pem"),
                        "--tls-key", dir.file("pem")}));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("(--tls-ca): " + special + ": not a regular file"));

    r = RunBinary(
        dir, "agent-ca",
        With(AgentArgs(dir), {"--tls-ca", special, "--tls-cert",
                              dir.file("pem"), "--tls-key", dir.file("pem")}));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("(--tls-ca): " + special + ": not a regular file"));

    r = RunBinary(dir, "pitstopctl",
                  {BinaryPath("tools/pitstopctl/pitstopctl"), "--controller",
                   "127.0.0.1:1", "--ca", special, "status"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("--ca: " + special + ": not a regular file"));
  }
}

// --db naming a FIFO or a device exited 1 with SQLite's I/O error, which
// named no flag.
TEST(BoundedInputsTest, DbRefusesSpecialFiles) {
  TempDir dir;
  for (const std::string& special :
       {std::string("/dev/zero"), Fifo(dir), dir.path()}) {
    const Outcome r = RunBinary(dir, "db",
                                {Controller(), "--listen", "127.0.0.1:0",
                                 "--db", special, "--metrics-address", ""});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("key 'db' (--db): " + special +
                                    ": not a regular file"));
  }
}

// gRPC bound port 99999 as 34463; civetweb listened on 231.1.1.1 for
// 999.1.1.1.
TEST(BoundedInputsTest, AddressesAreRangeChecked) {
  TempDir dir;
  Outcome r = RunBinary(dir, "listen",
                        {Controller(), "--listen", "127.0.0.1:99999", "--db",
                         dir.file("c.db"), "--metrics-address", ""});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(--listen): '127.0.0.1:99999'"));
  EXPECT_THAT(r.output, HasSubstr("0..65535"));
  r = RunBinary(dir, "metrics",
                {Controller(), "--listen", "127.0.0.1:0", "--db",
                 dir.file("c.db"), "--metrics-address", "999.1.1.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(--metrics-address): '999.1.1.1:0'"));
  r = RunBinary(dir, "agent-metrics",
                {Agent(), "--ingest-socket", dir.file("a.sock"), "--controller",
                 "", "--metrics-address", "999.1.1.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--metrics-address"));
  r = RunBinary(dir, "agent-controller",
                {Agent(), "--ingest-socket", dir.file("a.sock"), "--controller",
                 "127.0.0.1:99999", "--metrics-address", ""});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("'127.0.0.1:99999'"));
  r = RunBinary(dir, "ctl",
                {BinaryPath("tools/pitstopctl/pitstopctl"), "--controller",
                 "127.0.0.1:70000", "status"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--controller"));
}

// Numeric keys out of range exit 2 naming the key: an idle timeout of 0 shed
// a live rank after 1 s.
TEST(BoundedInputsTest, NumericKeysAreRangeChecked) {
  TempDir dir;
  Outcome r = RunBinary(
      dir, "idle", With(AgentArgs(dir), {"--ingest-shm-idle-timeout-s", "0"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--ingest-shm-idle-timeout-s"));
  EXPECT_THAT(r.output, HasSubstr("must be in [3, 86400]"));
  std::ofstream(dir.file("a.yaml")) << "ingest:\n  shm_idle_timeout_s: 0\n";
  r = RunBinary(dir, "idle-yaml",
                With(AgentArgs(dir), {"--config", dir.file("a.yaml")}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir.file("a.yaml") + ":2:"));
  EXPECT_THAT(r.output, HasSubstr("'ingest.shm_idle_timeout_s'"));
  r = RunBinary(dir, "cycle",
                With(ControllerArgs(dir), {"--detection-cycle-ms", "0"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--detection-cycle-ms"));
}

// Duplicate YAML keys were accepted silently (the later one won).
TEST(BoundedInputsTest, DuplicateYamlKeysAreRefused) {
  TempDir dir;
  const std::string cfg = dir.file("c.yaml");
  std::ofstream(cfg) << "detection:\n  mode: act\n  window_ms: 500\n"
                        "  mode: observe\n";
  Outcome r =
      RunBinary(dir, "dup", With(ControllerArgs(dir), {"--config", cfg}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(cfg + ":4:3: duplicate key 'detection.mode'"));
}

// Issue #33 F9: --log-file naming a FIFO blocked both daemons at start
// (open() waited for a reader, forever).
TEST(BoundedInputsTest, LogFileMustBeARegularFile) {
  TempDir dir;
  const std::string fifo = Fifo(dir);
  for (const auto& [name, argv] : {std::pair{"ctl-log", ControllerArgs(dir)},
                                   std::pair{"agent-log", AgentArgs(dir)}}) {
    Outcome r = RunBinary(dir, name, With(argv, {"--log-file", fifo}));
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("--log-file: " + fifo +
                                    ": not a regular file (a "
                                    "FIFO)"));
  }
}

// Issue #33 F8: a YAML alias bomb in --config (644 bytes, 24 levels) took
// 27 s and 2.6 GB; anchors and aliases are refused before a node is built
// (16 levels here: main accepted it and failed later, or not at all).
TEST(BoundedInputsTest, YamlAliasBombIsRefused) {
  TempDir dir;
  const std::string cfg = dir.file("bomb.yaml");
  {
    std::ofstream out(cfg);
    out << "x0: &x0 [a, a]\n";
    for (int i = 1; i < 16; ++i) {
      out << "x" << i << ": &x" << i << " [*x" << i - 1 << ", *x" << i - 1
          << "]\n";
    }
  }
  for (const auto& [name, argv] : {std::pair{"ctl-bomb", ControllerArgs(dir)},
                                   std::pair{"agent-bomb", AgentArgs(dir)}}) {
    Outcome r = RunBinary(dir, name, With(argv, {"--config", cfg}));
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(cfg + ":1:5 (byte offset 4): an anchor"));
  }
}

// --host "a b" started, was refused by the controller and retried forever.
TEST(BoundedInputsTest, BadHostNameExits2) {
  TempDir dir;
  Outcome r = RunBinary(dir, "host", With(AgentArgs(dir), {"--host", "a b"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(--host): 'a b'"));
}

// A registration the controller refuses for good (here: node1's
// certificate registering as node2) is fatal: exit 2, not a retry loop.
TEST(BoundedInputsTest, RefusedRegistrationIsFatal) {
  TempDir dir;
  const std::string pki = dir.file("pki");
  Outcome gen =
      RunBinary(dir, "gen", {PITSTOP_GEN_CERTS, pki, "--hosts", "node1"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const std::string port_file = dir.file("port");
  Process controller(
      With(ControllerArgs(dir),
           {"--port-file", port_file, "--tls-ca", pki + "/ca.pem", "--tls-cert",
            pki + "/controller.pem", "--tls-key", pki + "/controller.key"}),
      {}, dir.file("controller.out"), dir.file("controller.err"));
  std::string port;
  ASSERT_TRUE(Eventually([&] {
    port = ReadFile(port_file);
    return !port.empty() && port.back() == '\n';
  })) << ReadFile(dir.file("controller.err"));
  port.pop_back();
  Outcome r = RunBinary(
      dir, "agent",
      {Agent(), "--ingest-socket", dir.file("a.sock"), "--controller",
       "localhost:" + port, "--metrics-address", "", "--host", "node2",
       "--tls-ca", pki + "/ca.pem", "--tls-cert", pki + "/agent-node1.pem",
       "--tls-key", pki + "/agent-node1.key"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("refused this agent"));
  EXPECT_THAT(r.output, HasSubstr("node2"));
  controller.Signal(SIGTERM);
  EXPECT_NE(controller.Wait(), -1);
}

// Connections refused on the shared-memory socket were not counted in
// pitstop_agent_connections_refused_total.
TEST(BoundedInputsTest, ShmRefusalsAreCounted) {
  TempDir dir;
  const std::string shm = dir.file("a-shm.sock");
  const std::string out = dir.file("agent.out");
  Process agent({Agent(), "--ingest-socket", dir.file("a.sock"), "--controller",
                 "", "--metrics-address", "127.0.0.1:0",
                 "--ingest-shm-max-connections", "1", "--batch-ms", "100"},
                {}, out, dir.file("agent.err"));
  const int port = agent::testing::WaitAgentReady(out, &agent);
  ASSERT_GT(port, 0) << ReadFile(dir.file("agent.err"));
  auto connect_shm = [&] {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", shm.c_str());
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  };
  // The first holds the only slot (it has 5 s to say hello); the next two
  // are accepted and closed at once.
  const int held = connect_shm();
  absl::SleepFor(absl::Milliseconds(200));
  const int a = connect_shm();
  const int b = connect_shm();
  std::string metrics;
  EXPECT_TRUE(Eventually([&] {
    metrics = agent::testing::HttpGet(port, "/metrics");
    return metrics.find("pitstop_agent_connections_refused_total 2") !=
           std::string::npos;
  })) << metrics;
  for (int fd : {held, a, b}) close(fd);
  agent.Signal(SIGTERM);
  EXPECT_NE(agent.Wait(), -1);
}

// Writes `prefix` + `zeros` bytes of ' ' + `suffix`, gzip-compressed as it
// goes (64 MiB of spaces compress ~1000:1).
void WriteGzipBomb(const std::string& path, const std::string& prefix,
                   size_t spaces, const std::string& suffix) {
  gzFile f = gzopen(path.c_str(), "wb9");
  ASSERT_NE(f, nullptr);
  gzwrite(f, prefix.data(), static_cast<unsigned>(prefix.size()));
  const std::string chunk(1 << 20, ' ');
  for (size_t done = 0; done < spaces; done += chunk.size()) {
    gzwrite(f, chunk.data(), static_cast<unsigned>(chunk.size()));
  }
  gzwrite(f, suffix.data(), static_cast<unsigned>(suffix.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// A small gzip that inflates far beyond its size: analyze used 2.1 GB and
// died with bad_alloc on a 2 MB file that inflated to 2 GiB.
TEST(BoundedInputsTest, AnalyzeStopsAGzipBombAtTheCaps) {
  TempDir dir;
  const std::string bomb = dir.file("trace.json.gz");
  WriteGzipBomb(bomb, "{\"schemaVersion\": 1, \"traceEvents\": [", 64 << 20,
                "]}");
  const std::string pitstop = BinaryPath("tools/pitstop/pitstop");
  // The ratio cap (default 100:1) stops it after the first MiB.
  Outcome r = RunBinary(dir, "ratio", {pitstop, "analyze", "-q", bomb});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(bomb + ": decompression ratio limit hit at "
                                         "compressed byte offset"));
  // With the ratio raised, the size cap (lowered to 16 MiB) stops it.
  r = RunBinary(dir, "size",
                {pitstop, "analyze", "-q", "--max-gzip-ratio", "100000",
                 "--max-input-mib", "16", bomb});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(bomb + ": decompression size limit hit"));
  EXPECT_THAT(r.output, HasSubstr("--max-input-mib"));
  r = RunBinary(dir, "flag",
                {pitstop, "analyze", "--max-input-mib", "0", bomb});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--max-input-mib"));
  // A FIFO as input is refused, not read forever.
  const std::string fifo = Fifo(dir);
  r = RunBinary(dir, "fifo", {pitstop, "analyze", "-q", fifo});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fifo + ": not a regular file (a FIFO)"));
}

}  // namespace
}  // namespace pitstop
