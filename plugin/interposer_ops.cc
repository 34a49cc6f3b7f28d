// The interposed NCCL entry points that use a communicator without making
// or freeing one: collectives, send/recv, groups, queries, user reduction
// ops and buffer registration (signatures: nccl-plugin-abi.md §16; enums
// are passed as int, which is their ABI).
//
// They exist so that a pitstop handle (PITSTOP_VIRTUALIZE_COMMS=1) never
// reaches NCCL: each maps its communicator argument to the real one
// (virtual_comms.h) and forwards to pncclX. A communicator that is not ours
// passes through unchanged, so with virtualisation off every call reaches
// NCCL exactly as without the interposer (one lookup of the real symbol,
// cached, and an address-range check on the way). Missing in the loaded
// NCCL -> ncclSystemError, no crash.
#include <atomic>
#include <cstddef>

#include "plugin/virtual_comms.h"

namespace pp = pitstop::plugin;
using pp::NcclComm;
using pp::NcclResult;

using Stream = void*;  // cudaStream_t, opaque here

namespace {

// What a collective's output is, for shadow iterations (built only on the
// shadow paths: OnCollective calls it lazily).
pp::ShadowCall Shadow(pp::ShadowFunc func, int dtype, int op, int root,
                      size_t count, void* recv) {
  return pp::ShadowCall{func, dtype, op, root, count, recv};
}

}  // namespace

PITSTOP_EXPORT NcclResult ncclAllReduce(const void* send, void* recv,
                                        size_t count, int dtype, int op,
                                        NcclComm comm, Stream stream) noexcept {
  using Fn =
      NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclAllReduce);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kAllReduce, dtype, op, -1, count, recv);
      },
      [&](NcclComm c) {
        return real(send, recv, count, dtype, op, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclAllGather(const void* send, void* recv,
                                        size_t send_count, int dtype,
                                        NcclComm comm, Stream stream) noexcept {
  using Fn = NcclResult (*)(const void*, void*, size_t, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclAllGather);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kAllGather, dtype, -1, -1, send_count,
                      recv);
      },
      [&](NcclComm c) {
        return real(send, recv, send_count, dtype, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclReduceScatter(const void* send, void* recv,
                                            size_t recv_count, int dtype,
                                            int op, NcclComm comm,
                                            Stream stream) noexcept {
  using Fn =
      NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclReduceScatter);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kReduceScatter, dtype, op, -1, recv_count,
                      recv);
      },
      [&](NcclComm c) {
        return real(send, recv, recv_count, dtype, op, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclBroadcast(const void* send, void* recv,
                                        size_t count, int dtype, int root,
                                        NcclComm comm, Stream stream) noexcept {
  using Fn =
      NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclBroadcast);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kBroadcast, dtype, -1, root, count, recv);
      },
      [&](NcclComm c) {
        return real(send, recv, count, dtype, root, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclBcast(void* buff, size_t count, int dtype,
                                    int root, NcclComm comm,
                                    Stream stream) noexcept {
  using Fn = NcclResult (*)(void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclBcast);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kBroadcast, dtype, -1, root, count, buff);
      },
      [&](NcclComm c) { return real(buff, count, dtype, root, c, stream); });
}

PITSTOP_EXPORT NcclResult ncclReduce(const void* send, void* recv, size_t count,
                                     int dtype, int op, int root, NcclComm comm,
                                     Stream stream) noexcept {
  using Fn = NcclResult (*)(const void*, void*, size_t, int, int, int, NcclComm,
                            Stream);
  PITSTOP_REAL(Fn, pncclReduce);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kReduce, dtype, op, root, count, recv);
      },
      [&](NcclComm c) {
        return real(send, recv, count, dtype, op, root, c, stream);
      });
}

// AlltoAll, Gather and Scatter: NCCL 2.28.
PITSTOP_EXPORT NcclResult ncclAlltoAll(const void* send, void* recv,
                                       size_t count, int dtype, NcclComm comm,
                                       Stream stream) noexcept {
  using Fn = NcclResult (*)(const void*, void*, size_t, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclAlltoAll);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kAlltoAll, dtype, -1, -1, count, recv);
      },
      [&](NcclComm c) { return real(send, recv, count, dtype, c, stream); });
}

PITSTOP_EXPORT NcclResult ncclGather(const void* send, void* recv, size_t count,
                                     int dtype, int root, NcclComm comm,
                                     Stream stream) noexcept {
  using Fn =
      NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclGather);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kGather, dtype, -1, root, count, recv);
      },
      [&](NcclComm c) {
        return real(send, recv, count, dtype, root, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclScatter(const void* send, void* recv,
                                      size_t count, int dtype, int root,
                                      NcclComm comm, Stream stream) noexcept {
  using Fn =
      NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclScatter);
  return pp::OnCollective(
      comm,
      [&] {
        return Shadow(pp::ShadowFunc::kScatter, dtype, -1, root, count, recv);
      },
      [&](NcclComm c) {
        return real(send, recv, count, dtype, root, c, stream);
      });
}

PITSTOP_EXPORT NcclResult ncclSend(const void* buf, size_t count, int dtype,
                                   int peer, NcclComm comm,
                                   Stream stream) noexcept {
  using Fn = NcclResult (*)(const void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclSend);
  return pp::OnComm(comm, [&](NcclComm c) {
    return real(buf, count, dtype, peer, c, stream);
  });
}

PITSTOP_EXPORT NcclResult ncclRecv(void* buf, size_t count, int dtype, int peer,
                                   NcclComm comm, Stream stream) noexcept {
  using Fn = NcclResult (*)(void*, size_t, int, int, NcclComm, Stream);
  PITSTOP_REAL(Fn, pncclRecv);
  return pp::OnComm(comm, [&](NcclComm c) {
    return real(buf, count, dtype, peer, c, stream);
  });
}

// Operations queued inside a group run at the outermost ncclGroupEnd: their
// handles stay held until it returns, so no swap lands in between.
PITSTOP_EXPORT NcclResult ncclGroupStart() noexcept {
  using Fn = NcclResult (*)();
  PITSTOP_REAL(Fn, pncclGroupStart);
  const NcclResult r = real();
  pp::OnGroupStart(r);
  return r;
}

PITSTOP_EXPORT NcclResult ncclGroupEnd() noexcept {
  using Fn = NcclResult (*)();
  PITSTOP_REAL(Fn, pncclGroupEnd);
  const NcclResult r = real();
  pp::OnGroupEnd();
  return r;
}

// NCCL 2.22+: ends the group like ncclGroupEnd (it only simulates the
// launch), so it leaves the thread's group level too; unseen, every later
// operation would stay held and every swap be refused.
PITSTOP_EXPORT NcclResult ncclGroupSimulateEnd(void* sim_info) noexcept {
  using Fn = NcclResult (*)(void*);
  PITSTOP_REAL(Fn, pncclGroupSimulateEnd);
  const NcclResult r = real(sim_info);
  pp::OnGroupEnd();
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommCount(NcclComm comm, int* count) noexcept {
  using Fn = NcclResult (*)(NcclComm, int*);
  PITSTOP_REAL(Fn, pncclCommCount);
  const NcclResult r =
      pp::OnQuery(comm, [&](NcclComm c) { return real(c, count); });
  return r == pitstop::abi::kNcclInvalidUsage
             ? pp::ShadowQuery(comm, count, nullptr, r)
             : r;
}

PITSTOP_EXPORT NcclResult ncclCommUserRank(NcclComm comm, int* rank) noexcept {
  using Fn = NcclResult (*)(NcclComm, int*);
  PITSTOP_REAL(Fn, pncclCommUserRank);
  const NcclResult r =
      pp::OnQuery(comm, [&](NcclComm c) { return real(c, rank); });
  return r == pitstop::abi::kNcclInvalidUsage
             ? pp::ShadowQuery(comm, nullptr, rank, r)
             : r;
}

PITSTOP_EXPORT NcclResult ncclCommCuDevice(NcclComm comm,
                                           int* device) noexcept {
  using Fn = NcclResult (*)(NcclComm, int*);
  PITSTOP_REAL(Fn, pncclCommCuDevice);
  return pp::OnQuery(comm, [&](NcclComm c) { return real(c, device); });
}

PITSTOP_EXPORT NcclResult ncclCommGetAsyncError(NcclComm comm,
                                                int* result) noexcept {
  using Fn = NcclResult (*)(NcclComm, int*);
  PITSTOP_REAL(Fn, pncclCommGetAsyncError);
  return pp::OnQuery(comm, [&](NcclComm c) { return real(c, result); });
}

// Returns text, not a result: a released handle asks for the thread's last
// error without a communicator (NCCL's own fallback).
PITSTOP_EXPORT const char* ncclGetLastError(NcclComm comm) noexcept {
  using Fn = const char* (*)(NcclComm);
  pp::stats::CountInterposed(pp::stats::Interposed::pncclGetLastError);
  static std::atomic<void*> cache{};
  auto real = pp::Real<Fn>("pncclGetLastError", &cache);
  if (real == nullptr) return "NCCL is not loaded";
  if (!pp::g_comm_table.IsHandle(comm)) return real(comm);
  const pp::CommBinding* b = pp::g_comm_table.Acquire(comm);
  if (b == nullptr) return real(nullptr);
  const char* text = real(static_cast<NcclComm>(b->comm));
  pp::EndUse(comm, /*enqueued=*/false);
  return text;
}

// User reduction ops and registrations belong to the real communicator
// they were made on: counted per handle, and a swap is refused while any
// is alive (the rebuild would have to recreate them on the new one).
PITSTOP_EXPORT NcclResult ncclRedOpCreatePreMulSum(int* op, void* scalar,
                                                   int dtype, int residence,
                                                   NcclComm comm) noexcept {
  using Fn = NcclResult (*)(int*, void*, int, int, NcclComm);
  PITSTOP_REAL(Fn, pncclRedOpCreatePreMulSum);
  const NcclResult r = pp::OnQuery(
      comm, [&](NcclComm c) { return real(op, scalar, dtype, residence, c); });
  if (r == pitstop::abi::kNcclSuccess) pp::g_comm_table.AddUserObjects(comm, 1);
  return r;
}

PITSTOP_EXPORT NcclResult ncclRedOpDestroy(int op, NcclComm comm) noexcept {
  using Fn = NcclResult (*)(int, NcclComm);
  PITSTOP_REAL(Fn, pncclRedOpDestroy);
  const NcclResult r =
      pp::OnQuery(comm, [&](NcclComm c) { return real(op, c); });
  if (r == pitstop::abi::kNcclSuccess) {
    pp::g_comm_table.AddUserObjects(comm, -1);
  }
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommRegister(NcclComm comm, void* buff,
                                           size_t size,
                                           void** handle) noexcept {
  using Fn = NcclResult (*)(NcclComm, void*, size_t, void**);
  PITSTOP_REAL(Fn, pncclCommRegister);
  const NcclResult r = pp::OnQuery(
      comm, [&](NcclComm c) { return real(c, buff, size, handle); });
  if (r == pitstop::abi::kNcclSuccess) pp::g_comm_table.AddUserObjects(comm, 1);
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommDeregister(NcclComm comm,
                                             void* handle) noexcept {
  using Fn = NcclResult (*)(NcclComm, void*);
  PITSTOP_REAL(Fn, pncclCommDeregister);
  const NcclResult r =
      pp::OnQuery(comm, [&](NcclComm c) { return real(c, handle); });
  if (r == pitstop::abi::kNcclSuccess) {
    pp::g_comm_table.AddUserObjects(comm, -1);
  }
  return r;
}

// Window registration: NCCL 2.27 (ncclWindow_t is an opaque pointer).
PITSTOP_EXPORT NcclResult ncclCommWindowRegister(NcclComm comm, void* buff,
                                                 size_t size, void** win,
                                                 int win_flags) noexcept {
  using Fn = NcclResult (*)(NcclComm, void*, size_t, void**, int);
  PITSTOP_REAL(Fn, pncclCommWindowRegister);
  const NcclResult r = pp::OnQuery(
      comm, [&](NcclComm c) { return real(c, buff, size, win, win_flags); });
  if (r == pitstop::abi::kNcclSuccess) pp::g_comm_table.AddUserObjects(comm, 1);
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommWindowDeregister(NcclComm comm,
                                                   void* win) noexcept {
  using Fn = NcclResult (*)(NcclComm, void*);
  PITSTOP_REAL(Fn, pncclCommWindowDeregister);
  const NcclResult r =
      pp::OnQuery(comm, [&](NcclComm c) { return real(c, win); });
  if (r == pitstop::abi::kNcclSuccess) {
    pp::g_comm_table.AddUserObjects(comm, -1);
  }
  return r;
}
