#include "src/sim/torch_migration_faults.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pitstop/clock.h"
#include "src/sim/migration_run.h"

namespace pitstop::sim {

absl::string_view TorchMigrationFaultName(TorchMigrationFault f) {
  switch (f) {
    case TorchMigrationFault::kNone:
      return "none";
    case TorchMigrationFault::kJoinerDiesInSandbox:
      return "joiner-dies-in-sandbox";
    case TorchMigrationFault::kLeaverDiesInTransfer:
      return "leaver-dies-in-transfer";
    case TorchMigrationFault::kJoinerDiesAfterSwitch:
      return "joiner-dies-after-switch";
  }
  return "none";
}

absl::StatusOr<TorchMigrationFault> ParseTorchMigrationFault(
    absl::string_view name) {
  for (TorchMigrationFault f :
       {TorchMigrationFault::kNone, TorchMigrationFault::kJoinerDiesInSandbox,
        TorchMigrationFault::kLeaverDiesInTransfer,
        TorchMigrationFault::kJoinerDiesAfterSwitch}) {
    if (name == TorchMigrationFaultName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--fault ", name,
      ": expected none, joiner-dies-in-sandbox, leaver-dies-in-transfer or "
      "joiner-dies-after-switch"));
}

namespace torch_migration_internal {
namespace {

// True once `fault`'s moment has come in `m` (or the joiner's log).
bool MomentCame(TorchMigrationFault fault, const v1::Migration& m,
                const std::string& joiner_log) {
  switch (fault) {
    case TorchMigrationFault::kJoinerDiesInSandbox:
      return m.ids_unix_ns() != 0;
    case TorchMigrationFault::kLeaverDiesInTransfer:
      return m.state() == v1::MIGRATION_STATE_SWITCHING;
    case TorchMigrationFault::kJoinerDiesAfterSwitch:
      return absl::StrContains(migration_internal::ReadFile(joiner_log),
                               "joined before step");
    case TorchMigrationFault::kNone:
      break;
  }
  return false;
}

}  // namespace

absl::StatusOr<int64_t> KillAtTheMoment(
    TorchMigrationFault fault, v1::Controller::Stub* stub,
    const std::string& id, pid_t victim, const std::string& joiner_log,
    const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (absl::Now() < deadline) {
    if (cancelled()) return absl::CancelledError("interrupted");
    v1::GetMigrationRequest req;
    req.set_migration_id(id);
    v1::GetMigrationResponse resp;
    const grpc::Status st =
        migration_internal::CallController([&](grpc::ClientContext* ctx) {
          return stub->GetMigration(ctx, req, &resp);
        });
    if (!st.ok()) {
      return absl::UnavailableError(
          absl::StrCat("GetMigration ", id, ": ", st.error_message()));
    }
    const v1::Migration& m = resp.migration();
    if (MomentCame(fault, m, joiner_log)) {
      kill(victim, SIGKILL);
      return MonotonicNowNs();
    }
    if (m.state() == v1::MIGRATION_STATE_COMMITTED ||
        m.state() == v1::MIGRATION_STATE_ABORTED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "migration ", id, " ended (", v1::MigrationState_Name(m.state()),
          ") before the moment of --fault ", TorchMigrationFaultName(fault)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the moment of --fault ", TorchMigrationFaultName(fault),
                   " did not come within 3 minutes"));
}

namespace {

// The `"key": number` of a loss-log line (train_lm.py writes them with
// json.dumps: a space after the colon).
bool Field(const std::string& line, const std::string& key, double* value) {
  const std::string k = absl::StrCat("\"", key, "\": ");
  const size_t at = line.find(k);
  if (at == std::string::npos) return false;
  const size_t from = at + k.size();
  const size_t end = line.find_first_of(",}", from);
  return absl::SimpleAtod(line.substr(from, end - from), value);
}

}  // namespace

StepLogLines LossLog(const std::string& path) {
  StepLogLines out;
  for (absl::string_view line :
       absl::StrSplit(migration_internal::ReadFile(path), '\n')) {
    const std::string l(line);
    double step = 0, ms = 0;
    if (l.find("\"loss\"") == std::string::npos || !Field(l, "step", &step) ||
        !Field(l, "ms", &ms)) {
      continue;
    }
    out.emplace_back(static_cast<int>(step) - 1, ms);
  }
  return out;
}

double LargestAfter(const std::string& text, const std::string& key) {
  double largest = -1;
  for (size_t at = text.find(key); at != std::string::npos;
       at = text.find(key, at + 1)) {
    const size_t from = at + key.size();
    const size_t end = text.find_first_not_of("0123456789.", from);
    double v = 0;
    if (absl::SimpleAtod(text.substr(from, end - from), &v)) {
      largest = std::max(largest, v);
    }
  }
  return largest;
}

std::vector<std::string> CollectiveErrors(const std::string& log) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find("RuntimeError: pitstop_nccl ");
    if (at == absl::string_view::npos) continue;
    out.emplace_back(line.substr(at + sizeof("RuntimeError: ") - 1));
  }
  return out;
}

namespace {

// Whether `error` (after its "failed on rank R of N:" head) names `rank`.
bool Names(const std::string& error, int rank) {
  const size_t head = error.find(" of ");
  const std::string body =
      head == std::string::npos ? error : error.substr(head + 4);
  return absl::StrContains(body, absl::StrCat("rank ", rank, " ")) ||
         absl::StrContains(body, absl::StrCat("rank ", rank, ":"));
}

void JudgeStayerErrors(const TorchMigrationOptions& o,
                       const TorchMigrationResult& r,
                       const std::function<void(const std::string&)>& fail) {
  // The ranks that died: the victim, and with a leaver its node's other
  // ranks (torchrun stops them when one dies).
  std::vector<int> dead = {r.victim_rank};
  if (o.fault == TorchMigrationFault::kLeaverDiesInTransfer) {
    dead.clear();
    for (int l = 0; l < o.ranks_per_node; ++l) {
      dead.push_back(o.leaver_node * o.ranks_per_node + l);
    }
  }
  if (r.stayer_errors.empty()) {
    fail("no stayer reported a failed collective after the kill");
  }
  for (const std::string& e : r.stayer_errors) {
    bool named = false;
    for (int d : dead) named = named || Names(e, d);
    if (!named) {
      fail(absl::StrCat("a stayer's error names no dead rank (",
                        absl::StrJoin(dead, ","), "): ", e));
    }
  }
}

}  // namespace

void JudgeFault(const TorchMigrationOptions& o, const TorchMigrationResult& r,
                const std::function<void(const std::string&)>& fail) {
  if (r.victim_rank < 0) {
    fail("no process was killed");
    return;
  }
  if (r.ended_after_kill_s < 0 ||
      r.ended_after_kill_s > absl::ToDoubleSeconds(kEndBound)) {
    fail(absl::StrFormat(
        "the job's processes had not all ended %.0f s after the kill "
        "(blocked on the dead rank?%s)",
        absl::ToDoubleSeconds(kEndBound),
        r.still_running.empty() ? ""
                                : " what still ran is listed above and under "
                                  "\"still running\""));
  }
  const v1::Migration& m = r.migration;
  const std::string leaver = absl::StrCat("node", o.leaver_node);
  switch (o.fault) {
    case TorchMigrationFault::kJoinerDiesInSandbox:
      if (m.state() != v1::MIGRATION_STATE_ABORTED ||
          !absl::StrContains(
              m.abort_reason(),
              absl::StrCat("joiner ", kTorchMigrationStandby, " died"))) {
        fail(absl::StrCat(
            "want the migration ABORTED because the joiner "
            "died, got ",
            v1::MigrationState_Name(m.state()), " ", m.abort_reason()));
      }
      break;
    case TorchMigrationFault::kLeaverDiesInTransfer:
      if (m.state() != v1::MIGRATION_STATE_ABORTED ||
          !absl::StrContains(m.abort_reason(),
                             absl::StrCat("leaver ", leaver, " died"))) {
        fail(absl::StrCat(
            "want the migration ABORTED because the leaver "
            "died, got ",
            v1::MigrationState_Name(m.state()), " ", m.abort_reason()));
      }
      JudgeStayerErrors(o, r, fail);
      break;
    case TorchMigrationFault::kJoinerDiesAfterSwitch:
      JudgeStayerErrors(o, r, fail);
      break;
    case TorchMigrationFault::kNone:
      break;
  }
}

}  // namespace torch_migration_internal
}  // namespace pitstop::sim
