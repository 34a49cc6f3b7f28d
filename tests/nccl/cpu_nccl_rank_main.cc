// cpu_nccl_rank: one rank of a CPU NCCL backend test, in its own process.
//
//   cpu_nccl_rank SCENARIO RANK NRANKS UNIQUE_ID_HEX
//
// Scenarios (each checks real data against known answers and exits 0, or
// prints what differed to stderr and exits 1):
//   collectives  every collective and send/recv, several datatypes/ops
//   split        split by parity (and NCCL_SPLIT_NOCOLOR), then shrink
//   nonblocking  config.blocking = 0: ncclInProgress, then poll
//   peer-death   the last rank exits after one all-reduce; the others see
//                an error (no hang), shrink it out, carry on, abort the old
//   error-spreads  the last rank exits; rank 1 waits on rank 0, which fails
//                on the dead rank: rank 0's error must reach rank 1
//   origin-named  the last rank exits; every other rank's failed
//                all-reduce names it, also a rank that learned of the
//                failure from a live neighbour closing its connections
//   profiled     a few all-reduces with the profiler plugin loaded
//   abort-pending  rank 0 starts a non-blocking init its peer never joins,
//                and aborts it while it is still in progress
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/nccl/cpu/nccl_functions.h"

namespace {

int g_rank = 0;
int g_failures = 0;

#define CHECK_NCCL(call)                                                      \
  do {                                                                        \
    const ncclResult_t r_ = (call);                                           \
    if (r_ != ncclSuccess) {                                                  \
      std::fprintf(stderr, "rank %d: %s failed: %d %s (%s)\n", g_rank, #call, \
                   r_, ncclGetErrorString(r_), ncclGetLastError(nullptr));    \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

template <typename T>
void Expect(const char* what, size_t i, T got, T want) {
  if (got == want) return;
  if (++g_failures <= 10) {
    std::fprintf(stderr, "rank %d: %s[%zu] = %.17g, want %.17g\n", g_rank, what,
                 i, static_cast<double>(got), static_cast<double>(want));
  }
}

bool ParseId(const char* hex, ncclUniqueId* id) {
  if (std::strlen(hex) != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

uint16_t ToBf16(float f) {  // exact for the small integers used here
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>(x >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void Collectives(ncclComm_t comm, int r, int n) {
  const size_t count = 1000;  // not a multiple of n: uneven ring chunks
  // AllReduce sum, float: element i of rank r is r + i; sum = n*i + n(n-1)/2.
  std::vector<float> a(count), out(count);
  for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(r + i);
  CHECK_NCCL(ncclAllReduce(a.data(), out.data(), count, ncclFloat32, ncclSum,
                           comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    Expect("allreduce.sum.f32", i, out[i],
           static_cast<float>(n * i + n * (n - 1) / 2));
  }
  // In place, int64 max: rank r contributes r*1000 + i.
  std::vector<int64_t> m(count);
  for (size_t i = 0; i < count; ++i) m[i] = r * 1000 + static_cast<int64_t>(i);
  CHECK_NCCL(ncclAllReduce(m.data(), m.data(), count, ncclInt64, ncclMax, comm,
                           nullptr));
  for (size_t i = 0; i < count; ++i) {
    Expect("allreduce.max.i64", i, m[i],
           static_cast<int64_t>((n - 1) * 1000 + i));
  }
  // Avg, double: (r+1) averaged = (n+1)/2.
  std::vector<double> d(count, r + 1.0);
  CHECK_NCCL(ncclAllReduce(d.data(), d.data(), count, ncclFloat64, ncclAvg,
                           comm, nullptr));
  for (size_t i = 0; i < count; ++i)
    Expect("allreduce.avg.f64", i, d[i], (n + 1) / 2.0);
  // Prod, int32: (r+2) multiplied.
  std::vector<int32_t> p(7, r + 2);
  CHECK_NCCL(ncclAllReduce(p.data(), p.data(), p.size(), ncclInt32, ncclProd,
                           comm, nullptr));
  int32_t prod = 1;
  for (int k = 0; k < n; ++k) prod *= k + 2;
  for (size_t i = 0; i < p.size(); ++i)
    Expect("allreduce.prod.i32", i, p[i], prod);
  // Bfloat16 sum of small integers (exact).
  std::vector<uint16_t> b(64, ToBf16(static_cast<float>(r + 1)));
  CHECK_NCCL(ncclAllReduce(b.data(), b.data(), b.size(), ncclBfloat16, ncclSum,
                           comm, nullptr));
  for (size_t i = 0; i < b.size(); ++i) {
    Expect("allreduce.sum.bf16", i, FromBf16(b[i]),
           static_cast<float>(n * (n + 1) / 2));
  }
  // AllGather: rank r sends 10 ints r*100 + j.
  std::vector<int32_t> g(10), all(10 * n);
  for (int j = 0; j < 10; ++j) g[j] = r * 100 + j;
  CHECK_NCCL(ncclAllGather(g.data(), all.data(), 10, ncclInt32, comm, nullptr));
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j < 10; ++j)
      Expect("allgather", k * 10 + j, all[k * 10 + j], k * 100 + j);
  }
  // ReduceScatter: element i of rank r is i*(r+1); block r of the sum.
  const size_t rc = 33;
  std::vector<float> rs(rc * n), rsout(rc);
  for (size_t i = 0; i < rs.size(); ++i)
    rs[i] = static_cast<float>(i * (r + 1));
  CHECK_NCCL(ncclReduceScatter(rs.data(), rsout.data(), rc, ncclFloat32,
                               ncclSum, comm, nullptr));
  for (size_t i = 0; i < rc; ++i) {
    Expect("reducescatter", i, rsout[i],
           static_cast<float>((r * rc + i) * n * (n + 1) / 2));
  }
  // Broadcast from the last rank; Bcast (in place) from rank 0.
  const int root = n - 1;
  std::vector<double> bc(50, r == root ? 3.25 : -1.0), bcout(50, 0.0);
  CHECK_NCCL(ncclBroadcast(bc.data(), bcout.data(), bc.size(), ncclFloat64,
                           root, comm, nullptr));
  for (size_t i = 0; i < bcout.size(); ++i)
    Expect("broadcast", i, bcout[i], 3.25);
  std::vector<uint8_t> ib(17, r == 0 ? 42 : 0);
  CHECK_NCCL(ncclBcast(ib.data(), ib.size(), ncclUint8, 0, comm, nullptr));
  for (size_t i = 0; i < ib.size(); ++i) Expect("bcast", i, ib[i], uint8_t{42});
  // Reduce (min) to rank 0: element i of rank r is 10 - r + i.
  std::vector<int32_t> rd(20), rdout(20, -7);
  for (int i = 0; i < 20; ++i) rd[i] = 10 - r + i;
  CHECK_NCCL(ncclReduce(rd.data(), r == 0 ? rdout.data() : nullptr, 20,
                        ncclInt32, ncclMin, 0, comm, nullptr));
  if (r == 0) {
    for (int i = 0; i < 20; ++i)
      Expect("reduce.min", i, rdout[i], 10 - (n - 1) + i);
  }
  // Send/recv ring in one group: send to r+1, receive from r-1.
  std::vector<int64_t> s(100), rv(100, -1);
  for (int i = 0; i < 100; ++i) s[i] = r * 1'000'000 + i;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(s.data(), s.size(), ncclInt64, next, comm, nullptr));
  CHECK_NCCL(ncclRecv(rv.data(), rv.size(), ncclInt64, prev, comm, nullptr));
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < 100; ++i)
    Expect("sendrecv", i, rv[i], int64_t{prev * 1'000'000 + i});
  // A group of two all-reduces.
  std::vector<int32_t> x(5, 1), y(5, 2);
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(
      ncclAllReduce(x.data(), x.data(), 5, ncclInt32, ncclSum, comm, nullptr));
  CHECK_NCCL(
      ncclAllReduce(y.data(), y.data(), 5, ncclInt32, ncclSum, comm, nullptr));
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < 5; ++i) {
    Expect("group.x", i, x[i], n);
    Expect("group.y", i, y[i], 2 * n);
  }
  // Queries.
  int v = 0, c = 0, u = -1, dev = -1;
  CHECK_NCCL(ncclGetVersion(&v));
  CHECK_NCCL(ncclCommCount(comm, &c));
  CHECK_NCCL(ncclCommUserRank(comm, &u));
  CHECK_NCCL(ncclCommCuDevice(comm, &dev));
  Expect("version>=22807", 0, v >= 22807, true);
  Expect("count", 0, c, n);
  Expect("userrank", 0, u, r);
  Expect("cudevice", 0, dev, r);  // one host: device = local rank
  // Bad arguments are errors, not crashes.
  Expect("bad.dtype", 0,
         static_cast<int>(ncclAllReduce(x.data(), x.data(), 5,
                                        static_cast<ncclDataType_t>(99),
                                        ncclSum, comm, nullptr)),
         static_cast<int>(ncclInvalidArgument));
}

int SumRanks(const std::vector<int>& ranks) {
  int s = 0;
  for (int x : ranks) s += x;
  return s;
}

void Split(ncclComm_t comm, int r, int n) {
  // Parity split, key = -r (reverses the order); with 4+ ranks rank 1 opts
  // out with NCCL_SPLIT_NOCOLOR.
  const bool out = n >= 4 && r == 1;
  ncclConfig_t cfg = PitstopNcclConfigInit();
  cfg.commName = "parity";
  ncclComm_t child = nullptr;
  CHECK_NCCL(ncclCommSplit(comm, out ? -1 : r % 2, -r, &child, &cfg));
  if (out) {
    Expect("nocolor.null", 0, child == nullptr, true);
  } else {
    std::vector<int> members;
    for (int k = 0; k < n; ++k) {
      if (k % 2 == r % 2 && !(n >= 4 && k == 1)) members.push_back(k);
    }
    int cn = 0, cr = -1;
    CHECK_NCCL(ncclCommCount(child, &cn));
    CHECK_NCCL(ncclCommUserRank(child, &cr));
    Expect("split.count", 0, cn, static_cast<int>(members.size()));
    int want_rank = 0;  // ordered by key = -r: highest old rank first
    for (int k : members) want_rank += k > r;
    Expect("split.rank", 0, cr, want_rank);
    int v = r;
    CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, child, nullptr));
    Expect("split.allreduce", 0, v, SumRanks(members));
    CHECK_NCCL(ncclCommFinalize(child));
    CHECK_NCCL(ncclCommDestroy(child));
  }
  // Shrink the last rank out (it takes no part) and use the result.
  if (r == n - 1) return;
  int excluded = n - 1;
  ncclComm_t small = nullptr;
  CHECK_NCCL(ncclCommShrink(comm, &excluded, 1, &small, nullptr, 0));
  int sn = 0;
  CHECK_NCCL(ncclCommCount(small, &sn));
  Expect("shrink.count", 0, sn, n - 1);
  int v = 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, small, nullptr));
  Expect("shrink.allreduce", 0, v, n - 1);
  CHECK_NCCL(ncclCommFinalize(small));
  CHECK_NCCL(ncclCommDestroy(small));
}

// The survivors rebuild without the dead last rank (shrink with abort) and
// check the new communicator with one all-reduce.
ncclComm_t ShrinkOutTheLastRank(ncclComm_t comm, int r, int n) {
  int dead = n - 1;
  ncclComm_t small = nullptr;
  CHECK_NCCL(ncclCommShrink(comm, &dead, 1, &small, nullptr, 1));
  int w = r + 1;
  CHECK_NCCL(ncclAllReduce(&w, &w, 1, ncclInt32, ncclSum, small, nullptr));
  Expect("after.allreduce", 0, w, (n - 1) * n / 2);
  return small;
}

void PeerDeath(ncclComm_t comm, int r, int n) {
  int v = 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr));
  Expect("before.allreduce", 0, v, n);
  if (r == n - 1) _exit(0);  // dies: no finalize, sockets close
  // The dead peer's connection is gone: an error, not a hang.
  std::vector<float> big(1 << 16, 1.0f);
  const ncclResult_t res = ncclAllReduce(big.data(), big.data(), big.size(),
                                         ncclFloat32, ncclSum, comm, nullptr);
  Expect("dead.allreduce.failed", 0, res != ncclSuccess, true);
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  Expect("dead.async", 0, async != ncclSuccess, true);
  // Revoke, then rebuild without the dead rank, then drop the old one.
  CHECK_NCCL(ncclCommRevoke(comm, 0));
  Expect("revoked.allreduce", 0,
         static_cast<int>(
             ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr)),
         static_cast<int>(ncclInvalidUsage));
  ncclComm_t small = ShrinkOutTheLastRank(comm, r, n);
  CHECK_NCCL(ncclCommAbort(comm));
  // An aborted communicator is gone: using it is an error, not a crash.
  Expect("aborted.destroy", 0, static_cast<int>(ncclCommDestroy(comm)),
         static_cast<int>(ncclInvalidArgument));
  CHECK_NCCL(ncclCommFinalize(small));
  CHECK_NCCL(ncclCommDestroy(small));
}

// Rank 0 receives from the dead last rank (an error at once); rank 1
// receives from rank 0, which never sends. Rank 1 only returns if rank 0's
// failure reaches it: the op timeout is set far beyond the test's deadline.
void ErrorSpreads(ncclComm_t comm, int r, int n) {
  int v = 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr));
  if (r == n - 1) _exit(0);
  int64_t x = 0;
  const int from = r == 0 ? n - 1 : 0;
  const ncclResult_t res = ncclRecv(&x, 1, ncclInt64, from, comm, nullptr);
  Expect("spread.recv.failed", 0, res != ncclSuccess, true);
  ncclComm_t small = ShrinkOutTheLastRank(comm, r, n);
  CHECK_NCCL(ncclCommAbort(comm));
  CHECK_NCCL(ncclCommFinalize(small));
  CHECK_NCCL(ncclCommDestroy(small));
}

void FailureNamesItsOrigin(ncclComm_t comm, int r, int n) {
  int v = 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr));
  if (r == n - 1) _exit(0);
  const ncclResult_t res =
      ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr);
  Expect("origin.failed", 0, res != ncclSuccess, true);
  const std::string why = ncclGetLastError(nullptr);
  // "rank 3" followed by no digit ("closed by rank 3 (", "send to rank 3:").
  const std::string dead = "rank " + std::to_string(n - 1);
  bool named = false;
  for (size_t at = why.find(dead); at != std::string::npos && !named;
       at = why.find(dead, at + 1)) {
    const size_t end = at + dead.size();
    named = end == why.size() ||
            !std::isdigit(static_cast<unsigned char>(why[end]));
  }
  if (!named) {
    std::fprintf(stderr, "rank %d: the error does not name %s: %s\n", r,
                 dead.c_str(), why.c_str());
    ++g_failures;
  }
  CHECK_NCCL(ncclCommAbort(comm));
}

void Profiled(ncclComm_t comm, int /*r*/, int n) {
  std::vector<float> a(4096, 1.0f);
  for (int k = 0; k < 5; ++k) {
    CHECK_NCCL(ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat32, ncclSum,
                             comm, nullptr));
  }
  Expect("profiled.value", 0, a[0], static_cast<float>(n * n * n * n * n));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: cpu_nccl_rank SCENARIO RANK NRANKS UNIQUE_ID_HEX\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const int r = std::atoi(argv[2]);
  const int n = std::atoi(argv[3]);
  g_rank = r;
  ncclUniqueId id;
  if (!ParseId(argv[4], &id)) {
    std::fprintf(stderr, "bad unique id\n");
    return 2;
  }
  ncclComm_t comm = nullptr;
  if (scenario == "abort-pending") {
    if (r != 0) return 0;  // the peer that never comes
    ncclConfig_t cfg = PitstopNcclConfigInit();
    cfg.blocking = 0;
    Expect("pending.init", 0,
           static_cast<int>(ncclCommInitRankConfig(&comm, n, id, r, &cfg)),
           static_cast<int>(ncclInProgress));
    ncclResult_t state = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    Expect("pending.state", 0, static_cast<int>(state),
           static_cast<int>(ncclInProgress));
    // Must return without waiting for the init (whose timeout is set far
    // beyond the test's deadline).
    CHECK_NCCL(ncclCommAbort(comm));
    std::fflush(stderr);
    _exit(g_failures == 0 ? 0 : 1);  // the abandoned init thread stays
  }
  if (scenario == "nonblocking") {
    ncclConfig_t cfg = PitstopNcclConfigInit();
    cfg.blocking = 0;
    const ncclResult_t first = ncclCommInitRankConfig(&comm, n, id, r, &cfg);
    Expect("nonblocking.init", 0, static_cast<int>(first),
           static_cast<int>(ncclInProgress));
    ncclResult_t state = ncclInProgress;
    // The documented NCCL pattern: poll until the init completed.
    while (state == ncclInProgress) {
      CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
      if (state == ncclInProgress) usleep(1000);  // poll interval
    }
    Expect("nonblocking.done", 0, static_cast<int>(state),
           static_cast<int>(ncclSuccess));
    int v = 2;
    CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, nullptr));
    Expect("nonblocking.allreduce", 0, v, 2 * n);
  } else {
    CHECK_NCCL(ncclCommInitRank(&comm, n, id, r));
    if (scenario == "collectives") {
      Collectives(comm, r, n);
    } else if (scenario == "split") {
      Split(comm, r, n);
    } else if (scenario == "peer-death") {
      PeerDeath(comm, r, n);
      return g_failures == 0 ? 0 : 1;  // the old comm was aborted
    } else if (scenario == "error-spreads") {
      ErrorSpreads(comm, r, n);
      return g_failures == 0 ? 0 : 1;
    } else if (scenario == "origin-named") {
      FailureNamesItsOrigin(comm, r, n);
      return g_failures == 0 ? 0 : 1;  // aborted
    } else if (scenario == "profiled") {
      Profiled(comm, r, n);
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
  }
  CHECK_NCCL(ncclCommFinalize(comm));
  CHECK_NCCL(ncclCommDestroy(comm));
  return g_failures == 0 ? 0 : 1;
}
