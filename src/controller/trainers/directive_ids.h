// Directive ids of a job's trainer directives: one increasing sequence per
// job, shared by the local-SGD switch (sync/) and multi-LoRA rescheduling
// (lora/).
//
// Both policies' directives go through the same per-job slot of the agents
// (TrainerHub keeps the job's newest id) and the Python client accepts only
// ids above the highest it has seen, so a job's ids must increase across
// both policies: with a range per policy, a sync directive after a LoRA one
// would be dropped by the agent and the client. A controller that starts
// afresh (restart, new leader) learns the ids the trainers have seen from
// their reports (ReportStepsRequest.seen_directive_id) and continues above
// them, so its first directive is not dropped either.
//
// Not thread-safe: TrainerPolicyService calls the policies (and so this) under
// its mu_.
#ifndef PITSTOP_CONTROLLER_TRAINERS_DIRECTIVE_IDS_H_
#define PITSTOP_CONTROLLER_TRAINERS_DIRECTIVE_IDS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace pitstop::controller {

class DirectiveIds {
 public:
  // A trainer of `job_id` reported having seen `id` (0: none).
  void Seen(const std::string& job_id, uint64_t id) {
    if (id == 0) return;
    uint64_t& last = last_[job_id];
    last = std::max(last, id);
  }
  // The job's next id: above every id issued or seen; never 0.
  uint64_t Next(const std::string& job_id) { return ++last_[job_id]; }
  // The highest id issued or seen for the job (0: none).
  uint64_t Last(const std::string& job_id) const {
    auto it = last_.find(job_id);
    return it == last_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, uint64_t> last_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_TRAINERS_DIRECTIVE_IDS_H_
