// FaultStore on etcd, for several controllers (docs/ha.md). Keys under a
// prefix (default "/pitstop/"): faults/ID, drains/HOST, policies/JOB,
// sync_policies/JOB, lora_policies/JOB, job_hosts/JOB, migrations/ID, each
// value a serialized record, and plans/JOB ("EPOCH\n" then the plan's
// encoding). Every write is one etcd transaction that compares the leader key's
// lease and create revision with this controller's fence, so a deposed leader
// cannot write: etcd refuses, the refusal is counted (fenced_writes_refused)
// and the write fails with Unavailable. Read-modify-writes also compare the
// record's mod revision and retry on a concurrent change.
#ifndef PITSTOP_CONTROLLER_HA_ETCD_FAULT_STORE_H_
#define PITSTOP_CONTROLLER_HA_ETCD_FAULT_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pitstop/sync.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/leader_election.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller::ha {

// Where the store gets the fence from and whom it tells about a refusal.
// Thread-safe.
class WriteFence {
 public:
  virtual ~WriteFence() = default;
  virtual EtcdFence Current() const = 0;
  virtual void Refused() = 0;
};

// The election's fence.
class ElectionFence final : public WriteFence {
 public:
  explicit ElectionFence(LeaderElection* e) : election_(e) {}
  EtcdFence Current() const override { return election_->Fence(); }
  void Refused() override { election_->FenceRefused(); }

 private:
  LeaderElection* const election_;
};

// Thread-safe: writes are serialized by one mutex, reads go to etcd
// directly.
class EtcdFaultStore final : public FaultStore {
 public:
  // `etcd` and `fence` must outlive the store.
  EtcdFaultStore(EtcdClient* etcd, WriteFence* fence, std::string prefix);

  absl::StatusOr<v1::Fault> Upsert(const v1::Fault& fault,
                                   bool* ignored) override;
  absl::StatusOr<v1::Fault> Get(absl::string_view fault_id) const override;
  absl::StatusOr<std::vector<v1::Fault>> List(absl::string_view job_id,
                                              bool include_resolved,
                                              uint32_t limit) const override;
  absl::StatusOr<v1::Fault> Acknowledge(absl::string_view fault_id,
                                        absl::string_view who,
                                        absl::string_view note,
                                        uint64_t now_unix_ns) override;
  absl::StatusOr<v1::Fault> Resolve(absl::string_view fault_id,
                                    absl::string_view who,
                                    absl::string_view note,
                                    uint64_t now_unix_ns) override;
  uint64_t NextFaultNumber() const override;
  uint32_t OpenCount() const override;
  absl::Status SetDrain(absl::string_view host,
                        absl::string_view reason) override;
  absl::Status ClearDrain(absl::string_view host) override;
  std::map<std::string, std::string> Drains() const override;
  absl::Status SavePolicy(absl::string_view job_id,
                          const v1::JobPolicy& p) override;
  std::map<std::string, v1::JobPolicy> Policies() const override;
  absl::Status SaveSyncPolicy(absl::string_view job_id,
                              const v1::SyncSettings& s) override;
  absl::StatusOr<std::map<std::string, v1::SyncSettings>> SyncPolicies()
      const override;
  absl::Status SaveLoraPolicy(absl::string_view job_id,
                              const v1::LoraSettings& s) override;
  absl::StatusOr<std::map<std::string, v1::LoraSettings>> LoraPolicies()
      const override;
  absl::Status SaveJobHosts(const v1::SetJobHostsRequest& naming) override;
  absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>> ScheduledHosts()
      const override;
  absl::Status SaveMigration(const v1::Migration& m) override;
  absl::StatusOr<std::vector<v1::Migration>> Migrations() const override;
  absl::Status SavePlan(const StoredPlan& plan) override;
  absl::StatusOr<std::vector<StoredPlan>> Plans() const override;
  const std::string& path() const override { return path_; }

  // Writes etcd refused because another controller holds the leader key.
  uint64_t fenced_writes_refused() const { return fenced_refused_.load(); }

 private:
  // One fault record with its mod revision (0 = absent).
  struct Stored {
    std::optional<v1::Fault> fault;
    int64_t mod_revision = 0;
  };
  absl::StatusOr<Stored> Load(absl::string_view fault_id) const;
  // Runs `ops` if this controller still holds the fence and (when
  // `guard_key` is set) that key is unchanged since `guard_mod`. Returns
  // false when only the guard failed (caller retries), Unavailable when
  // fenced.
  absl::StatusOr<bool> FencedTxn(const std::string* guard_key,
                                 int64_t guard_mod,
                                 std::vector<etcdserverpb::RequestOp> ops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Read-modify-write of one fault: `change` edits it (or returns a
  // status to give back unchanged / an error), retried on races.
  using Change = std::function<absl::StatusOr<bool>(v1::Fault*)>;
  absl::StatusOr<v1::Fault> Modify(absl::string_view fault_id,
                                   const Change& change);
  std::string FaultKey(absl::string_view id) const;
  // `dir`/JOB records (sync_policies/, lora_policies/): a fenced put, and
  // every job's value.
  absl::Status PutJobRecord(absl::string_view dir, absl::string_view job_id,
                            std::string value);
  absl::StatusOr<std::map<std::string, std::string>> JobRecords(
      absl::string_view dir) const;

  EtcdClient* const etcd_;
  WriteFence* const fence_;
  const std::string prefix_;
  const std::string path_;
  Mutex mu_;  // one write at a time
  std::atomic<uint64_t> fenced_refused_{0};
};

}  // namespace pitstop::controller::ha

#endif  // PITSTOP_CONTROLLER_HA_ETCD_FAULT_STORE_H_
