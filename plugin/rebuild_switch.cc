// Rebuilder: the trainer thread's side — state registration, the switch at
// an iteration boundary (stayer: swap; leaver: send the state and leave) and
// the joiner's join. Directives, PREPARE, COMMIT and ABORT: rebuild.cc.
#include <algorithm>
#include <cstring>
#include <utility>

#include "plugin/rebuild.h"

namespace pitstop::plugin {

int Rebuilder::RegisterState(const char* name, void* data, uint64_t bytes,
                             std::string* error) noexcept {
  if (name == nullptr || name[0] == '\0' || (data == nullptr && bytes != 0)) {
    *error = "pitstop_trainer_register_state: needs a name and a buffer";
    return kError;
  }
  try {
    MutexLock lock(&mu_);
    for (StateBuffer& b : state_) {
      if (b.name == name) {  // the same state, moved: the latest place wins
        b.data = data;
        b.bytes = bytes;
        return 0;
      }
    }
    state_.push_back(StateBuffer{name, data, bytes});
    return 0;
  } catch (...) {
    *error = "out of memory registering state";
    return kError;
  }
}

int Rebuilder::Poll(uint64_t next_step, std::string* error) noexcept {
  if (!tracking_.load(std::memory_order_relaxed)) return kContinue;
  try {
    MutexLock lock(&mu_);
    Migration* m = current_.get();
    if (m == nullptr || m->switch_handle == nullptr) return kContinue;
    // What the switch point is compared with: the count at a boundary.
    m->last_poll_enqueued = table_->Enqueued(m->switch_handle);
    m->polled = true;
    if (m->stage != Stage::kSwitching || m->role == kRoleJoiner ||
        m->last_poll_enqueued < m->switch_seq) {
      return kContinue;
    }
    tracking_.store(false);
    return m->role == kRoleStayer ? SwitchLocked(error)
                                  : LeaveLocked(next_step, error);
  } catch (...) {
    *error = "out of memory at the migration switch";
    return kError;
  }
}

// Stayer at the boundary: the trainer's thread is here, not in a
// collective, so every swap finds its handle idle (a refusal means another
// thread is using it: the migration fails rather than wait).
int Rebuilder::SwitchLocked(std::string* error) {
  if (!SwapAllLocked(false, error)) return kError;
  current_->stage = Stage::kSwitched;
  AnswerLocked(kPhaseSwitchAt, true, "");
  return kContinue;
}

bool Rebuilder::SwapAllLocked(bool restart_counts, std::string* error) {
  Migration* m = current_.get();
  for (Plan& p : m->plans) {
    const SwapOutcome o =
        table_->Swap(p.handle, p.fresh.comm(), p.rank, p.n_ranks);
    if (o.code != SwapCode::kOk) {
      *error = "switch refused: " + o.error;
      FailLocked(kPhaseSwitchAt, *error);
      return false;
    }
    // The handle owns the new communicator now (the application frees it);
    // the old one is ours until COMMIT.
    p.fresh = OwnedComm();
    p.old = OwnedComm::Adopt(static_cast<NcclComm>(o.old_comm));
    table_->SetCommHash(p.handle, p.new_hash);
    if (restart_counts) table_->ResetEnqueued(p.handle);
  }
  return true;
}

// Leaver at the boundary: sends the registered state to the joiner (the
// lock is released meanwhile: it waits on the joiner), then leaves.
int Rebuilder::LeaveLocked(uint64_t next_step, std::string* error) {
  Migration* m = current_.get();
  std::vector<uint64_t> enqueued;
  for (const Plan& p : m->plans) enqueued.push_back(table_->Enqueued(p.handle));
  OwnedComm done;
  if (!SendStateLocked(next_step, enqueued, &done, error)) return kError;
  current_->stage = Stage::kSwitched;
  AnswerLocked(kPhaseSwitchAt, true, "");
  // Both ends finalize the transfer communicator right after the exchange
  // (a barrier between the two of them).
  mu_.Unlock();
  done.FinalizeAndDestroy(ops_);
  mu_.Lock();
  return kLeave;
}

bool Rebuilder::SendStateLocked(uint64_t next_step,
                                const std::vector<uint64_t>& enqueued,
                                OwnedComm* done, std::string* error) {
  Migration* m = current_.get();
  const std::vector<StateBuffer> state = state_;
  const NcclComm transfer = m->transfer.comm();
  m->transfer_busy = true;
  mu_.Unlock();
  const bool sent =
      SendState(ops_, transfer, state, next_step, enqueued, error);
  mu_.Lock();
  m = current_.get();
  m->transfer_busy = false;
  *done = std::move(m->transfer);
  m->transfer = OwnedComm();
  if (sent && m->stage == Stage::kSwitching) return true;
  if (sent) *error = "migration aborted during the state transfer";
  if (m->stage == Stage::kSwitching) FailLocked(kPhaseSwitchAt, *error);
  AbortUnlocked(done);
  return false;
}

void Rebuilder::AbortUnlocked(OwnedComm* comm) {
  mu_.Unlock();
  comm->Abort(ops_);
  mu_.Lock();
}

int Rebuilder::Recover(uint64_t failed_step, uint64_t* redo_step,
                       int64_t timeout_ms, std::string* error) noexcept {
  try {
    MutexLock lock(&mu_);
    // A migration that ended (or switched) before this failure is not the
    // one that recovers from it.
    const Migration* m = current_.get();
    const bool live = m != nullptr && (m->stage == Stage::kPreparing ||
                                       m->stage == Stage::kReady ||
                                       m->stage == Stage::kSwitching);
    const uint64_t stale = m != nullptr && !live ? m->serial : 0;
    recovering_ = true;
    failed_step_ = failed_step;
    TickLocked();  // READY now if PREPARE's inits are done already
    if (!WaitRedoLocked(stale, timeout_ms, error)) {
      recovering_ = false;
      return kError;
    }
    *redo_step = current_->switch_seq;
    return 0;
  } catch (...) {
    *error = "out of memory recovering";
    return kError;
  }
}

bool Rebuilder::WaitRedoLocked(uint64_t stale_serial, int64_t timeout_ms,
                               std::string* error) {
  const uint64_t deadline =
      now_ns_() +
      static_cast<uint64_t>(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
  for (;;) {
    const Migration* m = current_.get();
    if (m != nullptr && m->serial != stale_serial && m->from_replica &&
        m->role == kRoleStayer) {
      if (m->stage == Stage::kSwitching) return true;
      if (m->stage == Stage::kFailed || m->stage == Stage::kAborted) {
        *error = m->failure;
        return false;
      }
    }
    const uint64_t now = now_ns_();
    if (now >= deadline) {
      *error = "no recovery migration reached this rank within " +
               std::to_string(timeout_ms) + " ms";
      return false;
    }
    cv_.WaitForNs(&mu_, std::min<uint64_t>(deadline - now, 100000000ull));
  }
}

int Rebuilder::Resume(uint64_t redo_step, std::string* error) noexcept {
  try {
    MutexLock lock(&mu_);
    return ResumeLocked(redo_step, error);
  } catch (...) {
    *error = "out of memory resuming";
    return kError;
  }
}

int Rebuilder::ResumeLocked(uint64_t redo_step, std::string* error) {
  Migration* m = current_.get();
  if (m == nullptr || !m->from_replica || m->role != kRoleStayer ||
      m->stage != Stage::kSwitching || !recovering_) {
    *error = "pitstop_trainer_resume: no recovery is waiting here";
    return kError;
  }
  if (redo_step != m->switch_seq) {
    *error = "pitstop_trainer_resume at step " + std::to_string(redo_step) +
             ", the migration redoes step " + std::to_string(m->switch_seq);
    FailLocked(kPhaseSwitchAt, *error);
    return kError;
  }
  if (m->replica) {
    // The counts restart at zero on every member (SwapAllLocked): the
    // joiner's too.
    const std::vector<uint64_t> zeros(m->plans.size(), 0);
    OwnedComm done;
    if (!SendStateLocked(redo_step, zeros, &done, error)) return kError;
    mu_.Unlock();
    done.FinalizeAndDestroy(ops_);
    mu_.Lock();
    if (current_->stage != Stage::kSwitching) {  // aborted meanwhile
      *error = current_->failure;
      return kError;
    }
  }
  if (!SwapAllLocked(true, error)) return kError;
  recovering_ = false;
  current_->stage = Stage::kSwitched;
  AnswerLocked(kPhaseSwitchAt, true, "");
  return 0;
}

int Rebuilder::Join(uint64_t* next_step, int64_t timeout_ms,
                    std::string* error) noexcept {
  try {
    MutexLock lock(&mu_);
    const uint64_t deadline =
        now_ns_() +
        static_cast<uint64_t>(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
    if (!WaitSwitchLocked(timeout_ms, error)) return kError;
    Migration* m = current_.get();
    const std::vector<StateBuffer> state = state_;
    const NcclComm transfer = m->transfer.comm();
    m->transfer_busy = true;
    TransferHeader header;
    NcclResult failed = abi::kNcclSuccess;
    mu_.Unlock();
    const bool ok =
        ReceiveState(ops_, transfer, state, &header, error, &failed);
    mu_.Lock();
    m = current_.get();
    m->transfer_busy = false;
    OwnedComm done = std::move(m->transfer);
    m->transfer = OwnedComm();
    if (!ok || m->stage == Stage::kAborted) {
      return JoinFailedLocked(&done, failed == abi::kNcclRemoteError, deadline,
                              error);
    }
    mu_.Unlock();
    done.FinalizeAndDestroy(ops_);
    mu_.Lock();
    if (BindJoinerLocked(header, error) != 0) return kError;
    *next_step = header.next_step;
    return 0;
  } catch (...) {
    *error = "out of memory joining";
    return kError;
  }
}

int Rebuilder::JoinFailedLocked(OwnedComm* transfer, bool leaver_gone,
                                uint64_t deadline, std::string* error) {
  const uint64_t serial = current_->serial;
  AbortUnlocked(transfer);
  // The leaver's end closed: it exited or failed, which its agent (a death)
  // or its library (a failed SWITCH_AT) reports. The controller's ABORT
  // then names that cause; answering first would name this echo of it
  // instead (the two reports race).
  for (const Migration* m = current_.get();
       leaver_gone && m != nullptr && m->serial == serial &&
       m->stage == Stage::kSwitching;
       m = current_.get()) {
    const uint64_t now = now_ns_();
    if (now >= deadline) break;
    cv_.WaitForNs(&mu_, std::min<uint64_t>(deadline - now, 100000000ull));
  }
  Migration* m = current_.get();
  if (m == nullptr || m->serial != serial) return kError;
  if (m->stage == Stage::kAborted) {
    *error = m->failure;
  } else {
    FailLocked(kPhaseSwitchAt, *error);
  }
  return kError;
}

// Waits until this joiner is READY and its SWITCH_AT came (or the migration
// failed, was aborted, or the time ran out). The state is received only
// then: the leaver sends it at the switch, and a receive posted earlier
// could not be cancelled by an ABORT (aborting a communicator another
// thread is inside is not allowed).
bool Rebuilder::WaitSwitchLocked(int64_t timeout_ms, std::string* error) {
  const uint64_t deadline =
      now_ns_() +
      static_cast<uint64_t>(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
  for (;;) {
    Migration* m = current_.get();
    if (m != nullptr && m->role == kRoleJoiner) {
      if (m->stage == Stage::kSwitching) return true;
      if (m->stage == Stage::kFailed || m->stage == Stage::kAborted) {
        *error = m->failure;
        return false;
      }
      if (m->stage != Stage::kIdsMade && m->stage != Stage::kPreparing &&
          m->stage != Stage::kReady) {
        *error = "this joiner already joined";
        return false;
      }
    }
    const uint64_t now = now_ns_();
    if (now >= deadline) {
      *error = "no migration reached this joiner within " +
               std::to_string(timeout_ms) + " ms";
      return false;
    }
    cv_.WaitForNs(&mu_, std::min<uint64_t>(deadline - now, 100000000ull));
  }
}

// The state arrived: the sandbox handles get the new communicators, with
// the leaver's operation counts (so the next switch point agrees).
int Rebuilder::BindJoinerLocked(const TransferHeader& h, std::string* error) {
  Migration* m = current_.get();
  if (h.enqueued.size() != m->plans.size()) {
    *error = "the leaver rebuilt " + std::to_string(h.enqueued.size()) +
             " communicator(s), this joiner " + std::to_string(m->plans.size());
    FailLocked(kPhaseSwitchAt, *error);
    return kError;
  }
  for (size_t i = 0; i < m->plans.size(); ++i) {
    Plan& p = m->plans[i];
    if (!table_->BindSandboxed(p.handle, p.fresh.comm(), h.enqueued[i])) {
      *error = "cannot bind a sandbox handle (destroyed by the application?)";
      FailLocked(kPhaseSwitchAt, *error);
      return kError;
    }
    p.fresh = OwnedComm();
    table_->SetCommHash(p.handle, p.new_hash);
  }
  tracking_.store(false);
  m->stage = Stage::kSwitched;
  AnswerLocked(kPhaseSwitchAt, true, "");
  return 0;
}

}  // namespace pitstop::plugin
