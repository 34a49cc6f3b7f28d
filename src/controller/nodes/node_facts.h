// What other services may know of a node (NodeService::NodeFacts): the
// standby pool and migration planning read it; a plain struct, so they do
// not depend on the registry itself.
#ifndef PITSTOP_CONTROLLER_NODES_NODE_FACTS_H_
#define PITSTOP_CONTROLLER_NODES_NODE_FACTS_H_

#include <cstdint>
#include <string>

namespace pitstop::controller {

struct NodeFacts {
  std::string host;
  bool standby = false;  // its agent runs with --standby
  int gpus = 0;
  std::string migration_data_plane;  // empty: none
  uint64_t last_seen_unix_ns = 0;
  uint32_t connected_ranks = 0;
  bool connected = false;  // an agent stream is open now
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_NODE_FACTS_H_
