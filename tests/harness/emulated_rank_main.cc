// pitstop_emulated_rank: one emulated NCCL rank in its own process, driving
// the real libnccl-profiler-pitstop.so (the simulator and the plugin's
// process tests use it; also a small example of the harness API).
//
//   pitstop_emulated_rank [--ops N] [--comm-hash H] [--rank R] [--nranks N]
//                         [--version V] [--end finalize|exit|crash]
//                         [--linger-ms MS]
//
// Reads PITSTOP_AGENT_SOCKET, RANK, PITSTOP_HOST, PITSTOP_JOB_ID like the
// library does. --end: finalize (clean, ProcessGoodbye FINALIZE), exit
// (exit(0) without finalize: goodbye EXIT from the exit handler), crash
// (_exit: the stream just ends). --linger-ms: sleep before ending (so the
// exporter has streamed what it has). Exit code 0 on success, 2 on bad usage,
// 3 if the plugin cannot be loaded or init fails.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "src/nccl/emulator/nccl_emulator.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr,
               "pitstop_emulated_rank: %s\nusage: pitstop_emulated_rank "
               "[--ops N] [--comm-hash H] [--rank R] [--nranks N] "
               "[--version V] [--end finalize|exit|crash] [--linger-ms MS]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using pitstop::emu::Emulator;
  int ops = 10, rank = 0, nranks = 2, version = 0, linger_ms = 0;
  uint64_t hash = 0x5EED;
  std::string end = "finalize";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") return Usage("drives one emulated NCCL rank"), 0;
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const char* v = argv[++i];
    bool ok = true;
    if (flag == "--ops")
      ok = absl::SimpleAtoi(v, &ops);
    else if (flag == "--rank")
      ok = absl::SimpleAtoi(v, &rank);
    else if (flag == "--nranks")
      ok = absl::SimpleAtoi(v, &nranks);
    else if (flag == "--version")
      ok = absl::SimpleAtoi(v, &version);
    else if (flag == "--linger-ms")
      ok = absl::SimpleAtoi(v, &linger_ms);
    else if (flag == "--comm-hash")
      ok = absl::SimpleHexAtoi(v, &hash);
    else if (flag == "--end")
      end = v;
    else
      return Usage(("unknown flag " + flag).c_str());
    if (!ok) return Usage(("bad value for " + flag + ": " + v).c_str());
  }
  if (end != "finalize" && end != "exit" && end != "crash") {
    return Usage(("--end must be finalize, exit or crash, not " + end).c_str());
  }
  auto emu = Emulator::Create({.plugin = "", .force_version = version});
  if (!emu.ok()) {
    std::fprintf(stderr, "pitstop_emulated_rank: %s\n",
                 std::string(emu.status().message()).c_str());
    return 3;
  }
  auto comm = (*emu)->InitComm({.comm_hash = hash,
                                .name = "emulated",
                                .n_ranks = nranks,
                                .rank = rank,
                                .n_nodes = 1});
  if (!comm.ok()) {
    std::fprintf(stderr, "pitstop_emulated_rank: %s\n",
                 std::string(comm.status().message()).c_str());
    return 3;
  }
  for (int i = 0; i < ops; ++i) {
    pitstop::emu::OpSpec spec;
    spec.seq_number = static_cast<uint64_t>(i);
    (*comm)->RunCollective(spec, {.kernel_us = 10});
  }
  if (linger_ms > 0) usleep(static_cast<useconds_t>(linger_ms) * 1000);
  if (end == "crash") pitstop::emu::SimulateCrash(0);
  if (end == "exit") std::exit(0);  // no finalize: the exit handler says bye
  (*comm)->Finalize();
  return 0;
}
