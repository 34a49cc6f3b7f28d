#include "src/controller/ha/leader_election.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

namespace pitstop::controller::ha {
namespace {

// Stop trusting the lease this long before it may expire in etcd: covers
// the keep-alive's flight time and clock rate differences.
constexpr absl::Duration kSafetyMargin = absl::Milliseconds(300);

}  // namespace

LeaderElection::LeaderElection(EtcdClient* etcd, Options options)
    : etcd_(etcd), options_(std::move(options)) {}

LeaderElection::~LeaderElection() { Stop(true); }

absl::Time LeaderElection::SteadyNow() const {
  return absl::UnixEpoch() +
         absl::Nanoseconds(options_.clock->MonotonicNanos());
}

void LeaderElection::Start() {
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void LeaderElection::Stop(bool resign) {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  bool was_leader = false;
  {
    MutexLock lock(&mu_);
    was_leader = leader_;
  }
  if (was_leader) StepDown("controller stopping", resign);
}

bool LeaderElection::IsLeader() const {
  MutexLock lock(&mu_);
  return leader_ && !taking_over_ && !fence_refused_ &&
         SteadyNow() < valid_until_;
}

std::string LeaderElection::Leader() const {
  MutexLock lock(&mu_);
  return leader_address_;
}

EtcdFence LeaderElection::Fence() const {
  MutexLock lock(&mu_);
  if (!leader_) return EtcdFence{options_.key, 0, 0};
  return fence_;
}

void LeaderElection::FenceRefused() {
  MutexLock lock(&mu_);
  fence_refused_ = true;
  cv_.SignalAll();
}

uint64_t LeaderElection::terms_won() const {
  MutexLock lock(&mu_);
  return terms_won_;
}

void LeaderElection::Run() {
  for (;;) {
    bool leader = false;
    absl::Duration wait = options_.poll;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      leader = leader_;
    }
    if (leader) {
      KeepAlive();
      MutexLock lock(&mu_);
      // Deposed by this keep-alive: poll like a follower, so the new
      // leader is known (and named to clients) soon.
      if (leader_) wait = std::max(granted_ttl_ / 3, absl::Milliseconds(100));
    } else {
      Campaign();
    }
    MutexLock lock(&mu_);
    if (stop_) return;
    if (!fence_refused_) cv_.WaitWithTimeout(&mu_, wait);
  }
}

void LeaderElection::Campaign() {
  auto log = Logger("ha");
  absl::StatusOr<std::optional<EtcdKv>> cur = etcd_->Get(options_.key);
  if (!cur.ok()) {
    log->warn("election: {}", cur.status().ToString());
    return;
  }
  if (cur->has_value()) {
    MutexLock lock(&mu_);
    leader_address_ = (*cur)->value;
    return;
  }
  const absl::Time sent = SteadyNow();
  absl::Duration granted;
  absl::StatusOr<int64_t> lease = etcd_->Grant(options_.ttl, &granted);
  if (!lease.ok()) {
    log->warn("election: {}", lease.status().ToString());
    return;
  }
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* c = txn.add_compare();
  c->set_key(options_.key);
  c->set_target(etcdserverpb::Compare::CREATE);
  c->set_result(etcdserverpb::Compare::EQUAL);
  c->set_create_revision(0);  // the key does not exist
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(options_.key);
  put->set_value(options_.self);
  put->set_lease(*lease);
  txn.add_failure()->mutable_request_range()->set_key(options_.key);
  absl::StatusOr<etcdserverpb::TxnResponse> r = etcd_->Txn(txn);
  if (!r.ok() || !r->succeeded()) {
    (void)etcd_->Revoke(*lease);
    if (!r.ok()) {
      log->warn("election: {}", r.status().ToString());
    } else if (r->responses_size() > 0 &&
               r->responses(0).response_range().kvs_size() > 0) {
      MutexLock lock(&mu_);
      leader_address_ = r->responses(0).response_range().kvs(0).value();
    }
    return;
  }
  {
    MutexLock lock(&mu_);
    fence_ = EtcdFence{options_.key, *lease, r->header().revision()};
    granted_ttl_ = granted;
    valid_until_ = sent + granted - kSafetyMargin;
    fence_refused_ = false;
    // The store's fenced writes need the fence while on_elected loads
    // state; IsLeader() stays false until it is done.
    leader_ = true;
    taking_over_ = true;
    leader_address_ = options_.self;
  }
  log->info("elected leader (lease {:x}, ttl {} s, revision {})", *lease,
            absl::ToInt64Seconds(granted), r->header().revision());
  if (options_.on_elected) {
    absl::Status s = options_.on_elected();
    if (!s.ok()) {
      StepDown(absl::StrCat("taking over failed: ", s.message()), true);
      return;
    }
  }
  MutexLock lock(&mu_);
  taking_over_ = false;
  ++terms_won_;
}

void LeaderElection::KeepAlive() {
  bool refused = false;
  {
    MutexLock lock(&mu_);
    refused = fence_refused_;
  }
  if (refused) {
    StepDown("etcd refused a fenced write: another controller leads", false);
    return;
  }
  const absl::Time sent = SteadyNow();
  int64_t lease = 0;
  {
    MutexLock lock(&mu_);
    lease = fence_.lease;
  }
  absl::StatusOr<absl::Duration> left = etcd_->KeepAliveOnce(lease);
  if (left.ok() && *left <= absl::ZeroDuration()) {
    StepDown("the leader lease expired", false);
    return;
  }
  bool expired = false;
  {
    MutexLock lock(&mu_);
    if (left.ok()) {
      valid_until_ = sent + *left - kSafetyMargin;
      return;
    }
    expired = SteadyNow() >= valid_until_;
  }
  if (expired) {
    StepDown(absl::StrCat("cannot renew the leader lease: ",
                          left.status().message()),
             false);
    return;
  }
  Logger("ha")->warn("lease keep-alive failed (retrying): {}",
                     left.status().ToString());
}

void LeaderElection::StepDown(const std::string& why, bool revoke) {
  int64_t lease = 0;
  {
    MutexLock lock(&mu_);
    if (!leader_) return;
    leader_ = false;
    taking_over_ = false;
    lease = fence_.lease;
    fence_ = EtcdFence{options_.key, 0, 0};
    leader_address_.clear();
  }
  Logger("ha")->warn("stepped down: {}", why);
  if (options_.on_lost) options_.on_lost(why);
  if (revoke && lease != 0) (void)etcd_->Revoke(lease);
}

}  // namespace pitstop::controller::ha
