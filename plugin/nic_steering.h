// The interposer's side of a flow plan's NIC set (docs/planning.md, "How a
// plan reaches NCCL", path 1; include/pitstop/nic_plan.h): before NCCL
// creates a communicator, point NCCL_TOPO_FILE at a copy of the node's
// topology in which the NICs outside the planned set are demoted, and put
// the variable back after the creation returned.
//
// Stock NCCL reads NCCL_TOPO_FILE in ncclTopoGetSystem, once per
// communicator init (and split), so the plan applies from the next
// communicator creation on; a communicator that exists keeps its NICs until
// it is rebuilt (standby migration). NCCL_IB_HCA would also restrict NICs
// but is read once per process (net plugin init): not per communicator.
//
// Thread-safety: Begin/End from any thread; the environment is
// process-wide, so while creations overlap (several threads creating
// communicators at once) the first one's choice holds until the last ends,
// and a creation that wanted another file is left unsteered (and says so).
#ifndef PITSTOP_PLUGIN_NIC_STEERING_H_
#define PITSTOP_PLUGIN_NIC_STEERING_H_

#include <cstdint>
#include <string>

namespace pitstop::plugin {

class NicSteering {
 public:
  // Before a creation: `comm_hash` as NCCL will compute it (0: not known
  // before the call, e.g. a split) and `n_ranks` (0: not known).
  static NicSteering Begin(uint64_t comm_hash, int n_ranks) noexcept;
  // After it returned; `in_progress`: a non-blocking init still running in
  // NCCL's thread, which reads the variable later: it stays set until the
  // process's next creation.
  void End(bool in_progress) noexcept;

  bool applied() const { return applied_; }
  const std::string& topo_file() const { return topo_file_; }

 private:
  bool counted_ = false;
  bool applied_ = false;
  std::string topo_file_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_NIC_STEERING_H_
