#include "src/agent/path_steering.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

namespace pitstop::agent {
namespace {

// NCCL's algorithm index (the tuner table's) of an Algorithm; -1: none.
int AlgoIndex(v1::Algorithm a) {
  switch (a) {
    case v1::ALGORITHM_TREE:
      return tuner::kAlgoTree;
    case v1::ALGORITHM_RING:
      return tuner::kAlgoRing;
    case v1::ALGORITHM_COLLNET_DIRECT:
      return tuner::kAlgoCollNetDirect;
    case v1::ALGORITHM_COLLNET_CHAIN:
      return tuner::kAlgoCollNetChain;
    case v1::ALGORITHM_NVLS:
      return tuner::kAlgoNvls;
    case v1::ALGORITHM_NVLS_TREE:
      return tuner::kAlgoNvlsTree;
    case v1::ALGORITHM_PAT:
      return tuner::kAlgoPat;
    default:
      return -1;
  }
}

}  // namespace

std::vector<tuner::Steering> SteeringOf(
    const std::map<std::string, v1::PathDirective>& directives) {
  std::map<std::pair<int, int>, int> shapes;
  for (const auto& [job, d] : directives) {
    for (const v1::CommSteering& c : d.comms()) {
      ++shapes[{c.n_ranks(), c.n_nodes()}];
    }
  }
  std::vector<tuner::Steering> out;
  for (const auto& [job, d] : directives) {
    for (const v1::CommSteering& c : d.comms()) {
      if (!c.degraded() || c.comm_hash() == 0) continue;
      tuner::Steering s;
      s.comm_id = c.comm_hash();
      s.plan_epoch = d.epoch();
      s.n_ranks = static_cast<uint32_t>(std::max(0, c.n_ranks()));
      s.n_nodes = static_cast<uint32_t>(std::max(0, c.n_nodes()));
      s.max_channels = static_cast<int32_t>(c.max_channels());
      const int algo = AlgoIndex(c.algorithm());
      if (algo >= 0) s.algo_mask = 1u << algo;
      if (shapes[{c.n_ranks(), c.n_nodes()}] == 1) {
        s.flags |= tuner::kFlagShapeUnique;
      }
      out.push_back(s);
    }
  }
  return out;
}

std::vector<nicplan::NicPlanEntry> NicPlanOf(
    const std::map<std::string, v1::PathDirective>& directives) {
  std::map<std::pair<int, int>, int> shapes;
  for (const auto& [job, d] : directives) {
    for (const v1::CommSteering& c : d.comms()) {
      ++shapes[{c.n_ranks(), c.n_nodes()}];
    }
  }
  std::vector<nicplan::NicPlanEntry> out;
  for (const auto& [job, d] : directives) {
    for (const v1::CommSteering& c : d.comms()) {
      if (c.nic_indices().empty()) continue;
      nicplan::NicPlanEntry e;
      e.comm_id = c.comm_hash();
      e.job = job;
      e.epoch = d.epoch();
      e.n_ranks = c.n_ranks();
      e.n_nodes = c.n_nodes();
      e.unique_shape = shapes[{c.n_ranks(), c.n_nodes()}] == 1;
      e.nics.assign(c.nic_indices().begin(), c.nic_indices().end());
      std::sort(e.nics.begin(), e.nics.end());
      e.nics.erase(std::unique(e.nics.begin(), e.nics.end()), e.nics.end());
      out.push_back(std::move(e));
    }
  }
  return out;
}

PathSteering::PathSteering(std::string table_path)
    : table_path_(tuner::ResolveTablePath(table_path)),
      nic_plan_path_(nicplan::ResolveNicPlanPath("", table_path_)) {}

std::string PathSteering::table_path() const { return table_path_; }

uint64_t PathSteering::epoch(const std::string& job) const {
  MutexLock lock(&mu_);
  auto it = directives_.find(job);
  return it == directives_.end() ? 0 : it->second.epoch();
}

absl::Status PathSteering::OnDirective(const v1::PathDirective& d) {
  MutexLock lock(&mu_);
  auto it = directives_.find(d.job_id());
  if (it != directives_.end() && it->second.epoch() >= d.epoch()) {
    return absl::OkStatus();
  }
  std::map<std::string, v1::PathDirective> next = directives_;
  next[d.job_id()] = d;
  const std::vector<tuner::Steering> entries = SteeringOf(next);
  std::string error;
  if (writer_ == nullptr) {
    writer_ = tuner::TunerTableWriter::Create(table_path_,
                                              tuner::kDefaultCapacity, &error);
    if (writer_ == nullptr) {
      return absl::InternalError(
          absl::StrCat("tuner table ", table_path_, ": ", error));
    }
  }
  if (!writer_->Replace(entries, &error)) {
    return absl::InternalError(
        absl::StrCat("tuner table ", table_path_, ": ", error));
  }
  const std::vector<nicplan::NicPlanEntry> nics = NicPlanOf(next);
  if (!nicplan::WriteNicPlan(nic_plan_path_, nics, &error)) {
    return absl::InternalError(absl::StrCat("NIC plan: ", error));
  }
  directives_ = std::move(next);
  Logger("agent")->info(
      "flow plan of job {} epoch {} applied: {} communicators steered in {} "
      "({})",
      d.job_id(), d.epoch(), entries.size(), table_path_, d.reason());
  return absl::OkStatus();
}

}  // namespace pitstop::agent
