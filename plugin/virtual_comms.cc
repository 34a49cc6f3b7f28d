#include "plugin/virtual_comms.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "plugin/nccl_caps.h"
#include "plugin/runtime.h"

namespace pitstop::plugin {

constinit CommTable g_comm_table;

namespace {

// Handles an open group holds (distinct communicators of one group). A
// group touching more releases the extra holds at once: those handles are
// then protected only while their call runs (counted in g_group_overflow).
constexpr int kMaxGroupHolds = 64;

struct GroupState {
  int depth = 0;
  int n_held = 0;
  const void* held[kMaxGroupHolds];
};

GroupState& ThreadGroup() noexcept {
  static thread_local GroupState state;
  return state;
}

std::atomic<uint64_t> g_group_overflow{0};

bool ReadEnabled() {
  const char* v = std::getenv("PITSTOP_VIRTUALIZE_COMMS");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") == 0) return true;
  std::fprintf(stderr,
               "pitstop: PITSTOP_VIRTUALIZE_COMMS='%s' is not 0 or 1; "
               "communicator virtualisation stays off\n",
               v);
  return false;
}

// The membership of a freshly created real comm, from NCCL itself.
void AskMembership(NcclComm comm, int* rank, int* n_ranks) {
  using QueryFn = NcclResult (*)(NcclComm, int*);
  static std::atomic<void*> count_cache{}, rank_cache{};
  if (*n_ranks < 0) {
    auto count = Real<QueryFn>("pncclCommCount", &count_cache);
    int n = -1;
    if (count != nullptr && count(comm, &n) == abi::kNcclSuccess) *n_ranks = n;
  }
  if (*rank < 0) {
    auto user_rank = Real<QueryFn>("pncclCommUserRank", &rank_cache);
    int r = -1;
    if (user_rank != nullptr && user_rank(comm, &r) == abi::kNcclSuccess) {
      *rank = r;
    }
  }
}

void LogOnce(std::atomic<bool>* done, const std::string& msg) {
  if (done->exchange(true)) return;
  std::fprintf(stderr, "pitstop: %s\n", msg.c_str());
}

bool ReadJoiner() {
  const char* v = std::getenv("PITSTOP_MIGRATION_ROLE");
  if (v == nullptr || v[0] == '\0') return false;
  if (std::strcmp(v, "joiner") == 0) return true;
  std::fprintf(stderr,
               "pitstop: PITSTOP_MIGRATION_ROLE='%s' is not 'joiner'; "
               "ignored\n",
               v);
  return false;
}

void EnableMigration() {
  if (Runtime* rt = Runtime::GetOrCreate()) rt->EnableMigration(&g_comm_table);
}

}  // namespace

bool InGroup() noexcept { return ThreadGroup().depth > 0; }

bool VirtualizationEnabled() noexcept {
  static const bool enabled = ReadEnabled();
  return enabled;
}

bool MigrationJoiner() noexcept {
  static const bool joiner = ReadJoiner();
  return joiner;
}

NcclResult RefusedHandle(const void* handle) noexcept {
  return g_comm_table.IsSandbox(handle) ? abi::kNcclInvalidUsage
                                        : abi::kNcclInvalidArgument;
}

NcclResult CreateSandbox(NcclComm* comm, int rank, int n_ranks,
                         uint64_t comm_hash) noexcept {
  if (comm == nullptr || n_ranks < 1 || rank < 0 || rank >= n_ranks) {
    return abi::kNcclInvalidArgument;
  }
  if (!VirtualizationEnabled()) {
    std::fprintf(stderr,
                 "pitstop: PITSTOP_MIGRATION_ROLE=joiner needs "
                 "PITSTOP_VIRTUALIZE_COMMS=1\n");
    return abi::kNcclInvalidUsage;
  }
  void* h = g_comm_table.BindSandbox(rank, n_ranks, comm_hash);
  if (h == nullptr) return abi::kNcclInvalidUsage;
  *comm = static_cast<NcclComm>(h);
  EnableMigration();
  return abi::kNcclSuccess;
}

void VirtualizeCreated(NcclComm* comms, int n, int rank, int n_ranks,
                       NcclResult r, uint64_t comm_hash) noexcept {
  if (!VirtualizationEnabled() || comms == nullptr) return;
  if (r != abi::kNcclSuccess && r != abi::kNcclInProgress) return;
  static std::atomic<bool> announced{false}, full{false};
  try {
    EnableShadowRecording();
    LogOnce(&announced, "communicator virtualisation on (" +
                            DescribeCapabilities(ProbeNcclCapabilities()) +
                            ")");
    for (int i = 0; i < n; ++i) {
      if (comms[i] == nullptr || g_comm_table.IsHandle(comms[i])) continue;
      int my_rank = rank < 0 ? -1 : rank + i;
      int size = n_ranks;
      // A non-blocking init still running may not answer yet: -1 then.
      if (r == abi::kNcclSuccess) AskMembership(comms[i], &my_rank, &size);
      void* h = g_comm_table.Bind(comms[i], my_rank, size);
      if (h == nullptr) {
        LogOnce(&full, "communicator table full (" +
                           std::to_string(CommTable::kCapacity) +
                           "); later communicators are not virtualised");
        continue;
      }
      if (i == 0) g_comm_table.SetCommHash(h, comm_hash);
      comms[i] = static_cast<NcclComm>(h);
    }
  } catch (...) {
  }
  EnableMigration();
}

void EndUse(const void* handle, bool enqueued) noexcept {
  GroupState& g = ThreadGroup();
  if (!enqueued || g.depth == 0) {
    g_comm_table.Release(handle);
    return;
  }
  for (int i = 0; i < g.n_held; ++i) {
    if (g.held[i] == handle) {  // already held until the group ends
      g_comm_table.Release(handle);
      return;
    }
  }
  if (g.n_held < kMaxGroupHolds) {
    g.held[g.n_held++] = handle;
    return;
  }
  g_group_overflow.fetch_add(1, std::memory_order_relaxed);
  g_comm_table.Release(handle);
}

void OnGroupStart(NcclResult r) noexcept {
  if (r == abi::kNcclSuccess) ++ThreadGroup().depth;
}

void OnGroupEnd() noexcept {
  GroupState& g = ThreadGroup();
  // NCCL leaves the group level even when ncclGroupEnd fails.
  if (g.depth == 0 || --g.depth > 0) return;
  for (int i = 0; i < g.n_held; ++i) g_comm_table.Release(g.held[i]);
  g.n_held = 0;
}

SwapOutcome SwapCommunicator(void* handle, void* new_comm, int new_rank,
                             int new_n_ranks) noexcept {
  return g_comm_table.Swap(handle, new_comm, new_rank, new_n_ranks);
}

bool DescribeHandle(void* handle, CommBinding* out) noexcept {
  return g_comm_table.Snapshot(handle, out);
}

}  // namespace pitstop::plugin
