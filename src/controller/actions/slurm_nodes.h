// Drains and resumes Slurm nodes with scontrol on behalf of pitstop faults.
// The drain reason starts with "pitstop <fault id>:", which is how a
// resume later knows the drain is ours: a node drained by an operator, or
// drained again for another fault, is left alone.
#ifndef PITSTOP_CONTROLLER_ACTIONS_SLURM_NODES_H_
#define PITSTOP_CONTROLLER_ACTIONS_SLURM_NODES_H_

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/controller/actions/action_record.h"

namespace pitstop::controller {

struct SlurmOptions {
  bool enabled = false;
  std::string scontrol = "scontrol";  // looked up in PATH
  absl::Duration timeout = absl::Seconds(20);
  // pitstop host -> Slurm node name, from "host=node" entries. Hosts not
  // listed use their name up to the first '.' when strip_domain is set,
  // else the name as is.
  std::map<std::string, std::string> node_names;
  bool strip_domain = true;
};

// Parses "host=node" entries; InvalidArgument naming the bad entry.
absl::Status ParseNodeMap(const std::vector<std::string>& entries,
                          std::map<std::string, std::string>* out);

// "pitstop F12: NON_COMM_SLOW job 4711: <summary>" cut to 200 bytes.
std::string SlurmDrainReason(const v1::Fault& fault);

// Thread-compatible: one caller at a time (the actions thread).
class SlurmNodes {
 public:
  explicit SlurmNodes(SlurmOptions options) : options_(std::move(options)) {}

  std::string NodeName(const std::string& host) const;
  // scontrol update NodeName=N State=DRAIN Reason=...
  ActionRecord Drain(const std::string& host, const v1::Fault& fault,
                     const std::atomic<bool>* cancel);
  // Resumes the node when its drain reason is this fault's; otherwise a
  // "skipped" record saying whose reason it carries.
  ActionRecord ResumeIfOurs(const std::string& host, const v1::Fault& fault,
                            const std::atomic<bool>* cancel);

 private:
  const SlurmOptions options_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_SLURM_NODES_H_
