// Header-only library code instantiated into ours: an Abseil container and
// a protobuf repeated field, each behind a mutex that one method forgets.
// The racing accesses happen inside the library's templates
// (absl::...::raw_hash_set, google::protobuf::RepeatedField), so the top
// frame of the report is the library's, compiled into pitstop: a
// suppression naming those namespaces would hide every race on pitstop's
// own state (docs/testing.md).
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "pitstop/sync.h"
#include "pitstop/v1/common.pb.h"
#include "tests/sanitizers/canary_shapes.h"

namespace pitstop::canary {
namespace {

// Short loops: TSan keeps a bounded history per thread, and both stacks of
// the report must be restored to name the planted frame.
constexpr int kPerThread = 100;

// A component's state behind its mutex, like the controller's and the
// agent's tables.
class RankTable {
 public:
  RankTable() {
    // No rehash while the threads insert: a missed race must not crash.
    ranks_by_pid_.reserve(4 * kPerThread);
    info_.mutable_global_ranks()->Reserve(4 * kPerThread);
  }
  void Add(int pid) {
    MutexLock lock(&mu_);
    ranks_by_pid_[pid] = pid % 8;
    info_.add_global_ranks(pid);
    last_host_ = kHosts[pid % 2];
  }
  // Planted: the lock is forgotten (and the static check with it, as a
  // hurried change might do). A reader: the race is on the table's size,
  // inside raw_hash_set's own member functions.
  size_t CountForgettingTheLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ranks_by_pid_.size();
  }
  void AddToProtoForgettingTheLock(int pid) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    info_.add_global_ranks(pid);
  }
  // A std::string member: at -O1 GCC compiles the assignment into the
  // canary (basic_string::_M_assign is the top frame); unoptimised, the
  // same copy runs inside libstdc++.so (docs/testing.md, "Suppressions").
  void SetHostForgettingTheLock(int pid) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    last_host_ = kHosts[pid % 2];
  }

 private:
  Mutex mu_;
  absl::flat_hash_map<int, int> ranks_by_pid_ ABSL_GUARDED_BY(mu_);
  v1::CommunicatorInfo info_ ABSL_GUARDED_BY(mu_);
  // Longer than the small-string buffer: assignment copies on the heap.
  static inline const std::string kHosts[2] = {
      "node-with-a-name-longer-than-sso-0",
      "node-with-a-name-longer-than-sso-1"};
  std::string last_host_ ABSL_GUARDED_BY(mu_);
};

// One thread adds under the lock, the other calls `forgetful`.
template <typename Forgetful>
void TwoThreads(RankTable* table, Forgetful forgetful) {
  std::thread locked([&] {
    for (int i = 0; i < kPerThread; ++i) table->Add(i);
  });
  std::thread unlocked([&] {
    for (int i = kPerThread; i < 2 * kPerThread; ++i) forgetful(i);
  });
  locked.join();
  unlocked.join();
}

// Keeps the compiler from dropping a read nothing uses.
void Use(size_t v) { asm volatile("" : : "r"(v) : "memory"); }

}  // namespace

int MapRace() {
  RankTable table;
  TwoThreads(&table, [&](int) { Use(table.CountForgettingTheLock()); });
  return 0;
}

int ProtoRace() {
  RankTable table;
  TwoThreads(&table, [&](int pid) { table.AddToProtoForgettingTheLock(pid); });
  return 0;
}

int StringRace() {
  RankTable table;
  TwoThreads(&table, [&](int pid) { table.SetHostForgettingTheLock(pid); });
  return 0;
}

}  // namespace pitstop::canary
