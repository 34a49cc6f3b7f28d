// One rank of the communicator-virtualisation tests (virt_test.cc), an
// application of the public nccl* API over the CPU NCCL backend.
//
//   plugin_virt_rank SCENARIO RANK NRANKS ID1_HEX ID2_HEX
//
// Built twice: plugin_virt_rank runs with libnccl-profiler-pitstop.so
// LD_PRELOADed (the deployment shape); plugin_virt_swap_rank has the
// interposer linked in (PITSTOP_VIRT_STATIC) so it can call the internal
// rebuild API, which the library does not export.
//
// Scenarios (exit 0, or print what differed to stderr and exit 1):
//   virtual  PITSTOP_VIRTUALIZE_COMMS=1: handles are not real comms, every
//            collective, queries, split, a foreign comm, abort, destroy
//   plain    virtualisation off: the application gets the real comm
//   swap     (static build) swap to a fresh comm between two all-reduces
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/nccl/cpu/nccl_functions.h"
#ifdef PITSTOP_VIRT_STATIC
#include "plugin/virtual_comms.h"
#endif

// The backend's real entry points, bypassing the interposer: what a
// communicator made before the preload (or by the rebuild) looks like.
extern "C" {
ncclResult_t pncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t pncclCommCount(const ncclComm_t, int*);
ncclResult_t pncclCommDestroy(ncclComm_t);
}

namespace {

int g_rank = 0;
int g_failures = 0;

#define CHECK_NCCL(call)                                                       \
  do {                                                                         \
    const ncclResult_t r_ = (call);                                            \
    if (r_ != ncclSuccess) {                                                   \
      std::fprintf(stderr, "rank %d: %s failed: %d (%s)\n", g_rank, #call, r_, \
                   ncclGetLastError(nullptr));                                 \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#define EXPECT_EQ_INT(got, want)                                               \
  do {                                                                         \
    const long long g_ = (got), w_ = (want);                                   \
    if (g_ != w_) {                                                            \
      std::fprintf(stderr, "rank %d: line %d: %s = %lld, want %lld\n", g_rank, \
                   __LINE__, #got, g_, w_);                                    \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

bool ParseId(const char* hex, ncclUniqueId* id) {
  if (std::strlen(hex) != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// Sum over ranks of (rank + i + salt): n*(i+salt) + n(n-1)/2.
void CheckAllReduce(ncclComm_t comm, int r, int n, int salt) {
  const size_t count = 777;
  std::vector<float> a(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(r + i + salt);
  CHECK_NCCL(ncclAllReduce(a.data(), out.data(), count, ncclFloat32, ncclSum,
                           comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * (i + salt) + n * (n - 1) / 2);
    if (out[i] != want && ++g_failures <= 5) {
      std::fprintf(stderr, "rank %d: allreduce[%zu] = %g, want %g\n", g_rank, i,
                   out[i], want);
    }
  }
}

void CheckQueries(ncclComm_t comm, int r, int n) {
  int count = -1, rank = -1, dev = -1;
  ncclResult_t async = ncclInternalError;
  CHECK_NCCL(ncclCommCount(comm, &count));
  CHECK_NCCL(ncclCommUserRank(comm, &rank));
  CHECK_NCCL(ncclCommCuDevice(comm, &dev));
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT_EQ_INT(count, n);
  EXPECT_EQ_INT(rank, r);
  EXPECT_EQ_INT(dev, r);  // the backend: index among the ranks on this host
  EXPECT_EQ_INT(async, ncclSuccess);
}

// AllGather, ReduceScatter, Broadcast, Bcast, Reduce and a send/recv ring
// in a group, through the communicator the application holds.
void CheckOtherCollectives(ncclComm_t comm, int r, int n) {
  std::vector<int> mine(4), all(4 * n, -1);
  for (int i = 0; i < 4; ++i) mine[i] = 10 * r + i;
  CHECK_NCCL(ncclAllGather(mine.data(), all.data(), 4, ncclInt32, comm, 0));
  for (int i = 0; i < 4 * n; ++i) EXPECT_EQ_INT(all[i], 10 * (i / 4) + i % 4);
  std::vector<int> block(2, -1), full(2 * n);
  for (int i = 0; i < 2 * n; ++i) full[i] = i + r;
  CHECK_NCCL(ncclReduceScatter(full.data(), block.data(), 2, ncclInt32, ncclSum,
                               comm, 0));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ_INT(block[i], n * (2 * r + i) + n * (n - 1) / 2);
  }
  int b = r == 0 ? 42 : -1, c = r == 1 % n ? 7 : -1;
  CHECK_NCCL(ncclBroadcast(&b, &b, 1, ncclInt32, 0, comm, 0));
  CHECK_NCCL(ncclBcast(&c, 1, ncclInt32, 1 % n, comm, 0));
  EXPECT_EQ_INT(b, 42);
  EXPECT_EQ_INT(c, 7);
  int v = r + 1, red = -1;
  CHECK_NCCL(ncclReduce(&v, &red, 1, ncclInt32, ncclMax, n - 1, comm, 0));
  if (r == n - 1) EXPECT_EQ_INT(red, n);
  int to_next = 100 + r, from_prev = -1;
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(&to_next, 1, ncclInt32, (r + 1) % n, comm, 0));
  CHECK_NCCL(ncclRecv(&from_prev, 1, ncclInt32, (r + n - 1) % n, comm, 0));
  CHECK_NCCL(ncclGroupEnd());
  EXPECT_EQ_INT(from_prev, 100 + (r + n - 1) % n);
}

bool IsRealComm(ncclComm_t comm) {
  int n = 0;
  return pncclCommCount(comm, &n) == ncclSuccess;
}

// Split, user reduction op and abort through handles.
void CheckDerived(ncclComm_t world, int r, int n) {
  ncclComm_t child = nullptr;
  CHECK_NCCL(ncclCommSplit(world, r % 2, r, &child, nullptr));
  EXPECT_EQ_INT(IsRealComm(child), 0);
  const int child_n = (n + 1 - r % 2) / 2;
  CheckQueries(child, r / 2, child_n);
  CheckAllReduce(child, r / 2, child_n, 3);
  CHECK_NCCL(ncclCommDestroy(child));
  // The backend has no user reduction ops: the interposer answers
  // ncclSystemError instead of passing our handle anywhere.
  using PreMulSum =
      ncclResult_t (*)(ncclRedOp_t*, void*, ncclDataType_t, int, ncclComm_t);
  auto pre_mul = reinterpret_cast<PreMulSum>(
      dlsym(RTLD_DEFAULT, "ncclRedOpCreatePreMulSum"));
  float scalar = 2;
  ncclRedOp_t op;
  EXPECT_EQ_INT(pre_mul != nullptr, 1);
  if (pre_mul != nullptr) {
    EXPECT_EQ_INT(pre_mul(&op, &scalar, ncclFloat32, 0, world),
                  ncclSystemError);
  }
  ncclComm_t dup = nullptr;
  CHECK_NCCL(ncclCommSplit(world, 0, r, &dup, nullptr));
  CheckAllReduce(dup, r, n, 5);
  CHECK_NCCL(ncclCommAbort(dup));
  // Aborted: released, never destroyed a second time, never used again.
  EXPECT_EQ_INT(ncclCommDestroy(dup), ncclInvalidArgument);
  float x = 1, y = 0;
  EXPECT_EQ_INT(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, dup, nullptr),
                ncclInvalidArgument);
}

void Virtual(int r, int n, const ncclUniqueId& id1, const ncclUniqueId& id2) {
  ncclComm_t h = nullptr;
  CHECK_NCCL(ncclCommInitRank(&h, n, id1, r));
  // A pitstop handle: the backend does not know it.
  EXPECT_EQ_INT(IsRealComm(h), 0);
  CheckQueries(h, r, n);
  CheckAllReduce(h, r, n, 0);
  CheckOtherCollectives(h, r, n);
  CheckDerived(h, r, n);
  // A communicator the interposer never saw passes through unchanged.
  ncclComm_t foreign = nullptr;
  CHECK_NCCL(pncclCommInitRank(&foreign, n, id2, r));
  CheckQueries(foreign, r, n);
  CheckAllReduce(foreign, r, n, 9);
  CHECK_NCCL(ncclCommDestroy(foreign));
  CHECK_NCCL(ncclCommFinalize(h));
  CHECK_NCCL(ncclCommDestroy(h));
  EXPECT_EQ_INT(ncclCommDestroy(h), ncclInvalidArgument);
  int count = 0;
  EXPECT_EQ_INT(ncclCommCount(h, &count), ncclInvalidArgument);
}

void Plain(int r, int n, const ncclUniqueId& id1) {
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRank(&comm, n, id1, r));
  EXPECT_EQ_INT(IsRealComm(comm), 1);
  CheckQueries(comm, r, n);
  CheckAllReduce(comm, r, n, 0);
  CHECK_NCCL(ncclCommDestroy(comm));
}

#ifdef PITSTOP_VIRT_STATIC
namespace pp = pitstop::plugin;

void CheckSwapRefusals(ncclComm_t h, ncclComm_t spare, int r, int n) {
  float x = 1, y = 0;
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, h, nullptr));
  // The all-reduce is queued until ncclGroupEnd: no swap now.
  pp::SwapOutcome o = pp::SwapCommunicator(h, spare, r, n);
  EXPECT_EQ_INT(static_cast<int>(o.code),
                static_cast<int>(pp::SwapCode::kOutstanding));
  CHECK_NCCL(ncclGroupEnd());
  EXPECT_EQ_INT(static_cast<int>(y), n);
  o = pp::SwapCommunicator(spare, spare, r, n);
  EXPECT_EQ_INT(static_cast<int>(o.code),
                static_cast<int>(pp::SwapCode::kNotAHandle));
  o = pp::SwapCommunicator(h, spare, n, n);
  EXPECT_EQ_INT(static_cast<int>(o.code),
                static_cast<int>(pp::SwapCode::kBadArgument));
}

void Swap(int r, int n, const ncclUniqueId& id1, const ncclUniqueId& id2) {
  ncclComm_t h = nullptr;
  CHECK_NCCL(ncclCommInitRank(&h, n, id1, r));
  pp::CommBinding before;
  EXPECT_EQ_INT(pp::DescribeHandle(h, &before), 1);
  EXPECT_EQ_INT(before.epoch, 1);
  EXPECT_EQ_INT(before.rank, r);
  EXPECT_EQ_INT(before.n_ranks, n);
  EXPECT_EQ_INT(before.comm != static_cast<void*>(h), 1);
  CheckAllReduce(h, r, n, 0);
  // The rebuild's part: a fresh communicator of the same ranks.
  ncclComm_t fresh = nullptr;
  CHECK_NCCL(pncclCommInitRank(&fresh, n, id2, r));
  CheckSwapRefusals(h, fresh, r, n);
  const pp::SwapOutcome o = pp::SwapCommunicator(h, fresh, r, n);
  if (o.code != pp::SwapCode::kOk) {
    std::fprintf(stderr, "rank %d: swap refused: %s\n", r, o.error.c_str());
    std::exit(1);
  }
  EXPECT_EQ_INT(o.old_comm == before.comm, 1);
  EXPECT_EQ_INT(o.new_epoch, 2);
  // The old one is ours to free; were the handle still bound to it, the
  // next all-reduce would fail on the destroyed communicator.
  CHECK_NCCL(pncclCommDestroy(static_cast<ncclComm_t>(o.old_comm)));
  CheckAllReduce(h, r, n, 1);
  CheckQueries(h, r, n);
  pp::CommBinding after;
  EXPECT_EQ_INT(pp::DescribeHandle(h, &after), 1);
  EXPECT_EQ_INT(after.epoch, 2);
  EXPECT_EQ_INT(after.comm == static_cast<void*>(fresh), 1);
  EXPECT_EQ_INT(static_cast<int>(pp::SwapCommunicator(h, fresh, r, n).code),
                static_cast<int>(pp::SwapCode::kBadArgument));
  CHECK_NCCL(ncclCommDestroy(h));  // destroys `fresh`
  EXPECT_EQ_INT(IsRealComm(fresh), 0);
  EXPECT_EQ_INT(
      static_cast<int>(pp::SwapCommunicator(h, before.comm, r, n).code),
      static_cast<int>(pp::SwapCode::kReleased));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SCENARIO RANK NRANKS ID1_HEX ID2_HEX\n",
                 argv[0]);
    return 2;
  }
  const char* scenario = argv[1];
  g_rank = std::atoi(argv[2]);
  const int n = std::atoi(argv[3]);
  ncclUniqueId id1, id2;
  if (!ParseId(argv[4], &id1) || !ParseId(argv[5], &id2)) {
    std::fprintf(stderr, "rank %d: bad unique id\n", g_rank);
    return 2;
  }
  if (std::strcmp(scenario, "virtual") == 0) {
    Virtual(g_rank, n, id1, id2);
  } else if (std::strcmp(scenario, "plain") == 0) {
    Plain(g_rank, n, id1);
#ifdef PITSTOP_VIRT_STATIC
  } else if (std::strcmp(scenario, "swap") == 0) {
    Swap(g_rank, n, id1, id2);
#endif
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  if (g_failures > 0) {
    std::fprintf(stderr, "rank %d: %d check(s) failed\n", g_rank, g_failures);
    return 1;
  }
  return 0;
}
