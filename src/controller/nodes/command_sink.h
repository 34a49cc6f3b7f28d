// Where the controller writes commands for one agent stream (the gRPC
// reactor of AgentLink.Connect implements it; tests record what they get).
#ifndef PITSTOP_CONTROLLER_NODES_COMMAND_SINK_H_
#define PITSTOP_CONTROLLER_NODES_COMMAND_SINK_H_

#include "absl/status/status.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

// Called with NodeService's lock held: Send() and Close() must not block
// (implementations queue) or call any service; their own lock is a leaf.
class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual void Send(const v1::ConnectResponse& response) = 0;
  // Ends the stream with `why` (its session was superseded or it went
  // silent), so the agent notices and reconnects.
  virtual void Close(const absl::Status& why) { (void)why; }
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_COMMAND_SINK_H_
