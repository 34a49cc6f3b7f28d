// pitstop_emu_rank: one emulated training process: the NCCL emulator
// harness drives the real libnccl-profiler-pitstop.so, which streams to the
// agent at $PITSTOP_AGENT_SOCKET (set RANK, PITSTOP_HOST, ... too).
//
//   pitstop_emu_rank COMM_RANK N_RANKS COLLS COLLS_PER_S MODE
//     MODE: finalize (clean end), hold (stay alive after the collectives
//     until killed), crash (_exit without finalize).
//   Collective i: AllReduce, seq i, GPU timer = CLOCK_MONOTONIC + 7000 s,
//   GPU kernel duration 40 us + 1 us * COMM_RANK. Prints "ran <n>".
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "pitstop/clock.h"
#include "src/nccl/emulator/nccl_emulator.h"

int main(int argc, char** argv) {
  using namespace pitstop::emu;
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: %s COMM_RANK N_RANKS COLLS COLLS_PER_S "
                 "finalize|hold|crash\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int n_ranks = std::atoi(argv[2]);
  const int colls = std::atoi(argv[3]);
  const double rate = std::atof(argv[4]);
  const std::string mode = argv[5];
  // The plugin built with this tree (an absolute path: under TSan the
  // dlopen interceptor hides the executable's RUNPATH).
  auto emu = Emulator::Create({});
  if (!emu.ok()) {
    std::fprintf(stderr, "%s\n", emu.status().ToString().c_str());
    return 1;
  }
  auto comm = (*emu)->InitComm({.comm_hash = 0xE2E1,
                                .name = "world",
                                .n_ranks = n_ranks,
                                .rank = rank,
                                .n_nodes = 1});
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  for (int i = 0; i < colls; ++i) {
    if (rate > 0) absl::SleepFor(start + absl::Seconds(i / rate) - absl::Now());
    OpSpec spec;
    spec.seq_number = i;
    spec.count = 1 << 16;
    Timeline t;
    t.kernel_us = 0;
    t.gpu_start_ns =
        static_cast<uint64_t>(pitstop::MonotonicNowNs()) + 7'000'000'000'000ull;
    t.gpu_duration_ns = 40'000 + 1'000 * rank;
    (*comm)->RunCollective(spec, t);
  }
  std::printf("ran %d\n", colls);
  std::fflush(stdout);
  if (mode == "hold") {
    while (true) pause();
  }
  if (mode == "crash") SimulateCrash(3);
  (*comm)->Finalize();
  return 0;
}
