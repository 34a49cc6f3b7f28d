// pitstop_fake_rank: one emulated rank process that streams hand-made
// telemetry to an agent (tests and the agent benchmark; the plugin-driven
// path is tests/agent/e2e_test.cc).
//
//   pitstop_fake_rank SOCKET GLOBAL_RANK N_RANKS OPS BATCH_OPS MODE
//     MODE: "goodbye" (finish cleanly), "hold" (stay connected after
//     sending, until killed), "stream" (send forever as fast as possible,
//     reporting totals on SIGTERM-free exit when OPS reached).
//   Prints "sent <ops>" after the last batch.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/agent/fake_rank.h"

int main(int argc, char** argv) {
  using namespace pitstop::agent::testing;
  namespace v1 = pitstop::v1;
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: %s SOCKET GLOBAL_RANK N_RANKS OPS BATCH_OPS "
                 "goodbye|hold\n",
                 argv[0]);
    return 2;
  }
  const std::string socket = argv[1];
  const int rank = std::atoi(argv[2]);
  const int n_ranks = std::atoi(argv[3]);
  const long ops = std::atol(argv[4]);
  const int batch = std::max(1, std::atoi(argv[5]));
  const std::string mode = argv[6];
  constexpr uint64_t kComm = 0xE2E0;
  FakeRank stream(socket);
  if (!stream.Send(MakeHello(getpid(), rank, kComm, rank, n_ranks))) return 1;
  uint64_t seq = 0;
  uint64_t batch_seq = 2;
  v1::StreamTelemetryRequest req;
  while (static_cast<long>(seq) < ops) {
    req.Clear();
    req.set_batch_seq(batch_seq++);
    const int n = static_cast<int>(std::min<long>(batch, ops - seq));
    AddCompleteOps(&req, kComm, rank, seq, n);
    seq += n;
    if (!stream.Send(req)) return 1;
  }
  std::printf("sent %lu\n", static_cast<unsigned long>(seq));
  std::fflush(stdout);
  if (mode == "hold") {
    while (true) pause();
  }
  stream.Send(MakeGoodbye());
  return stream.Close().ok() ? 0 : 1;
}
