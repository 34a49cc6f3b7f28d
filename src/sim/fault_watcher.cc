#include "src/sim/fault_watcher.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"
#include "pitstop/status_macros.h"

namespace pitstop::sim {

FaultWatcher::FaultWatcher(std::shared_ptr<grpc::Channel> channel,
                           int64_t start_ns)
    : stub_(v1::Controller::NewStub(channel)), start_ns_(start_ns) {
  thread_ = std::thread([this] { Loop(); });
}

void FaultWatcher::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  thread_.join();
}

std::vector<ObservedFault> FaultWatcher::TakeNew() {
  MutexLock lock(&mu_);
  std::vector<ObservedFault> out;
  for (const std::string& id : new_ids_) out.push_back(faults_[index_[id]]);
  new_ids_.clear();
  return out;
}

std::vector<ObservedFault> FaultWatcher::Snapshot() {
  MutexLock lock(&mu_);
  return faults_;
}

std::vector<ObservedFault> FaultWatcher::Merge(
    const std::vector<v1::Fault>& listed, int64_t now_plan_ns) {
  MutexLock lock(&mu_);
  for (const v1::Fault& f : listed) {
    auto it = index_.find(f.fault_id());
    if (it != index_.end()) {
      faults_[it->second].fault = f;
      continue;
    }
    index_[f.fault_id()] = faults_.size();
    faults_.push_back({f, now_plan_ns});
  }
  return faults_;
}

void FaultWatcher::Loop() {
  while (true) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    {
      MutexLock lock(&mu_);
      if (stopped_) return;
      ctx_ = ctx.get();
    }
    v1::WatchFaultsRequest req;
    req.set_include_existing(true);
    auto reader = stub_->WatchFaults(ctx.get(), req);
    v1::WatchFaultsResponse resp;
    while (reader->Read(&resp)) Record(resp.fault());
    reader->Finish();
    {
      MutexLock lock(&mu_);
      ctx_ = nullptr;
      if (stopped_) return;
    }
    usleep(200000);  // controller restarting: retry
  }
}

void FaultWatcher::Record(const v1::Fault& f) {
  const int64_t now = MonotonicNowNs() - start_ns_;
  MutexLock lock(&mu_);
  auto it = index_.find(f.fault_id());
  ObservedFault* o;
  if (it != index_.end()) {
    o = &faults_[it->second];
    o->fault = f;
  } else {
    index_[f.fault_id()] = faults_.size();
    faults_.push_back({f, now});
    new_ids_.push_back(f.fault_id());
    o = &faults_.back();
  }
  if (o->confirmed_seen_ns < 0 && f.confirmed_unix_ns() != 0) {
    o->confirmed_seen_ns = now;
  }
}

std::string FaultLine(const ObservedFault& o) {
  std::string line = absl::StrFormat(
      "[sim %6.1fs] FAULT %s %s", o.first_seen_ns / 1e9,
      ShortClassName(o.fault.fault_class()), o.fault.fault_id());
  if (o.fault.suspects_size() > 0) {
    absl::StrAppend(&line, ": ", DescribeSuspect(o.fault.suspects(0)));
  }
  return line;
}

uint64_t JoinedCollectives(v1::Controller::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  v1::GetStatusResponse resp;
  if (!stub->GetStatus(&ctx, v1::GetStatusRequest(), &resp).ok()) return 0;
  return resp.status().collectives_joined();
}

absl::StatusOr<std::vector<v1::Fault>> ListAllFaults(
    v1::Controller::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListFaultsRequest req;
  req.set_include_resolved(true);
  v1::ListFaultsResponse resp;
  RETURN_IF_ERROR(FromGrpcStatus(stub->ListFaults(&ctx, req, &resp)));
  return std::vector<v1::Fault>(resp.faults().begin(), resp.faults().end());
}

}  // namespace pitstop::sim
