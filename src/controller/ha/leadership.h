// What the controller's services ask of high availability
// (src/controller/ha/): is this controller the leader, and what to show in
// GetStatus; and what the election asks of the controller when it wins or
// loses (LeadershipListener). A single controller has no Leadership and
// always leads. Header only, so the services do not depend on etcd.
#ifndef PITSTOP_CONTROLLER_HA_LEADERSHIP_H_
#define PITSTOP_CONTROLLER_HA_LEADERSHIP_H_

#include <string>

#include "absl/status/status.h"
#include "pitstop/leader_hint.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// Implementations are thread-safe; services call them with their own lock
// held, so they must not block or call back into a service (their own lock
// is a leaf: docs/architecture.md, "Locks").
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

// OK without Leadership (a single controller always leads).
inline absl::Status CheckLeader(const Leadership* l) {
  return l == nullptr ? absl::OkStatus() : l->CheckLeader();
}

// The leader's address as far as this controller knows ("" when none is
// known or there is no Leadership).
inline std::string KnownLeader(const Leadership* l) {
  if (l == nullptr) return "";
  v1::ControllerStatus st;
  l->FillStatus(&st);
  const absl::Status leading = l->CheckLeader();
  return leading.ok() ? st.leader() : LeaderFromMessage(leading.message());
}

// What the election (ha::HaController) calls when this controller wins or
// loses the leadership; the Controller implements it.
class LeadershipListener {
 public:
  virtual ~LeadershipListener() = default;
  // Elected: load the durable state; an error gives the leadership up.
  virtual absl::Status BecomeLeader() = 0;
  // Deposed or resigning: close agent streams, forget soft state.
  virtual void StepDown(const std::string& why) = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_HA_LEADERSHIP_H_
