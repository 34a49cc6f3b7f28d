// Trainer step reports as an agent forwards them, for controller tests of
// the sync policy (sync_policy_test.cc, migration/actions_ctl_test.cc).
#ifndef PITSTOP_TESTS_CONTROLLER_TRAINERS_TRAINER_BATCHES_H_
#define PITSTOP_TESTS_CONTROLLER_TRAINERS_TRAINER_BATCHES_H_

#include <cstdint>
#include <string>

#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller::testing {

// One batch of `job`'s two synchronous trainers, 5 steps each from
// step + 1 at 100 ms per step: rank 0 waits 50 ms of each in
// communication, rank 1 none (it is the slow one the other waits for).
inline v1::ConnectRequest SlowRankOneBatch(const std::string& job,
                                           uint64_t step) {
  v1::ConnectRequest batch;
  for (int r = 0; r < 2; ++r) {
    v1::ReportStepsRequest* t = batch.add_trainer_reports();
    t->mutable_trainer()->set_job_id(job);
    t->mutable_trainer()->set_global_rank(r);
    t->mutable_trainer()->set_world_size(2);
    t->set_current_mode(v1::SYNC_MODE_SYNC);
    for (uint64_t i = 1; i <= 5; ++i) {
      v1::StepReport* s = t->add_steps();
      s->set_step(step + i);
      s->set_wall_ns(100'000'000);
      v1::PhaseTime* p = s->add_phases();
      p->set_phase(v1::TRAIN_PHASE_COMMUNICATION);
      p->set_duration_ns(r == 1 ? 0 : 50'000'000);
    }
  }
  return batch;
}

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_TRAINERS_TRAINER_BATCHES_H_
