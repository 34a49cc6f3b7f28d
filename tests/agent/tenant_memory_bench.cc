// pitstop_tenant_memory_bench: memory per rank a local process holds in the
// agent, and what one uid can make the agent keep (attacker round 18,
// R18-6; docs/reliability.md "A process's share").
//
//   pitstop_tenant_memory_bench [--processes 257] [--uids 1]
//                               [--per-uid 131072] [--tenants-only]
//
// Drives the agent's own AgentCore (LocalTenants and each stream's
// RankJoiner, as the ingest servers do) with R18-6's attack: each process
// says hello for no job and claims 4,096 made-up communicators (one op
// record each, rank 0) in one message; processes are spread over --uids
// uids. --tenants-only feeds LocalTenants alone. Prints the ranks held, the
// claims refused, and the heap in use (mallinfo2) and RSS growth per held
// rank.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "pitstop/clock.h"
#include "src/agent/agent_core.h"
#include "src/agent/local_tenants.h"

namespace {

using pitstop::agent::AgentCore;
using pitstop::agent::AgentCoreOptions;
using pitstop::agent::LocalTenants;
using pitstop::agent::ProcessIdentity;

long RssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;  // small chunks and mmap-ed ones
}

pitstop::v1::StreamTelemetryRequest Flood(int process, int ranks) {
  pitstop::v1::StreamTelemetryRequest req;
  req.mutable_hello()->set_pid(static_cast<uint32_t>(10'000 + process));
  req.mutable_hello()->set_global_rank(-1);
  req.mutable_hello()->set_start_unix_ns(1);
  for (int k = 0; k < ranks; ++k) {
    pitstop::v1::OpRecord* op = req.add_ops();
    op->set_op_id(static_cast<uint64_t>(k) + 1);
    op->set_comm_hash(0xF00000000ull + static_cast<uint64_t>(process) * 8192 +
                      static_cast<uint64_t>(k));
    op->set_rank(0);
    op->set_kind(static_cast<pitstop::v1::OpKind>(1));
    op->set_func(static_cast<pitstop::v1::CollFunc>(3));
  }
  return req;
}

}  // namespace

int main(int argc, char** argv) {
  int processes = 257;
  int uids = 1;
  size_t per_uid = pitstop::agent::kMaxRanksPerUid;
  bool tenants_only = false;
  CLI::App app{"Memory per rank held by local processes in the agent"};
  app.add_option("--processes", processes, "attacking processes")
      ->check(CLI::Range(1, 4096));
  app.add_option("--uids", uids, "uids they are spread over")
      ->check(CLI::Range(1, 4096));
  app.add_option("--per-uid", per_uid, "ingest.max_ranks_per_uid")
      ->check(CLI::Range(size_t{1}, size_t{1} << 22));
  app.add_flag("--tenants-only", tenants_only, "LocalTenants alone");
  CLI11_PARSE(app, argc, argv);

  AgentCoreOptions options;
  options.host = "bench";
  options.tenants.max_ranks_per_uid = per_uid;
  const int kRanks = static_cast<int>(options.tenants.max_ranks_per_process);
  const size_t heap0 = HeapInUse();
  const long rss0 = RssKib();
  AgentCore core(pitstop::Clock::Real(), options, nullptr);
  LocalTenants tenants(options.tenants);
  size_t held = 0;
  for (int p = 0; p < processes; ++p) {
    ProcessIdentity who;
    who.known = true;
    who.pid = 10'000 + p;
    who.uid = static_cast<uid_t>(60'000 + p % uids);
    who.environ_read = true;  // `env -i`: an anonymous tenant
    who.start_ticks = 1;
    pitstop::v1::StreamTelemetryRequest req = Flood(p, kRanks);
    if (tenants_only) {
      const uint64_t stream = static_cast<uint64_t>(p) + 1;
      if (!tenants.Hello(stream, who, who.pid, "", -1).ok()) continue;
      tenants.Filter(stream, &req);
      held += static_cast<size_t>(req.ops_size());
    } else {
      const uint64_t stream = core.OpenStream(nullptr, who);
      if (!core.OnMessage(stream, req).ok()) continue;
      // The streams stay open, as the parent kept the attack's sockets.
    }
  }
  const LocalTenants::Stats st =
      tenants_only ? tenants.stats() : core.tenant_stats();
  if (!tenants_only) {
    held = processes * static_cast<size_t>(kRanks) - st.uid_over_share -
           st.process_over_cap - st.tables_full;
  }
  const double heap = static_cast<double>(HeapInUse() - heap0);
  const double rss = static_cast<double>(RssKib() - rss0) * 1024;
  std::printf(
      "%s: %d processes of %d uid(s), %d made-up ranks each, per-uid share "
      "%zu\n"
      "  held %zu ranks; refused: uid %llu, process %llu, node %llu\n"
      "  heap in use +%.1f MiB (%.0f bytes per held rank), RSS +%.1f MiB "
      "(%.0f bytes per held rank)\n",
      tenants_only ? "LocalTenants" : "AgentCore (tenants + joiners)",
      processes, uids, kRanks, per_uid, held,
      static_cast<unsigned long long>(st.uid_over_share),
      static_cast<unsigned long long>(st.process_over_cap),
      static_cast<unsigned long long>(st.tables_full), heap / (1 << 20),
      held ? heap / held : 0.0, rss / (1 << 20), held ? rss / held : 0.0);
  return 0;
}
