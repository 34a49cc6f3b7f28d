// Comm-hang localisation without proxy steps: which proxy ops of the stuck
// collective have stopped and which have not. NCCL samples the activation
// mask when an op is issued, so deep profiling asked after a hang never
// covers the stuck op; but every ProxyOp record is there, and the stalled
// connection's ops (the sender's send and the receiver's recv) never stop.
// Internal to pitstop_detect.
#ifndef PITSTOP_CONTROLLER_DETECT_OPEN_PROXY_OPS_H_
#define PITSTOP_CONTROLLER_DETECT_OPEN_PROXY_OPS_H_

#include <cstdint>
#include <vector>

#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

// One directed connection src -> dst (comm ranks) whose proxy ops for
// `seq` stayed open while others of the same op stopped.
struct OpenLink {
  int32_t src = 0;
  int32_t dst = 0;
  int sides_open = 0;     // 1: send or recv op open; 2: both
  uint64_t bytes = 0;     // least in-flight bytes seen on it (tiebreak)
  uint32_t channels = 0;  // channels with an open op
};

// Over the ranks of `fp` whose oldest incomplete op is `seq`: groups the
// reported proxy ops by directed connection (a send op of rank r to p and a
// recv op of p from r are the two sides of r -> p) and returns the
// connections with the most open sides, least bytes first among equals,
// when they stand out: some op of `seq` stopped, and the returned
// connections are at most half of all connections reported. Empty
// otherwise. Ops without a record count as open when the rank reported
// the other direction on that channel and exactly one rank lacks a send and
// one a recv there (the plugin records a ProxyOp only when it stops): that
// pair is the open connection. `open_total` / `conn_total` (may be null) get
// the counts of connections with an open side and of all connections reported.
std::vector<OpenLink> OpenProxyLinks(const FuncProgress& fp, int64_t seq,
                                     int* open_total, int* conn_total);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_OPEN_PROXY_OPS_H_
