// Output helpers of pitstopctl: aligned text tables and JSON.
#ifndef PITSTOP_TOOLS_PITSTOPCTL_CTL_FORMAT_H_
#define PITSTOP_TOOLS_PITSTOPCTL_CTL_FORMAT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::ctl {

// A text table: header row plus rows, columns padded to the widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// One-line JSON of a message (proto field names, enums as names).
std::string ToJson(const google::protobuf::Message& m);

// "NON_COMM_SLOW" from FAULT_CLASS_NON_COMM_SLOW etc.
std::string ShortEnum(const std::string& name, const std::string& prefix);
// "12:04:05" style age ("3m12s ago") from unix ns; "-" for 0.
std::string Age(uint64_t unix_ns);
// "rank 5 node2 GPU1 mlx5_1" / "link node1 -> node2".
std::string DescribeSuspect(const v1::Suspect& s);
// Joined DescribeSuspect of all suspects, "(none yet)" when empty.
std::string SuspectList(const v1::Fault& f);

// "AUTO timed" / "ADVISE sync->timed": a job's sync policy and mode
// (sync_commands.cc).
std::string SyncSummary(const v1::Job& j);
// The trainer policies' --slow-signal values ("steps-or-faults",
// "confirmed-faults"; UNSPECIFIED for anything else) and back ("-" for
// UNSPECIFIED) (sync_commands.cc).
v1::SlowSignal ParseSlowSignalFlag(const std::string& v);
std::string SlowSignalText(v1::SlowSignal s);

void PrintFaultTable(const std::vector<v1::Fault>& faults, std::ostream& out);
// Multi-line details: summary, suspects, victims, evidence with numbers.
void PrintFaultDetails(const v1::Fault& f, std::ostream& out);
// Fault.trainer_profile (a slow rank's torch.profiler diff) as evidence
// lines with the ops of both sides.
void PrintTrainerProfile(const v1::TrainerProfile& p, std::ostream& out);

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_CTL_FORMAT_H_
