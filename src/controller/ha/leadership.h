// What ControllerCore asks of high availability (src/controller/ha/): is
// this controller the leader, and what to show in GetStatus. A single
// controller has no Leadership and always leads. Header only, so the core
// does not depend on etcd.
#ifndef PITSTOP_CONTROLLER_HA_LEADERSHIP_H_
#define PITSTOP_CONTROLLER_HA_LEADERSHIP_H_

#include "absl/status/status.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// Implementations are thread-safe; the core calls them with its lock held,
// so they must not block or call back into the core.
class Leadership {
 public:
  virtual ~Leadership() = default;
  // OK while this controller leads; Unavailable otherwise, whose message
  // names the leader as "leader=HOST:PORT" when one is known (clients
  // follow it: include/pitstop/leader_hint.h).
  virtual absl::Status CheckLeader() const = 0;
  // Role, leader address and fencing counters for GetStatus.
  virtual void FillStatus(v1::ControllerStatus* status) const = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_HA_LEADERSHIP_H_
