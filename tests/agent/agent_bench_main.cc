// pitstop_agent_bench: throughput, memory and latency of the real
// pitstop-agent process fed by emulated rank processes (pitstop_fake_rank)
// and drained by an in-process AgentLink receiver. See docs/benchmarks.md.
//
//   pitstop_agent_bench [--ranks 8] [--ops 100000] [--batch 100]
//                       [--rate 0] [--batch-ms 1000] [--emu]
//   --rate: ops per second per rank; 0 = as fast as they go.
//   --emu: ranks are pitstop_emu_rank processes (NCCL emulator driving the
//   real plugin, 8 records per collective) instead of pitstop_fake_rank
//   (hand-made batches of --batch ops, 6 records per op).
// Prints records ingested per agent CPU second, the agent's peak RSS, and
// completion -> summary-received latency percentiles (same node clock).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace {

using namespace pitstop::agent::testing;

// utime + stime of `pid` in seconds.
double CpuSeconds(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  double ut = 0, st = 0;
  if (f.size() < 13 || !absl::SimpleAtod(f[11], &ut) ||
      !absl::SimpleAtod(f[12], &st)) {
    return 0;
  }
  return (ut + st) / sysconf(_SC_CLK_TCK);
}

// VmRSS of `pid` in KiB.
long RssKib(int pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 8, batch = 100, batch_ms = 1000;
  long ops = 100000;
  double rate = 0;
  std::string bin_dir = ".";
  bool emu = false;
  CLI::App app("pitstop-agent benchmark", "pitstop_agent_bench");
  app.add_option("--ranks", ranks, "emulated rank processes");
  app.add_option("--ops", ops, "ops per rank (6 records each)");
  app.add_option("--batch", batch, "ops per telemetry batch");
  app.add_option("--rate", rate, "ops/s per rank; 0 = unpaced");
  app.add_option("--batch-ms", batch_ms, "agent upstream batch period");
  app.add_option("--bin-dir", bin_dir, "build directory");
  app.add_flag("--emu", emu, "ranks through the real plugin (emulator)");
  CLI11_PARSE(app, argc, argv);

  TempDir dir;
  TestReceiver receiver;
  pitstop::Mutex mu;
  std::vector<int64_t> latency_ns;
  long summaries = 0;
  uint64_t aggregated = 0;
  uint64_t records_ingested = 0;
  receiver.SetOnRequest([&](const pitstop::v1::ConnectRequest& r) {
    const int64_t now = pitstop::MonotonicNowNs();
    pitstop::MutexLock lock(&mu);
    for (const auto& s : r.summaries()) {
      latency_ns.push_back(now - static_cast<int64_t>(s.completion_cpu_ns()));
    }
    summaries += r.summaries_size();
    aggregated =
        std::max<uint64_t>(aggregated, r.counters().summaries_aggregated());
    records_ingested =
        std::max<uint64_t>(records_ingested, r.counters().records_ingested());
  });
  const std::string sock = dir.file("agent.sock");
  Process agent({bin_dir + "/src/agent/pitstop-agent", "--ingest-socket", sock,
                 "--controller", receiver.address(), "--metrics-address", "",
                 "--batch-ms", std::to_string(batch_ms), "--log-level", "warn"},
                {}, dir.file("agent.out"), dir.file("agent.err"));
  if (!Eventually([&] {
        return ReadFile(dir.file("agent.out")).find("ready") !=
               std::string::npos;
      })) {
    std::fprintf(stderr, "agent did not start: %s\n",
                 ReadFile(dir.file("agent.err")).c_str());
    return 1;
  }
  const long rss_idle = RssKib(agent.pid());
  const double cpu0 = CpuSeconds(agent.pid());
  const absl::Time t0 = absl::Now();
  std::vector<std::unique_ptr<Process>> rs;
  for (int r = 0; r < ranks; ++r) {
    const std::string rs_ = std::to_string(r);
    std::vector<std::string> a, env;
    if (emu) {
      a = {bin_dir + "/tests/agent/pitstop_emu_rank",
           rs_,
           std::to_string(ranks),
           std::to_string(ops),
           std::to_string(static_cast<long>(rate)),
           "finalize"};
      // The library's shared-memory transport (ingest.shm_socket, derived
      // from ingest.socket); fake ranks below speak gRPC to ingest.socket.
      env = {"PITSTOP_AGENT_SOCKET=" + dir.file("agent-shm.sock"),
             "RANK=" + rs_, "PITSTOP_FINALIZE_TIMEOUT_MS=30000"};
    } else {
      a = {bin_dir + "/tests/agent/pitstop_fake_rank",
           sock,
           rs_,
           std::to_string(ranks),
           std::to_string(ops),
           std::to_string(batch),
           "goodbye",
           std::to_string(rate)};
    }
    rs.push_back(std::make_unique<Process>(a, env, dir.file("r" + rs_),
                                           dir.file("e" + rs_)));
  }
  long rss_max = 0;
  int failed = 0;
  for (auto& p : rs) {
    while (p->running()) {
      rss_max = std::max(rss_max, RssKib(agent.pid()));
      absl::SleepFor(absl::Milliseconds(100));
    }
    failed += p->Wait() != 0;
  }
  const absl::Duration send_time = absl::Now() - t0;
  const long expected = ranks * ops;
  Eventually(
      [&] {
        rss_max = std::max(rss_max, RssKib(agent.pid()));
        pitstop::MutexLock lock(&mu);
        return summaries + static_cast<long>(aggregated) >= expected;
      },
      absl::Seconds(120));
  const double cpu = CpuSeconds(agent.pid()) - cpu0;
  const absl::Duration wall = absl::Now() - t0;
  agent.Signal(SIGTERM);
  agent.Wait();

  pitstop::MutexLock lock(&mu);
  std::sort(latency_ns.begin(), latency_ns.end());
  auto pct = [&](double p) {
    if (latency_ns.empty()) return 0.0;
    return latency_ns[std::min(latency_ns.size() - 1,
                               static_cast<size_t>(p * latency_ns.size()))] *
           1e-6;
  };
  const double records = static_cast<double>(records_ingested);
  std::printf("%s ranks %d, ops/rank %ld, batch %d ops, rate %s, batch_ms %d\n",
              emu ? "emulator+plugin" : "fake", ranks, ops, batch,
              rate > 0
                  ? (std::to_string(static_cast<long>(rate)) + " ops/s").c_str()
                  : "unpaced",
              batch_ms);
  std::printf("rank processes failed: %d\n", failed);
  std::printf("summaries received %ld of %ld (aggregated %lu)\n", summaries,
              expected, static_cast<unsigned long>(aggregated));
  std::printf("records %.0f, ranks sent in %.2f s, all summaries in %.2f s\n",
              records, absl::ToDoubleSeconds(send_time),
              absl::ToDoubleSeconds(wall));
  std::printf("agent CPU %.2f s -> %.0f records/s per agent core\n", cpu,
              cpu > 0 ? records / cpu : 0);
  std::printf("agent RSS idle %.1f MiB, peak during run %.1f MiB\n",
              rss_idle / 1024.0, rss_max / 1024.0);
  std::printf(
      "completion -> summary received: p50 %.1f ms, p99 %.1f ms, "
      "max %.1f ms\n",
      pct(0.50), pct(0.99), pct(1.0));
  return failed == 0 && summaries == expected ? 0 : 1;
}
