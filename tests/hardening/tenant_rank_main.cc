// pitstop_tenant_rank: one local process that claims a job, a communicator
// rank and a global rank on an agent's socket (tenant_isolation_test): a
// well-behaved rank of a job, or an attacker claiming another job's.
//
//   pitstop_tenant_rank SOCKET JOB COMM_HASH RANK N_RANKS GLOBAL_RANK MODE
//                       [LISTED]
//     MODE "hold": streams 10 complete ops every 50 ms until killed;
//     "drop": sends the hello and 10 ops, then exits without goodbye (the
//     agent reports its stream as a dead process).
//     LISTED: the hello's communicator lists global ranks 0..LISTED-1 (as
//     a torch process group's does), default none.
// Prints "hello sent" once the hello went out.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "tests/agent/fake_rank.h"

int main(int argc, char** argv) {
  using namespace pitstop::agent::testing;
  namespace v1 = pitstop::v1;
  if (argc != 8 && argc != 9) {
    std::fprintf(stderr,
                 "usage: %s SOCKET JOB COMM_HASH RANK N_RANKS GLOBAL_RANK "
                 "hold|drop [LISTED]\n",
                 argv[0]);
    return 2;
  }
  const std::string socket = argv[1];
  const std::string job = argv[2];
  const uint64_t comm = std::strtoull(argv[3], nullptr, 0);
  const int rank = std::atoi(argv[4]);
  const int n_ranks = std::atoi(argv[5]);
  const int global_rank = std::atoi(argv[6]);
  const std::string mode = argv[7];
  FakeRank stream(socket);
  v1::StreamTelemetryRequest hello =
      MakeHello(getpid(), global_rank, comm, rank, n_ranks);
  hello.mutable_hello()->set_job_id(job);
  const int listed = argc == 9 ? std::atoi(argv[8]) : 0;
  for (int g = 0; g < listed; ++g) {
    hello.mutable_communicators(0)->mutable_info()->add_global_ranks(g);
  }
  hello.set_batch_seq(1);
  if (!stream.Send(hello)) return 1;
  std::printf("hello sent\n");
  std::fflush(stdout);
  uint64_t seq = 0;
  for (uint64_t batch = 2;; ++batch) {
    v1::StreamTelemetryRequest req;
    req.set_batch_seq(batch);
    AddCompleteOps(&req, comm, rank, seq, 10);
    seq += 10;
    if (!stream.Send(req)) return 1;
    if (mode == "drop") {
      absl::SleepFor(absl::Milliseconds(300));  // let the agent read it
      _exit(0);  // no goodbye: a dead process, as far as anyone can tell
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}
