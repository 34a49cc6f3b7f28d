// Helpers that turn communicator members into Suspect messages and fill the
// common fields of a Fault. Internal to pitstop_detect.
#ifndef PITSTOP_CONTROLLER_DETECT_SUSPECTS_H_
#define PITSTOP_CONTROLLER_DETECT_SUSPECTS_H_

#include <cstdint>
#include <set>
#include <string>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

// Victim lists are capped (100 k-rank jobs); the total goes into evidence.
inline constexpr int kMaxVictims = 64;

// A suspect at `level` for comm rank `rank` of `comm` (host, GPU, NIC,
// global rank and pid from the membership; -1 / empty when unknown).
v1::Suspect MemberSuspect(const CommState& comm, int32_t rank,
                          v1::SuspectLevel level, double confidence);

// Adds every member of `comm` not in `exclude` as a RANK-level victim (up
// to kMaxVictims; evidence value "victims_total" gets the full count).
void AddVictims(const CommState& comm, const std::set<int32_t>& exclude,
                v1::Fault* fault);

// Sets class, job, comm hash/name and detector name.
void FillFaultHeader(const CommState& comm, v1::FaultClass fault_class,
                     const std::string& detector, v1::Fault* fault);

// How summaries name a communicator: its name, or "comm <hash hex>" when
// the application gave it none.
std::string CommLabel(const CommState& comm);

// "rank 12 (global 12, host node3 GPU 4)" for summaries.
std::string DescribeRank(const CommState& comm, int32_t rank);

// Stable identity of a rank across communicators: "g<global>" when the
// global rank is known, else "c<comm hex>:<rank>".
std::string RankIdentity(const CommState& comm, int32_t rank);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_SUSPECTS_H_
