// A FlowPlan as bytes, for the controller's store (FaultStore::SavePlan,
// SQLite or etcd): compact JSON, so a stored plan can be read with sqlite3
// or etcdctl. Link and GPU ids are the fabric's (fabric.h): a plan is only
// meaningful with the fabric it was made for.
//
//   {"epoch":3,"paths":[{"links":[4,9],"src_gpu":0,"dst_gpu":8,
//     "src_port":49153,"split":[[5,10]],"split_ports":[49200]}, ...]}
//
// Thread-compatible (pure functions).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_PLAN_CODEC_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_PLAN_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/c4p/planner.h"

namespace pitstop::c4p {

std::string EncodePlan(const FlowPlan& plan);
// InvalidArgument naming the path of the bad field ("paths[3].links[1]")
// for bytes EncodePlan did not produce.
absl::StatusOr<FlowPlan> DecodePlan(absl::string_view bytes);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_PLAN_CODEC_H_
