#include "src/controller/ha/etcd_fault_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

namespace pitstop::controller::ha {
namespace {

// A record changed by someone else between read and write: only the leader
// writes, so this is rare (a concurrent API call); retry a few times.
constexpr int kMaxAttempts = 5;

etcdserverpb::RequestOp PutOp(const std::string& key,
                              const std::string& value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  return op;
}

// plans/JOB values: "EPOCH\n" then the plan's encoding.
absl::StatusOr<StoredPlan> DecodePlanValue(const std::string& path,
                                           const std::string& key,
                                           absl::string_view job_id,
                                           absl::string_view value) {
  const size_t nl = value.find('\n');
  StoredPlan p;
  if (nl == absl::string_view::npos ||
      !absl::SimpleAtoi(value.substr(0, nl), &p.epoch)) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", key, ": undecodable plan record"));
  }
  p.job_id = std::string(job_id);
  p.data = std::string(value.substr(nl + 1));
  return p;
}

}  // namespace

EtcdFaultStore::EtcdFaultStore(EtcdClient* etcd, WriteFence* fence,
                               std::string prefix)
    : etcd_(etcd),
      fence_(fence),
      prefix_(std::move(prefix)),
      path_(absl::StrCat("etcd:", etcd->endpoints(), " ", prefix_)) {}

std::string EtcdFaultStore::FaultKey(absl::string_view id) const {
  return absl::StrCat(prefix_, "faults/", id);
}

absl::StatusOr<bool> EtcdFaultStore::FencedTxn(
    const std::string* guard_key, int64_t guard_mod,
    std::vector<etcdserverpb::RequestOp> ops) {
  const EtcdFence fence = fence_->Current();
  if (fence.lease == 0) {
    return absl::UnavailableError(
        "not the leader: durable writes need the leader lease");
  }
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* c = txn.add_compare();
  c->set_key(fence.key);
  c->set_target(etcdserverpb::Compare::LEASE);
  c->set_result(etcdserverpb::Compare::EQUAL);
  c->set_lease(fence.lease);
  c = txn.add_compare();
  c->set_key(fence.key);
  c->set_target(etcdserverpb::Compare::CREATE);
  c->set_result(etcdserverpb::Compare::EQUAL);
  c->set_create_revision(fence.create_revision);
  if (guard_key != nullptr) {
    c = txn.add_compare();
    c->set_key(*guard_key);
    c->set_target(etcdserverpb::Compare::MOD);
    c->set_result(etcdserverpb::Compare::EQUAL);
    c->set_mod_revision(guard_mod);  // 0 = the key must not exist
  }
  for (etcdserverpb::RequestOp& op : ops) *txn.add_success() = std::move(op);
  txn.add_failure()->mutable_request_range()->set_key(fence.key);
  absl::StatusOr<etcdserverpb::TxnResponse> r = etcd_->Txn(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded()) return true;
  const etcdserverpb::RangeResponse& leader =
      r->responses_size() > 0 ? r->responses(0).response_range()
                              : etcdserverpb::RangeResponse();
  const bool still_ours =
      leader.kvs_size() > 0 && leader.kvs(0).lease() == fence.lease &&
      leader.kvs(0).create_revision() == fence.create_revision;
  if (still_ours) return false;  // only the record guard failed
  const uint64_t n = fenced_refused_.fetch_add(1) + 1;
  fence_->Refused();
  const std::string holder =
      leader.kvs_size() > 0 ? leader.kvs(0).value() : std::string("nobody");
  Logger("ha")->error(
      "fenced write refused by etcd: lease {:x} no longer holds {} (held by "
      "{}); {} refused so far",
      fence.lease, fence.key, holder, n);
  return absl::UnavailableError(absl::StrCat(
      "fenced: this controller is no longer the leader (", fence.key,
      " is held by ", holder, "); write refused; leader=", holder));
}

absl::StatusOr<EtcdFaultStore::Stored> EtcdFaultStore::Load(
    absl::string_view fault_id) const {
  absl::StatusOr<std::optional<EtcdKv>> kv = etcd_->Get(FaultKey(fault_id));
  if (!kv.ok()) return kv.status();
  Stored out;
  if (!kv->has_value()) return out;
  out.mod_revision = (*kv)->mod_revision;
  out.fault.emplace();
  if (!out.fault->ParseFromString((*kv)->value)) {
    return absl::DataLossError(
        absl::StrCat(path_, ": fault ", fault_id, ": undecodable record"));
  }
  return out;
}

absl::StatusOr<v1::Fault> EtcdFaultStore::Upsert(const v1::Fault& fault,
                                                 bool* ignored) {
  if (fault.fault_id().empty()) {
    return absl::InvalidArgumentError("fault.fault_id: empty");
  }
  MutexLock lock(&mu_);
  const std::string key = FaultKey(fault.fault_id());
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    absl::StatusOr<Stored> old = Load(fault.fault_id());
    if (!old.ok()) return old.status();
    v1::Fault next =
        MergeUpsert(old->fault ? &*old->fault : nullptr, fault, ignored);
    if (*ignored) return next;
    absl::StatusOr<bool> done = FencedTxn(
        &key, old->mod_revision, {PutOp(key, next.SerializeAsString())});
    if (!done.ok()) return done.status();
    if (*done) return next;
  }
  return absl::AbortedError(absl::StrCat("fault ", fault.fault_id(),
                                         ": changed concurrently ",
                                         kMaxAttempts, " times; not stored"));
}

absl::StatusOr<v1::Fault> EtcdFaultStore::Modify(absl::string_view fault_id,
                                                 const Change& change) {
  MutexLock lock(&mu_);
  const std::string key = FaultKey(fault_id);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    absl::StatusOr<Stored> old = Load(fault_id);
    if (!old.ok()) return old.status();
    if (!old->fault) {
      return absl::NotFoundError(
          absl::StrCat("fault ", fault_id, " not found"));
    }
    absl::StatusOr<bool> changed = change(&*old->fault);
    if (!changed.ok()) return changed.status();
    if (!*changed) return *old->fault;
    absl::StatusOr<bool> done = FencedTxn(
        &key, old->mod_revision, {PutOp(key, old->fault->SerializeAsString())});
    if (!done.ok()) return done.status();
    if (*done) return *old->fault;
  }
  return absl::AbortedError(absl::StrCat("fault ", fault_id,
                                         ": changed concurrently ",
                                         kMaxAttempts, " times; not stored"));
}

absl::StatusOr<v1::Fault> EtcdFaultStore::Get(
    absl::string_view fault_id) const {
  absl::StatusOr<Stored> s = Load(fault_id);
  if (!s.ok()) return s.status();
  if (!s->fault) {
    return absl::NotFoundError(absl::StrCat("fault ", fault_id, " not found"));
  }
  return *s->fault;
}

absl::StatusOr<std::vector<v1::Fault>> EtcdFaultStore::List(
    absl::string_view job_id, bool include_resolved, uint32_t limit) const {
  absl::StatusOr<std::vector<EtcdKv>> kvs =
      etcd_->List(absl::StrCat(prefix_, "faults/"));
  if (!kvs.ok()) return kvs.status();
  std::vector<v1::Fault> out;
  for (const EtcdKv& kv : *kvs) {
    v1::Fault f;
    if (!f.ParseFromString(kv.value)) {
      return absl::DataLossError(
          absl::StrCat(path_, ": ", kv.key, ": undecodable fault"));
    }
    if (!job_id.empty() && f.job_id() != job_id) continue;
    if (!include_resolved && f.state() == v1::FAULT_STATE_RESOLVED) continue;
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const v1::Fault& a, const v1::Fault& b) {
    return FaultNumberOf(a.fault_id()) > FaultNumberOf(b.fault_id());
  });
  if (limit != 0 && out.size() > limit) out.resize(limit);
  return out;
}

absl::StatusOr<v1::Fault> EtcdFaultStore::Acknowledge(
    absl::string_view fault_id, absl::string_view who, absl::string_view note,
    uint64_t now_unix_ns) {
  return Modify(fault_id, [&](v1::Fault* f) {
    return ApplyAcknowledge(f, who, note, now_unix_ns);
  });
}

absl::StatusOr<v1::Fault> EtcdFaultStore::Resolve(absl::string_view fault_id,
                                                  absl::string_view who,
                                                  absl::string_view note,
                                                  uint64_t now_unix_ns) {
  return Modify(fault_id, [&](v1::Fault* f) -> absl::StatusOr<bool> {
    return ApplyResolve(f, who, note, now_unix_ns);
  });
}

uint64_t EtcdFaultStore::NextFaultNumber() const {
  absl::StatusOr<std::vector<EtcdKv>> kvs =
      etcd_->List(absl::StrCat(prefix_, "faults/"));
  int64_t max = 0;
  if (kvs.ok()) {
    for (const EtcdKv& kv : *kvs) max = std::max(max, FaultNumberOf(kv.key));
  }
  return static_cast<uint64_t>(max) + 1;
}

uint32_t EtcdFaultStore::OpenCount() const {
  absl::StatusOr<std::vector<v1::Fault>> open = List("", false, 0);
  return open.ok() ? static_cast<uint32_t>(open->size()) : 0;
}

absl::Status EtcdFaultStore::SetDrain(absl::string_view host,
                                      absl::string_view reason) {
  MutexLock lock(&mu_);
  absl::StatusOr<bool> done = FencedTxn(
      nullptr, 0,
      {PutOp(absl::StrCat(prefix_, "drains/", host), std::string(reason))});
  return done.status();
}

absl::Status EtcdFaultStore::ClearDrain(absl::string_view host) {
  MutexLock lock(&mu_);
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(
      absl::StrCat(prefix_, "drains/", host));
  return FencedTxn(nullptr, 0, {std::move(op)}).status();
}

std::map<std::string, std::string> EtcdFaultStore::Drains() const {
  std::map<std::string, std::string> out;
  const std::string p = absl::StrCat(prefix_, "drains/");
  absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_->List(p);
  if (!kvs.ok()) {
    Logger("ha")->error("reading drains: {}", kvs.status().ToString());
    return out;
  }
  for (const EtcdKv& kv : *kvs) out[kv.key.substr(p.size())] = kv.value;
  return out;
}

absl::Status EtcdFaultStore::SavePolicy(absl::string_view job_id,
                                        const v1::JobPolicy& p) {
  MutexLock lock(&mu_);
  return FencedTxn(nullptr, 0,
                   {PutOp(absl::StrCat(prefix_, "policies/", job_id),
                          p.SerializeAsString())})
      .status();
}

std::map<std::string, v1::JobPolicy> EtcdFaultStore::Policies() const {
  std::map<std::string, v1::JobPolicy> out;
  const std::string p = absl::StrCat(prefix_, "policies/");
  absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_->List(p);
  if (!kvs.ok()) {
    Logger("ha")->error("reading policies: {}", kvs.status().ToString());
    return out;
  }
  for (const EtcdKv& kv : *kvs) {
    out[kv.key.substr(p.size())].ParseFromString(kv.value);
  }
  return out;
}

absl::Status EtcdFaultStore::PutJobRecord(absl::string_view dir,
                                          absl::string_view job_id,
                                          std::string value) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": empty job id"));
  }
  MutexLock lock(&mu_);
  return FencedTxn(nullptr, 0,
                   {PutOp(absl::StrCat(prefix_, dir, job_id), value)})
      .status();
}

absl::StatusOr<std::map<std::string, std::string>> EtcdFaultStore::JobRecords(
    absl::string_view dir) const {
  const std::string p = absl::StrCat(prefix_, dir);
  absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_->List(p);
  if (!kvs.ok()) return kvs.status();
  std::map<std::string, std::string> out;
  for (const EtcdKv& kv : *kvs) out[kv.key.substr(p.size())] = kv.value;
  return out;
}

absl::Status EtcdFaultStore::SaveSyncPolicy(absl::string_view job_id,
                                            const v1::SyncSettings& s) {
  return PutJobRecord("sync_policies/", job_id, s.SerializeAsString());
}

absl::Status EtcdFaultStore::SaveLoraPolicy(absl::string_view job_id,
                                            const v1::LoraSettings& s) {
  return PutJobRecord("lora_policies/", job_id, s.SerializeAsString());
}

absl::StatusOr<std::map<std::string, v1::SyncSettings>>
EtcdFaultStore::SyncPolicies() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRecords("sync_policies/");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::SyncSettings>(path_, "sync policy", *rows);
}

absl::StatusOr<std::map<std::string, v1::LoraSettings>>
EtcdFaultStore::LoraPolicies() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRecords("lora_policies/");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::LoraSettings>(path_, "lora policy", *rows);
}

absl::Status EtcdFaultStore::SaveJobHosts(
    const v1::SetJobHostsRequest& naming) {
  if (!naming.hosts().empty()) {
    return PutJobRecord("job_hosts/", naming.job_id(),
                        naming.SerializeAsString());
  }
  if (naming.job_id().empty()) {
    return absl::InvalidArgumentError("job_hosts/: empty job id");
  }
  MutexLock lock(&mu_);
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(
      absl::StrCat(prefix_, "job_hosts/", naming.job_id()));
  return FencedTxn(nullptr, 0, {std::move(op)}).status();
}

absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>>
EtcdFaultStore::ScheduledHosts() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRecords("job_hosts/");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::SetJobHostsRequest>(path_, "job hosts", *rows);
}

absl::Status EtcdFaultStore::SaveMigration(const v1::Migration& m) {
  if (m.migration_id().empty()) {
    return absl::InvalidArgumentError("migration.migration_id: empty");
  }
  MutexLock lock(&mu_);
  return FencedTxn(
             nullptr, 0,
             {PutOp(absl::StrCat(prefix_, "migrations/", m.migration_id()),
                    m.SerializeAsString())})
      .status();
}

absl::StatusOr<std::vector<v1::Migration>> EtcdFaultStore::Migrations() const {
  const std::string p = absl::StrCat(prefix_, "migrations/");
  absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_->List(p);
  if (!kvs.ok()) return kvs.status();
  std::vector<v1::Migration> out;
  for (const EtcdKv& kv : *kvs) {
    if (!out.emplace_back().ParseFromString(kv.value)) {
      return absl::DataLossError(
          absl::StrCat(path_, ": ", kv.key, ": undecodable migration record"));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const v1::Migration& a, const v1::Migration& b) {
              return FaultNumberOf(a.migration_id()) <
                     FaultNumberOf(b.migration_id());
            });
  return out;
}

absl::Status EtcdFaultStore::SavePlan(const StoredPlan& plan) {
  if (plan.job_id.empty()) return CheckPlanWrite(plan, false, 0);
  MutexLock lock(&mu_);
  const std::string key = absl::StrCat(prefix_, "plans/", plan.job_id);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    absl::StatusOr<std::optional<EtcdKv>> kv = etcd_->Get(key);
    if (!kv.ok()) return kv.status();
    uint64_t stored_epoch = 0;
    if (kv->has_value()) {
      absl::StatusOr<StoredPlan> old =
          DecodePlanValue(path_, key, plan.job_id, (*kv)->value);
      if (!old.ok()) return old.status();
      stored_epoch = old->epoch;
    }
    if (absl::Status s = CheckPlanWrite(plan, kv->has_value(), stored_epoch);
        !s.ok()) {
      return s;
    }
    // Guarded by the record's mod revision: the epoch check and the write
    // are one step even against another writer.
    absl::StatusOr<bool> done =
        FencedTxn(&key, kv->has_value() ? (*kv)->mod_revision : 0,
                  {PutOp(key, absl::StrCat(plan.epoch, "\n", plan.data))});
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat("plan of job ", plan.job_id,
                                         ": changed concurrently ",
                                         kMaxAttempts, " times; not stored"));
}

absl::StatusOr<std::vector<StoredPlan>> EtcdFaultStore::Plans() const {
  const std::string p = absl::StrCat(prefix_, "plans/");
  absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_->List(p);
  if (!kvs.ok()) return kvs.status();
  std::vector<StoredPlan> out;
  for (const EtcdKv& kv : *kvs) {
    absl::StatusOr<StoredPlan> plan =
        DecodePlanValue(path_, kv.key, kv.key.substr(p.size()), kv.value);
    if (!plan.ok()) return plan.status();
    out.push_back(std::move(*plan));
  }
  std::sort(out.begin(), out.end(),
            [](const StoredPlan& a, const StoredPlan& b) {
              return a.job_id < b.job_id;
            });
  return out;
}

}  // namespace pitstop::controller::ha
