// pitstop_fake_rank: one emulated rank process that streams hand-made
// telemetry to an agent (tests and the agent benchmark; the plugin-driven
// path is tests/agent/e2e_test.cc).
//
//   pitstop_fake_rank SOCKET GLOBAL_RANK N_RANKS OPS BATCH_OPS MODE [RATE]
//     MODE: "goodbye" (finish cleanly) or "hold" (stay connected after
//     sending, until killed). RATE: ops per second (each op is 6 records),
//     paced in batches of BATCH_OPS; absent or 0 = as fast as possible.
//   Prints "sent <ops>" after the last batch.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "tests/agent/fake_rank.h"

int main(int argc, char** argv) {
  using namespace pitstop::agent::testing;
  namespace v1 = pitstop::v1;
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr,
                 "usage: %s SOCKET GLOBAL_RANK N_RANKS OPS BATCH_OPS "
                 "goodbye|hold [OPS_PER_S]\n",
                 argv[0]);
    return 2;
  }
  const std::string socket = argv[1];
  const int rank = std::atoi(argv[2]);
  const int n_ranks = std::atoi(argv[3]);
  const long ops = std::atol(argv[4]);
  const int batch = std::max(1, std::atoi(argv[5]));
  const std::string mode = argv[6];
  const double rate = argc == 8 ? std::atof(argv[7]) : 0;
  constexpr uint64_t kComm = 0xE2E0;
  FakeRank stream(socket);
  if (!stream.Send(MakeHello(getpid(), rank, kComm, rank, n_ranks))) return 1;
  uint64_t seq = 0;
  uint64_t batch_seq = 2;
  v1::StreamTelemetryRequest req;
  const absl::Time start = absl::Now();
  while (static_cast<long>(seq) < ops) {
    if (rate > 0) {  // pace: the batch starting at op k leaves at k / rate
      absl::SleepFor(start + absl::Seconds(seq / rate) - absl::Now());
    }
    req.Clear();
    req.set_batch_seq(batch_seq++);
    const int n = static_cast<int>(std::min<long>(batch, ops - seq));
    AddCompleteOps(&req, kComm, rank, seq, n);
    seq += n;
    if (!stream.Send(req)) {
      std::fprintf(stderr, "send failed after %lu ops\n",
                   static_cast<unsigned long>(seq));
      return 1;
    }
  }
  std::printf("sent %lu\n", static_cast<unsigned long>(seq));
  std::fflush(stdout);
  if (mode == "hold") {
    while (true) pause();
  }
  stream.Send(MakeGoodbye());
  const grpc::Status st = stream.Close();
  if (!st.ok()) {
    std::fprintf(stderr, "stream ended with %d: %s\n",
                 static_cast<int>(st.error_code()), st.error_message().c_str());
    return 1;
  }
  return 0;
}
