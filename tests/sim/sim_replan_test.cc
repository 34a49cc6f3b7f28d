// End to end, the live flow plan (docs/planning.md): the ci-replan scenario
// runs 8 emulated ranks on 4 agents and a controller started with --fabric;
// node0 <-> node1 slows mid-run. The controller must plan the job's flows
// once the connections are learned, re-plan when the COMM_SLOW verdict
// names the slow connection (an epoch whose flows crossed its path), and
// every agent must ack the newest epoch it was sent (it acks after writing
// its tuner table, which the test reads back); after the operator marks
// both spines degraded, each table caps the job's communicator.
#include <iostream>

#include "gtest/gtest.h"
#include "src/sim/runner.h"
#include "src/sim/scenario.h"

namespace pitstop::sim {
namespace {

TEST(SimReplan, LinkDegradesAndTheControllerReplansLive) {
  auto s = BuiltinScenario("ci-replan");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_FALSE(s->fabric.empty());
  RunOptions opts;
  opts.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  opts.progress_period_s = 5;
  opts.drain_s = 3;  // the last directive's ack comes with a batch
  auto r = RunScenario(*s, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const std::string& e : (*r)->rank_errors) ADD_FAILURE() << e;
  const RunResult& run = **r;

  // The slow link was found (the trigger of the re-plan).
  bool comm_slow = false;
  for (const ObservedFault& f : run.faults) {
    comm_slow |= f.fault.fault_class() == v1::FAULT_CLASS_COMM_SLOW;
  }
  EXPECT_TRUE(comm_slow) << "no COMM_SLOW verdict";

  // A first plan from the learned connections, then a re-plan after the
  // onset that moved flows.
  ASSERT_FALSE(run.plan_epochs.empty()) << "the controller made no plan";
  EXPECT_GT(run.plan_epochs.front().network_flows, 0u);
  // After the onset, a re-plan triggered by the verdict: the marked path
  // was crossed by the connection's flow, and the flow moved off the
  // suspect links (the other spine is healthy until the operator's marks).
  const double onset_s = s->faults[0].at_s;
  bool replanned_after_onset = false;
  uint32_t moved_off = 0;
  for (const PlanEpoch& e : run.plan_epochs) {
    if (e.at_s >= onset_s && e.at_s < s->link_marks[0].at_s &&
        e.crossing_flows > 0) {
      replanned_after_onset = true;
      moved_off += e.moved_off_degraded;
      std::cerr << "re-plan after the onset: epoch " << e.epoch << ", "
                << e.crossing_flows << " crossing, " << e.moved_flows
                << " moved, " << e.moved_off_degraded
                << " off every degraded link\n";
    }
  }
  EXPECT_GE(run.final_plan.epoch(), 3u);
  EXPECT_TRUE(replanned_after_onset) << "no re-plan between onset and marks";
  EXPECT_GE(moved_off, 1u)
      << "the verdict's re-plan moved no flow off the suspect links";

  // Every host of the job got and acked the newest epoch sent to it; its
  // table exists (written before the ack) and names no other epoch.
  ASSERT_EQ(run.final_plan.hosts_size(), s->nodes);
  for (const v1::FlowPlanHost& h : run.final_plan.hosts()) {
    EXPECT_GT(h.epoch_sent(), 0u) << h.host();
    EXPECT_EQ(h.epoch_acked(), h.epoch_sent()) << h.host();
  }
  // After the operator marked both spines, every inter-node path is
  // degraded: each agent's table caps the job's communicator.
  bool marked_epoch = false;
  for (const PlanEpoch& e : run.plan_epochs) {
    marked_epoch |= e.at_s >= s->link_marks[0].at_s && e.crossing_flows > 0;
  }
  EXPECT_TRUE(marked_epoch) << "no re-plan after the operator's marks";
  ASSERT_EQ(run.tuner_tables.size(), static_cast<size_t>(s->nodes));
  for (const TunerTableView& t : run.tuner_tables) {
    EXPECT_EQ(t.error, "") << t.host;
    EXPECT_FALSE(t.entries.empty()) << t.host;
    for (const tuner::Steering& e : t.entries) {
      EXPECT_LE(e.plan_epoch, run.final_plan.epoch()) << t.host;
      EXPECT_GT(e.max_channels, 0) << t.host;
    }
  }
}

}  // namespace
}  // namespace pitstop::sim
