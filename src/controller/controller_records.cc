// ControllerCore: records lost in killed agents (record_loss.h).
#include <algorithm>

#include "pitstop/logging.h"
#include "src/controller/agent_limits.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

void ControllerCore::AccountRecords(const std::string& host, NodeEntry* node,
                                    const v1::ConnectRequest& batch) {
  const std::string& agent_id = node->registration.agent_id();
  const int n = std::min(batch.process_records_size(),
                         RecordLossLedger::kMaxEntriesPerBatch);
  uint64_t lost = 0;
  for (int i = 0; i < n; ++i) {
    const v1::ProcessRecords& rec = batch.process_records(i);
    if (rec.records_before() > kMaxCounter ||
        rec.records_read() > kMaxCounter ||
        rec.records_produced() > kMaxCounter ||
        rec.records_dropped() > kMaxCounter) {
      CountRefused("counters", &input_.counters_refused);
      continue;
    }
    uint64_t l = 0;
    if (!node->records.Observe(agent_id, rec, &process_budget_, &l) &&
        rec.counters_start_unix_ns() != 0 && process_budget_ <= 0) {
      CountRefused("processes", &input_.processes_refused);
      continue;
    }
    lost += l;
  }
  if (lost == 0) return;
  if (options_.metrics) options_.metrics->LostInAgent(host, lost);
  Logger("controller")
      ->warn(
          "agent {}: {} telemetry records were read by an earlier agent "
          "(killed?) and never delivered, said the ranks reconnecting to "
          "agent {}; {} lost in agents on this host so far",
          host, lost, agent_id, node->records.totals().lost_in_agent);
}

}  // namespace pitstop::controller
