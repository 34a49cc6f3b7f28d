// Scoring of a simulator run: which injected faults pitstop found (recall),
// whether it named the right rank / GPU / NIC / link (localisation), how
// long it took from onset to the fault's first appearance on WatchFaults
// (latency), and which faults it raised that no injection explains (false
// faults). Definitions in docs/detection-quality.md.
#ifndef PITSTOP_SRC_SIM_SCORE_H_
#define PITSTOP_SRC_SIM_SCORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pitstop/v1/controller.pb.h"
#include "src/sim/model.h"

namespace pitstop::sim {

// A fault as the simulator saw it: the latest version of the record, and
// when (plan time, ns) it first appeared on the WatchFaults stream.
struct ObservedFault {
  v1::Fault fault;
  int64_t first_seen_ns = 0;
  // When the stream first showed it confirmed (the controller had set
  // confirmed_unix_ns); -1: not seen so.
  int64_t confirmed_seen_ns = -1;
};

struct TruthScore {
  const FaultTruth* truth = nullptr;
  bool scored = false;     // an expected fault that really happened
  bool detected = false;   // a fault of the expected class after onset
  bool localised = false;  // ... whose first suspect is the culprit
  int64_t latency_ns = -1;
  std::string fault_id;  // the matching fault
  std::string note;      // why it missed, when it did
};

struct RunScore {
  std::vector<TruthScore> truths;
  std::vector<const ObservedFault*> false_faults;
  bool ok() const;  // all scored truths detected + localised, no false fault
};

// True if suspect `s` names the culprit of `t` (rank/GPU, NIC or node pair
// depending on the fault kind).
bool SuspectMatches(const v1::Suspect& s, const FaultTruth& t);

// "FAULT_CLASS_COMM_SLOW" -> "COMM_SLOW".
std::string ShortClassName(v1::FaultClass c);

RunScore ScoreRun(const Plan& plan, const std::vector<ObservedFault>& faults);

// One line per suspect: "GPU node1 GPU 1 (rank 5, pid 123) confidence 0.9".
std::string DescribeSuspect(const v1::Suspect& s);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_SCORE_H_
