#include "src/controller/controller_metrics.h"

#include <string>

#include "absl/strings/ascii.h"

namespace pitstop::controller {

ControllerMetrics::ControllerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()) {
  cycle_seconds_ =
      &prometheus::BuildHistogram()
           .Name("pitstop_controller_detection_cycle_seconds")
           .Help("Wall time of one detection cycle over all communicators")
           .Register(*registry_)
           .Add({},
                prometheus::Histogram::BucketBoundaries{
                    0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  collectives_joined_ =
      &prometheus::BuildCounter()
           .Name("pitstop_controller_collectives_joined_total")
           .Help("Collectives whose summaries arrived from every member")
           .Register(*registry_)
           .Add({});
  summaries_ = &prometheus::BuildCounter()
                    .Name("pitstop_controller_summaries_total")
                    .Help("Collective summaries received from agents")
                    .Register(*registry_)
                    .Add({});
  faults_ = &prometheus::BuildCounter()
                 .Name("pitstop_controller_faults_total")
                 .Help("Faults opened, by class")
                 .Register(*registry_);
  agents_ = &prometheus::BuildGauge()
                 .Name("pitstop_controller_agents_connected")
                 .Help("Agent streams currently connected")
                 .Register(*registry_)
                 .Add({});
  commands_ = &prometheus::BuildCounter()
                   .Name("pitstop_controller_agent_commands_total")
                   .Help(
                       "Commands agents ack by command_id (deep profiling, "
                       "flow plans), by state: sent, acked, resent (to a "
                       "reconnected agent), dropped (expired, superseded, "
                       "over the budget)")
                   .Register(*registry_);
  commands_unacked_ = &prometheus::BuildGauge()
                           .Name("pitstop_controller_agent_commands_unacked")
                           .Help("Commands sent to agents and not acked yet")
                           .Register(*registry_)
                           .Add({});
  refused_ = &prometheus::BuildCounter()
                  .Name("pitstop_controller_refused_total")
                  .Help(
                      "Agent input refused or dropped by a limit "
                      "(docs/reliability.md), by what")
                  .Register(*registry_);
  batches_queued_ =
      &prometheus::BuildCounter()
           .Name("pitstop_controller_ingest_batches_queued_total")
           .Help(
               "Agent batches that found the controller's lock busy (a "
               "detection cycle, a disk write, a query) and were queued "
               "instead of waiting")
           .Register(*registry_)
           .Add({});
  auth_refused_ =
      &prometheus::BuildCounter()
           .Name("pitstop_controller_auth_refused_total")
           .Help(
               "Calls refused PERMISSION_DENIED: no or unknown credentials, "
               "a role too weak, an agent speaking for another host")
           .Register(*registry_)
           .Add({});
  fenced_refused_ =
      &prometheus::BuildCounter()
           .Name("pitstop_controller_fenced_writes_refused_total")
           .Help(
               "Durable writes etcd refused because this controller's leader "
               "lease no longer held the leader key (it was deposed)")
           .Register(*registry_)
           .Add({});
  lost_in_agent_ =
      &prometheus::BuildCounter()
           .Name("pitstop_controller_records_lost_in_agent_total")
           .Help(
               "Telemetry records a node agent had read from local ranks and "
               "never delivered (it was killed), by host; from the ranks' own "
               "counters at their next agent (docs/reliability.md)")
           .Register(*registry_);
}

void ControllerMetrics::ObserveCycle(double seconds) {
  cycle_seconds_->Observe(seconds);
}
void ControllerMetrics::AddCollectivesJoined(double n) {
  collectives_joined_->Increment(n);
}
void ControllerMetrics::AddSummaries(double n) { summaries_->Increment(n); }
void ControllerMetrics::FaultOpened(v1::FaultClass c) {
  std::string name = v1::FaultClass_Name(c);
  const std::string prefix = "FAULT_CLASS_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  faults_->Add({{"class", absl::AsciiStrToLower(name)}}).Increment();
}
void ControllerMetrics::SetAgentsConnected(double n) { agents_->Set(n); }
void ControllerMetrics::Refused(const std::string& what, double n) {
  refused_->Add({{"what", what}}).Increment(n);
}
void ControllerMetrics::AddBatchesQueued(double n) {
  batches_queued_->Increment(n);
}
namespace {
void Advance(prometheus::Counter* c, std::atomic<uint64_t>* last,
             uint64_t total) {
  const uint64_t before = last->exchange(total);
  if (total > before) c->Increment(static_cast<double>(total - before));
}
}  // namespace
void ControllerMetrics::SetAuthRefused(uint64_t total) {
  Advance(auth_refused_, &auth_refused_last_, total);
}
void ControllerMetrics::SetFencedWritesRefused(uint64_t total) {
  Advance(fenced_refused_, &fenced_refused_last_, total);
}
void ControllerMetrics::SetAgentCommands(uint64_t sent, uint64_t acked,
                                         uint64_t resent, uint64_t dropped,
                                         uint64_t unacked) {
  static constexpr const char* kStates[] = {"sent", "acked", "resent",
                                            "dropped"};
  const uint64_t totals[] = {sent, acked, resent, dropped};
  for (int i = 0; i < 4; ++i) {
    Advance(&commands_->Add({{"state", kStates[i]}}), &commands_last_[i],
            totals[i]);
  }
  commands_unacked_->Set(static_cast<double>(unacked));
}
void ControllerMetrics::LostInAgent(const std::string& host, double n) {
  lost_in_agent_->Add({{"host", host}}).Increment(n);
}

}  // namespace pitstop::controller
