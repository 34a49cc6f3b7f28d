// A communicator record for engine tests: member `rank` (pid 100 + rank)
// of an `n_ranks`-rank communicator `hash` of `job`, listing `listed`
// global ranks (0, 1, ...), each a member charged to the reporting host.
#ifndef PITSTOP_TESTS_CONTROLLER_LISTED_COMM_H_
#define PITSTOP_TESTS_CONTROLLER_LISTED_COMM_H_

#include <cstdint>
#include <string>

#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller::testing {

inline v1::CommunicatorInfo ListedComm(uint64_t hash, const std::string& job,
                                       int32_t rank = 0, int32_t listed = 0,
                                       int32_t n_ranks = 1024) {
  v1::CommunicatorInfo info;
  info.set_comm_hash(hash);
  info.set_job_id(job);
  info.set_rank(rank);
  info.set_n_ranks(n_ranks);
  info.set_pid(100 + rank);
  for (int32_t g = 0; g < listed; ++g) info.add_global_ranks(g);
  return info;
}

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_LISTED_COMM_H_
