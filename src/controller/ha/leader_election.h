// Leader election on etcd by a lease: campaign by creating `key` (value =
// this controller's address) bound to a fresh lease, only if the key does
// not exist; keep the lease alive every ttl/3; step down when a keep-alive
// says the lease is gone, when keep-alives fail until the lease may have
// expired, or when the store reports a fenced write. A kill -9'd leader's
// lease expires after its TTL and a follower's next campaign wins.
//
// The fence (key, lease, create revision) is what every durable write
// compares in its etcd transaction (EtcdFaultStore), so a deposed leader
// that still believes it leads cannot write.
#ifndef PITSTOP_CONTROLLER_HA_LEADER_ELECTION_H_
#define PITSTOP_CONTROLLER_HA_LEADER_ELECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "src/controller/ha/etcd_client.h"

namespace pitstop::controller::ha {

// What a fenced write proves in its transaction: `key` still exists with
// this create revision and carries this lease.
struct EtcdFence {
  std::string key;
  int64_t lease = 0;  // 0 = not the leader
  int64_t create_revision = 0;
};

// Thread-safe. Start/Stop from the owner; callbacks run on the election's
// own thread.
class LeaderElection {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    std::string key = "/pitstop/leader";
    std::string self;  // this controller's address, the key's value
    // Lease TTL: a dead leader is replaced after about this long. etcd
    // raises it to its minimum (1.5 x election timeout, 2 s by default).
    absl::Duration ttl = absl::Seconds(2);
    // How often a follower tries to win.
    absl::Duration poll = absl::Milliseconds(100);
    // Runs once elected, before IsLeader() turns true; an error gives the
    // leadership up again (the lease is revoked).
    std::function<absl::Status()> on_elected;
    // Runs after stepping down, with the reason.
    std::function<void(const std::string& why)> on_lost;
  };

  LeaderElection(EtcdClient* etcd, Options options);
  ~LeaderElection();  // Stop(/*resign=*/true)

  void Start();
  // Ends the loop; with `resign` a leader revokes its lease so a follower
  // takes over at once (graceful shutdown).
  void Stop(bool resign = true);

  // True while leading and the lease is surely still valid locally (last
  // keep-alive's send time + TTL, less a margin).
  bool IsLeader() const;
  // The leader's address as last seen ("" when none is known).
  std::string Leader() const;
  EtcdFence Fence() const;
  // The store saw etcd refuse a fenced write: step down now.
  void FenceRefused();
  uint64_t terms_won() const;
  const Options& options() const { return options_; }

 private:
  void Run();
  void Campaign();
  void KeepAlive();
  void StepDown(const std::string& why, bool revoke);
  absl::Time SteadyNow() const;

  EtcdClient* const etcd_;
  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  bool taking_over_ ABSL_GUARDED_BY(mu_) = false;  // in on_elected
  bool fence_refused_ ABSL_GUARDED_BY(mu_) = false;
  EtcdFence fence_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  absl::Time valid_until_ ABSL_GUARDED_BY(mu_);
  absl::Duration granted_ttl_ ABSL_GUARDED_BY(mu_);
  uint64_t terms_won_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace pitstop::controller::ha

#endif  // PITSTOP_CONTROLLER_HA_LEADER_ELECTION_H_
