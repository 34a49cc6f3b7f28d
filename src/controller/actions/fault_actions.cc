#include "src/controller/actions/fault_actions.h"

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "pitstop/logging.h"
#include "src/controller/actions/command_runner.h"

namespace pitstop::controller {
namespace {

constexpr size_t kMaxRecords = 256;

std::string Short(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// The document a hook reads on stdin.
std::string HookInput(FaultEvent e, const v1::Fault& f, bool may_act) {
  google::protobuf::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  po.always_print_primitive_fields = true;
  std::string fault_json;
  (void)google::protobuf::util::MessageToJsonString(f, &fault_json, po);
  nlohmann::json j;
  j["event"] = FaultEventName(e);
  j["fault"] = nlohmann::json::parse(fault_json, nullptr, false);
  j["hardware_hosts"] = HardwareHosts(f);
  j["policy_allows_acting"] = may_act;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultActions>> FaultActions::Create(
    Options options) {
  if (!options.journal_path.empty()) {
    std::ofstream probe(options.journal_path, std::ios::app);
    if (!probe.good()) {
      return absl::FailedPreconditionError(
          absl::StrCat("actions.journal ", options.journal_path,
                       ": cannot open for appending"));
    }
  }
  std::unique_ptr<FaultActions> a(new FaultActions(std::move(options)));
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

FaultActions::FaultActions(Options options)
    : options_(std::move(options)), slurm_(options_.slurm) {
  if (options_.registry != nullptr) {
    runs_ = &prometheus::BuildCounter()
                 .Name("pitstop_controller_actions_total")
                 .Help(
                     "Actions run on fault changes, by action (hook, "
                     "slurm_drain, slurm_resume), event and result (ok, "
                     "failed, timeout, error, skipped)")
                 .Register(*options_.registry);
    dropped_counter_ =
        &prometheus::BuildCounter()
             .Name("pitstop_controller_actions_dropped_total")
             .Help(
                 "Fault changes not acted on because the actions queue "
                 "was full")
             .Register(*options_.registry)
             .Add({});
  }
}

FaultActions::~FaultActions() { Stop(); }

void FaultActions::OnFaultChange(const v1::WatchFaultsResponse& change) {
  MutexLock lock(&mu_);
  if (stopping_) return;
  if (queue_.size() >= options_.queue_limit) {
    ++dropped_;
    if (dropped_counter_ != nullptr) dropped_counter_->Increment();
    return;
  }
  queue_.push_back(change);
  cv_.SignalAll();
}

void FaultActions::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    if (!queue_.empty()) {
      Logger("actions")->warn("stopping: {} fault change(s) not acted on",
                              queue_.size());
    }
    queue_.clear();
    cv_.SignalAll();
  }
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<ActionRecord> FaultActions::Records() const {
  MutexLock lock(&mu_);
  return {records_.begin(), records_.end()};
}

uint64_t FaultActions::dropped() const {
  MutexLock lock(&mu_);
  return dropped_;
}

bool FaultActions::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (!queue_.empty() || busy_) {
    if (absl::Now() >= deadline) return false;
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
  }
  return true;
}

void FaultActions::Loop() {
  for (;;) {
    v1::WatchFaultsResponse change;
    {
      MutexLock lock(&mu_);
      busy_ = false;
      cv_.SignalAll();
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (stopping_) return;
      change = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Handle(change);
  }
}

void FaultActions::Handle(const v1::WatchFaultsResponse& change) {
  const v1::Fault& f = change.fault();
  const bool existing =
      change.change() == v1::WatchFaultsResponse::CHANGE_EXISTING;
  unsigned& bits = fired_[f.fault_id()];
  // True the first time `e` is seen for this fault.
  auto first = [&bits](FaultEvent e) {
    const unsigned bit = 1u << static_cast<int>(e);
    const bool is_first = (bits & bit) == 0;
    bits |= bit;
    return is_first;
  };
  const bool was_confirmed = f.confirmed_unix_ns() != 0;
  std::vector<FaultEvent> events;
  switch (f.state()) {
    case v1::FAULT_STATE_CONFIRMED:
      if (first(FaultEvent::kConfirmed))
        events.push_back(FaultEvent::kConfirmed);
      break;
    case v1::FAULT_STATE_ACKNOWLEDGED:
      // Acknowledged by an operator after (or while) it was confirmed.
      if (was_confirmed && first(FaultEvent::kConfirmed)) {
        events.push_back(FaultEvent::kConfirmed);
      }
      break;
    case v1::FAULT_STATE_MITIGATING:
      if (was_confirmed && first(FaultEvent::kConfirmed)) {
        events.push_back(FaultEvent::kConfirmed);
      }
      if (first(FaultEvent::kMigrated)) events.push_back(FaultEvent::kMigrated);
      break;
    case v1::FAULT_STATE_RESOLVED:
      // Only faults that were confirmed: nothing acted on a suspicion.
      if (was_confirmed && first(FaultEvent::kResolved)) {
        events.push_back(FaultEvent::kResolved);
      }
      break;
    default:
      break;
  }
  if (f.state() == v1::FAULT_STATE_RESOLVED) fired_.erase(f.fault_id());
  if (existing) return;  // acted on (or not) before the restart
  for (FaultEvent e : events) Fire(e, f);
}

void FaultActions::Fire(FaultEvent e, const v1::Fault& f) {
  const bool may_act = options_.may_act ? options_.may_act(f.job_id()) : false;
  const std::string* hook =
      e == FaultEvent::kConfirmed  ? &options_.hooks.on_confirmed
      : e == FaultEvent::kResolved ? &options_.hooks.on_resolved
                                   : &options_.hooks.on_migrated;
  if (!hook->empty()) RunHook(e, *hook, f, may_act);
  if (!options_.slurm.enabled) return;
  const std::vector<std::string> hosts = HardwareHosts(f);
  if (e == FaultEvent::kConfirmed) {
    if (hosts.empty()) return;  // not a hardware fault: nothing to drain
    if (!may_act) {
      ActionRecord r;
      r.action = "slurm_drain";
      r.result = "skipped";
      r.target = absl::StrJoin(hosts, ",");
      r.detail = "job policy is not ACT (pitstopctl policy set JOB --mode act)";
      Record(std::move(r), e, f);
      return;
    }
    for (const std::string& h : hosts)
      Record(slurm_.Drain(h, f, &cancel_), e, f);
  } else if (e == FaultEvent::kResolved) {
    for (const std::string& h : hosts) {
      Record(slurm_.ResumeIfOurs(h, f, &cancel_), e, f);
    }
  }
}

void FaultActions::RunHook(FaultEvent e, const std::string& command,
                           const v1::Fault& f, bool may_act) {
  ActionRecord r;
  r.action = "hook";
  r.command = command;
  if (options_.hooks.require_act && !may_act) {
    r.result = "skipped";
    r.detail = "job policy is not ACT (actions.hooks_require_act)";
    Record(std::move(r), e, f);
    return;
  }
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.stdin_data = HookInput(e, f, may_act);
  spec.timeout = options_.hooks.timeout;
  spec.env = {
      absl::StrCat("PITSTOP_EVENT=", FaultEventName(e)),
      absl::StrCat("PITSTOP_FAULT_ID=", f.fault_id()),
      absl::StrCat("PITSTOP_FAULT_CLASS=",
                   Short(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_")),
      absl::StrCat("PITSTOP_FAULT_STATE=",
                   Short(v1::FaultState_Name(f.state()), "FAULT_STATE_")),
      absl::StrCat("PITSTOP_JOB_ID=", f.job_id()),
      absl::StrCat("PITSTOP_HOSTS=", absl::StrJoin(HardwareHosts(f), " "))};
  absl::StatusOr<CommandResult> res = RunCommand(spec, &cancel_);
  if (!res.ok()) {
    r.result = "error";
    r.detail = std::string(res.status().message());
  } else {
    r.exit_code = res->exit_code;
    r.term_signal = res->term_signal;
    r.duration_ms = absl::ToInt64Milliseconds(res->duration);
    r.result = res->timed_out ? "timeout" : res->ok() ? "ok" : "failed";
    r.detail = res->output;
  }
  Record(std::move(r), e, f);
}

void FaultActions::Record(ActionRecord r, FaultEvent e, const v1::Fault& f) {
  r.time_unix_ns = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  r.event = FaultEventName(e);
  r.fault_id = f.fault_id();
  r.job_id = f.job_id();
  auto log = Logger("actions");
  const std::string what =
      absl::StrCat(r.action, r.target.empty() ? "" : " ", r.target, " on ",
                   r.event, " of ", r.fault_id, ": ", r.result);
  if (r.result == "ok") {
    log->info("{}", what);
  } else if (r.result == "skipped") {
    log->info("{} ({})", what, r.detail);
  } else {
    log->warn("{} (exit {}, signal {}): {}", what, r.exit_code, r.term_signal,
              r.detail);
  }
  if (runs_ != nullptr) {
    runs_->Add({{"action", r.action}, {"event", r.event}, {"result", r.result}})
        .Increment();
  }
  if (!options_.journal_path.empty()) {
    std::ofstream out(options_.journal_path, std::ios::app);
    out << ActionRecordJson(r) << "\n";
    if (!out.good()) {
      log->error("actions.journal {}: write failed", options_.journal_path);
    }
  }
  MutexLock lock(&mu_);
  records_.push_back(std::move(r));
  if (records_.size() > kMaxRecords) records_.pop_front();
}

}  // namespace pitstop::controller
