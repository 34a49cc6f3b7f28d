// Rebuilder: directives, PREPARE, COMMIT and ABORT (the exporter thread's
// side). The trainer thread's side (poll, switch, leave, join) is in
// rebuild_switch.cc.
#include "plugin/rebuild.h"

#include <cstdio>
#include <utility>

#include "pitstop/nic_plan.h"

namespace pitstop::plugin {
namespace {

uint64_t HashOfId(const std::string& id) {
  return nicplan::CommHashOfUniqueId(id.data(), static_cast<int>(id.size()));
}

std::string Hex(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

const char* RoleName(MigrationRole r) {
  switch (r) {
    case kRoleStayer:
      return "stayer";
    case kRoleLeaver:
      return "leaver";
    case kRoleJoiner:
      return "joiner";
    default:
      return "unspecified";
  }
}

// An answer to a directive of no current migration.
MigrationAck AckFor(const MigrationDirective& d, bool ok,
                    const std::string& error) {
  MigrationAck a;
  a.migration_id = d.migration_id;
  a.epoch = d.epoch;
  a.phase = d.phase;
  a.ok = ok;
  a.error = error;
  a.global_rank = d.global_rank;
  return a;
}

std::string MakeIdsRefusal(MigrationRole role) {
  return std::string("PHASE_MAKE_IDS is for the joiner, this rank is a ") +
         RoleName(role);
}

}  // namespace

Rebuilder::Rebuilder(CommTable* table, const NcclOps& ops,
                     std::string ops_missing, std::function<uint64_t()> now_ns)
    : table_(table),
      ops_(ops),
      ops_missing_(std::move(ops_missing)),
      now_ns_(std::move(now_ns)) {}

Rebuilder::~Rebuilder() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    task_cv_.SignalAll();
  }
  if (worker_.joinable()) worker_.join();
}

void Rebuilder::OnDirectives(
    std::vector<MigrationDirective>* directives) noexcept {
  try {
    MutexLock lock(&mu_);
    for (const MigrationDirective& d : *directives) HandleLocked(d);
  } catch (...) {
    // Out of memory: the directives are lost; the agent repeats them.
  }
}

void Rebuilder::HandleLocked(const MigrationDirective& d) {
  if (!ops_missing_.empty()) {
    RefuseLocked(d, "NCCL lacks " + ops_missing_ + "; cannot migrate");
    return;
  }
  const Migration* m = current_.get();
  if ((m == nullptr || m->id != d.migration_id || m->epoch != d.epoch) &&
      !BeginLocked(d)) {
    return;
  }
  if (AnsweredLocked(d.phase)) return;
  switch (d.phase) {
    case kPhaseMakeIds:
      MakeIdsLocked(d);
      break;
    case kPhasePrepare:
      PrepareLocked(d);
      break;
    case kPhaseSwitchAt:
      ArmLocked(d);
      break;
    case kPhaseCommit:
      CommitLocked();
      break;
    case kPhaseAbort:
      AbortLocked(d.reason);
      break;
    default:
      break;
  }
}

bool Rebuilder::BeginLocked(const MigrationDirective& d) {
  const Migration* m = current_.get();
  // A migration that only made ids holds nothing of NCCL's: one that
  // follows it (its controller gave up on it) may replace it.
  const bool busy = m != nullptr && m->stage != Stage::kIdsMade &&
                    m->stage != Stage::kCommitted &&
                    m->stage != Stage::kAborted && m->stage != Stage::kFailed;
  if (busy) {
    RefuseLocked(d, "migration " + m->id + " epoch " +
                        std::to_string(m->epoch) + " is in progress");
    return false;
  }
  if (d.phase == kPhaseAbort) {
    // Never prepared here: nothing to undo.
    outbox_.push_back(AckFor(d, true, ""));
    return false;
  }
  if (d.phase == kPhaseMakeIds && d.role != kRoleJoiner) {
    RefuseLocked(d, MakeIdsRefusal(d.role));  // and keeps no state for it
    return false;
  }
  if (d.phase != kPhasePrepare && d.phase != kPhaseMakeIds) {
    RefuseLocked(d, "no PREPARE of this migration reached this rank");
    return false;
  }
  current_ = std::make_unique<Migration>();
  current_->id = d.migration_id;
  current_->epoch = d.epoch;
  current_->role = d.role;
  current_->global_rank = d.global_rank;
  current_->serial = ++serial_;
  return true;
}

bool Rebuilder::AnsweredLocked(int phase) {
  Migration* m = current_.get();
  if (m->seen.count(phase) != 0) {
    // A repeat: answered again, never redone (pending: answered once done).
    if (auto it = m->answers.find(phase); it != m->answers.end()) {
      outbox_.push_back(it->second);
    }
    return true;
  }
  m->seen.insert(phase);
  if (auto it = m->answers.find(phase); it != m->answers.end()) {
    outbox_.push_back(it->second);  // produced before the directive came
    return true;
  }
  return false;
}

void Rebuilder::RefuseLocked(const MigrationDirective& d,
                             const std::string& error) {
  outbox_.push_back(AckFor(d, false, error));
}

void Rebuilder::AnswerLocked(int phase, bool ok, const std::string& error) {
  PostLocked(AckLocked(phase, ok, error));
}

MigrationAck Rebuilder::AckLocked(int phase, bool ok,
                                  const std::string& error) const {
  const Migration* m = current_.get();
  MigrationAck a;
  a.migration_id = m->id;
  a.epoch = m->epoch;
  a.phase = static_cast<MigrationPhase>(phase);
  a.ok = ok;
  a.error = error;
  a.global_rank = m->global_rank;
  a.progress_seq = ProgressLocked();
  return a;
}

void Rebuilder::PostLocked(MigrationAck a) {
  Migration* m = current_.get();
  const int phase = a.phase;
  m->answers[phase] = a;
  if (m->seen.count(phase) != 0) outbox_.push_back(std::move(a));
}

uint64_t Rebuilder::ProgressLocked() const {
  const Migration* m = current_.get();
  // Node failure: what the controller needs is where each stayer failed.
  if (m != nullptr && m->from_replica && m->role == kRoleStayer) {
    return failed_step_;
  }
  return m != nullptr && m->switch_handle != nullptr
             ? table_->Enqueued(m->switch_handle)
             : 0;
}

bool Rebuilder::PlanLocked(const MigrationDirective& d, std::string* error) {
  Migration* m = current_.get();
  const bool joiner = d.role == kRoleJoiner;
  for (const MigrationDirective::Comm& c : d.comms) {
    Plan p;
    p.old_hash = c.old_comm_hash;
    p.new_id = c.new_comm_id;
    p.new_hash = HashOfId(c.new_comm_id);
    p.handle = table_->FindByCommHash(c.old_comm_hash);
    if (p.handle == nullptr ||
        !table_->Membership(p.handle, &p.rank, &p.n_ranks)) {
      *error = "no virtualised communicator with hash " + Hex(c.old_comm_hash) +
               " in this process";
      return false;
    }
    if (joiner != table_->IsSandbox(p.handle)) {
      *error = std::string("communicator ") + Hex(c.old_comm_hash) +
               (joiner ? " is a live one, not a joiner's sandbox"
                       : " is a sandbox (PITSTOP_MIGRATION_ROLE=joiner) but "
                         "the directive says " +
                             std::string(RoleName(d.role)));
      return false;
    }
    m->plans.push_back(std::move(p));
  }
  const uint64_t switch_hash = d.switch_comm_hash != 0 ? d.switch_comm_hash
                               : d.comms.empty()       ? 0
                                                 : d.comms[0].old_comm_hash;
  m->switch_handle = table_->FindByCommHash(switch_hash);
  if (d.role != kRoleStayer && d.transfer_comm_id.size() != kCommIdBytes) {
    *error = std::string("a ") + RoleName(d.role) +
             " needs the transfer communicator's id";
    return false;
  }
  if (d.from_replica && d.role == kRoleLeaver) {
    *error = "a node-failure migration (from_replica) has no live leaver";
    return false;
  }
  m->transfer_id = d.transfer_comm_id;
  m->from_replica = d.from_replica;
  m->replica = d.from_replica && d.role == kRoleStayer &&
               d.transfer_comm_id.size() == kCommIdBytes;
  return true;
}

void Rebuilder::PrepareLocked(const MigrationDirective& d) {
  Migration* m = current_.get();
  if (m->stage == Stage::kFailed || m->stage == Stage::kAborted) {
    AnswerLocked(kPhasePrepare, false, m->failure);  // ended after MAKE_IDS
    return;
  }
  std::string error;
  if (d.role != m->role) {
    error = std::string("PREPARE says ") + RoleName(d.role) +
            ", PHASE_MAKE_IDS said " + RoleName(m->role);
  }
  if (!error.empty() || d.role == kRoleUnspecified || !PlanLocked(d, &error)) {
    FailLocked(kPhasePrepare, error.empty() ? "no role" : error);
    return;
  }
  if (d.role != kRoleLeaver) {
    for (Plan& p : m->plans) {
      if (!p.fresh.StartInit(ops_, p.new_id, p.rank, p.n_ranks, &error)) {
        FailLocked(kPhasePrepare, error);
        return;
      }
    }
  }
  // The sender (the leaver, or a replica) is transfer rank 0.
  if ((d.role != kRoleStayer || m->replica) &&
      !m->transfer.StartInit(ops_, m->transfer_id,
                             d.role == kRoleJoiner ? 1 : 0, 2, &error)) {
    FailLocked(kPhasePrepare, "transfer communicator: " + error);
    return;
  }
  m->stage = Stage::kPreparing;
  // A recovering trainer is in Recover, not polling: Resume switches it.
  tracking_.store(m->switch_handle != nullptr && !m->from_replica);
  TickLocked();
}

// A real NCCL id holds the address of the process that made it, and that
// process must live through the init: the joiner does, the controller is
// not a member. The ids go out in the answer only; PREPARE brings them
// back to every member like ids made anywhere else.
void Rebuilder::MakeIdsLocked(const MigrationDirective& d) {
  Migration* m = current_.get();
  if (d.role != kRoleJoiner || m->role != kRoleJoiner) {
    AnswerLocked(kPhaseMakeIds, false,
                 MakeIdsRefusal(d.role != kRoleJoiner ? d.role : m->role));
    return;
  }
  if (m->seen.count(kPhasePrepare) != 0) {
    AnswerLocked(kPhaseMakeIds, false,
                 "PHASE_MAKE_IDS after PREPARE: the ids are in use already");
    return;
  }
  MigrationAck a = AckLocked(kPhaseMakeIds, true, "");
  std::string error;
  for (size_t i = 0; d.make_comm_ids && i < d.comms.size(); ++i) {
    a.made_comms.push_back({d.comms[i].old_comm_hash, ""});
    if (!MakeId(&a.made_comms.back().new_comm_id, &error)) break;
  }
  if (error.empty()) MakeId(&a.made_transfer_id, &error);
  if (!error.empty()) {
    FailLocked(kPhaseMakeIds, error);
    return;
  }
  m->stage = Stage::kIdsMade;
  PostLocked(std::move(a));
}

// ncclGetUniqueId waits on no peer (it opens this process's bootstrap
// root), so the exporter thread may make it under the lock.
bool Rebuilder::MakeId(std::string* id, std::string* error) const {
  NcclUniqueId u;
  const NcclResult r = ops_.get_unique_id(&u);
  if (r != abi::kNcclSuccess) {
    *error = "ncclGetUniqueId failed: " + DescribeNcclError(ops_, nullptr, r);
    return false;
  }
  id->assign(u.internal, sizeof(u.internal));
  return true;
}

void Rebuilder::Tick() noexcept {
  try {
    MutexLock lock(&mu_);
    TickLocked();
  } catch (...) {
  }
}

void Rebuilder::TickLocked() {
  Migration* m = current_.get();
  if (m == nullptr || m->stage != Stage::kPreparing) return;
  std::string error;
  bool all_ready = true;
  auto poll = [&](OwnedComm& c) {
    const OwnedComm::State s = c.Poll(ops_, &error);
    if (s == OwnedComm::State::kEmpty) return true;
    all_ready &= s == OwnedComm::State::kReady;
    return s != OwnedComm::State::kFailed;
  };
  for (Plan& p : m->plans) {
    if (!poll(p.fresh)) {
      FailLocked(kPhasePrepare, error);
      return;
    }
  }
  if (!poll(m->transfer)) {
    FailLocked(kPhasePrepare, "transfer communicator: " + error);
    return;
  }
  if (!all_ready) return;
  // Node failure: READY carries the step that failed here, so it waits
  // for the trainer to say which (Recover).
  if (m->from_replica && m->role == kRoleStayer && !recovering_) return;
  m->stage = Stage::kReady;
  AnswerLocked(kPhasePrepare, true, "");
  cv_.SignalAll();
}

void Rebuilder::ArmLocked(const MigrationDirective& d) {
  Migration* m = current_.get();
  if (m->stage != Stage::kReady) {
    AnswerLocked(kPhaseSwitchAt, false, "SWITCH_AT before this rank was READY");
    return;
  }
  m->switch_seq = d.switch_seq;
  if (m->role == kRoleJoiner) {
    m->stage = Stage::kSwitching;  // SWITCHED comes from the join
    cv_.SignalAll();
    return;
  }
  if (m->from_replica) {
    ArmRedoLocked();
    return;
  }
  if (d.switch_comm_hash != 0) {
    m->switch_handle = table_->FindByCommHash(d.switch_comm_hash);
  }
  if (m->switch_handle == nullptr) {
    FailLocked(kPhaseSwitchAt, "no virtualised communicator with hash " +
                                   Hex(d.switch_comm_hash));
    return;
  }
  // All ranks switch at the same boundary only if none has passed it: a
  // rank whose last boundary (or whose count now) is past the point missed
  // it.
  const uint64_t now = table_->Enqueued(m->switch_handle);
  if ((m->polled && m->last_poll_enqueued >= d.switch_seq) ||
      now > d.switch_seq) {
    FailLocked(kPhaseSwitchAt, "this rank is past the switch point (" +
                                   std::to_string(now) +
                                   " operations enqueued, switch at " +
                                   std::to_string(d.switch_seq) + ")");
    return;
  }
  m->stage = Stage::kSwitching;
  tracking_.store(true);
}

// Node failure: switch_seq is the step every rank redoes, the lowest that
// failed anywhere, so never past this rank's own (its trainer keeps the
// state of the steps up to the one that failed).
void Rebuilder::ArmRedoLocked() {
  Migration* m = current_.get();
  if (m->switch_seq > failed_step_) {
    FailLocked(kPhaseSwitchAt, "redo step " + std::to_string(m->switch_seq) +
                                   " is past the step that failed here (" +
                                   std::to_string(failed_step_) + ")");
    return;
  }
  m->stage = Stage::kSwitching;
  cv_.SignalAll();
}

void Rebuilder::CommitLocked() {
  Migration* m = current_.get();
  if (m->stage != Stage::kSwitched) {
    AnswerLocked(kPhaseCommit, false, "COMMIT before this rank switched");
    return;
  }
  m->stage = Stage::kCommitted;
  if (m->role != kRoleStayer) {
    AnswerLocked(kPhaseCommit, true, "");
    return;
  }
  // The old communicators: no handle reaches them since the swap, so no
  // operation is outstanding; their finalize is a barrier with the other
  // old members, hence the worker. After a node failure they are broken
  // (a member is dead): aborted, never finalized.
  auto olds = std::make_shared<std::vector<OwnedComm>>();
  for (Plan& p : m->plans) olds->push_back(std::move(p.old));
  RunLater([this, olds, id = m->id, epoch = m->epoch,
            broken = m->from_replica] {
    std::string error;
    for (OwnedComm& c : *olds) {
      const NcclResult r = broken ? c.Abort(ops_) : c.FinalizeAndDestroy(ops_);
      if (r != abi::kNcclSuccess && error.empty()) {
        error = "freeing an old communicator: " +
                DescribeNcclError(ops_, nullptr, r);
      }
    }
    MutexLock lock(&mu_);
    if (current_ != nullptr && current_->id == id && current_->epoch == epoch) {
      AnswerLocked(kPhaseCommit, error.empty(), error);
    }
  });
}

void Rebuilder::AbortLocked(const std::string& reason) {
  Migration* m = current_.get();
  if (m->stage == Stage::kSwitched || m->stage == Stage::kCommitted) {
    // The handles run on the new communicators: going back needs the old
    // ones' members, which the leaver no longer is.
    AnswerLocked(kPhaseAbort, false,
                 "this rank already switched; a migration cannot be undone "
                 "after the switch");
    return;
  }
  FailLocked(-1, "migration aborted" + (reason.empty() ? "" : ": " + reason));
  m->stage = Stage::kAborted;
  AnswerLocked(kPhaseAbort, true, "");
}

void Rebuilder::FailLocked(int phase, const std::string& error) {
  Migration* m = current_.get();
  m->stage = Stage::kFailed;
  m->failure = error;
  tracking_.store(false);
  auto live = std::make_shared<std::vector<OwnedComm>>();
  for (Plan& p : m->plans) {
    if (p.fresh.live()) live->push_back(std::move(p.fresh));
    p.fresh = OwnedComm();
  }
  // A transfer in the trainer's hands is aborted by it when it returns.
  if (m->transfer.live() && !m->transfer_busy) {
    live->push_back(std::move(m->transfer));
    m->transfer = OwnedComm();
  }
  if (!live->empty()) {
    RunLater([this, live] {
      for (OwnedComm& c : *live) c.Abort(ops_);
    });
  }
  if (phase >= 0) AnswerLocked(phase, false, error);
  cv_.SignalAll();
}

void Rebuilder::TakeAcks(std::vector<MigrationAck>* out) noexcept {
  try {
    MutexLock lock(&mu_);
    for (MigrationAck& a : outbox_) out->push_back(std::move(a));
    outbox_.clear();
  } catch (...) {
  }
}

void Rebuilder::RunLater(std::function<void()> task) {
  tasks_.push_back(std::move(task));
  if (!worker_.joinable()) {
    worker_ = std::thread([this] { WorkerLoop(); });
  }
  task_cv_.SignalAll();
}

void Rebuilder::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (tasks_.empty() && !stopping_) {
        task_cv_.WaitForNs(&mu_, 1000000000ull);
      }
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (...) {
      // Nothing may escape a thread inside the training process.
    }
  }
}

}  // namespace pitstop::plugin
