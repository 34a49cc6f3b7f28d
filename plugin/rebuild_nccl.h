// The NCCL calls a migration's rebuild makes, and NCCL's rules for them as
// code (docs/migration.md "Two-phase rebuild and state transfer (library)").
//
// NcclOps is a table of the real pncclX entry points (LoadRealNcclOps), so a
// test can hand the rebuilder fakes. OwnedComm is one real communicator the
// rebuilder created or took over, with the lifecycle NCCL demands:
//
//   kEmpty ──StartInit──► kInitializing ──Poll──► kReady ──┐
//                              │                           │ FinalizeAndDestroy
//                              └──────Poll──► kFailed      ▼ (kReady only)
//   any live state ──Abort──► kAborted (never destroyed)   kFreed
//
// - never destroy an aborted communicator (NCCL has freed it: a destroy
//   would be a use-after-free);
// - drain ncclInProgress before any management call: finalize and destroy
//   wait for the non-blocking init to end (abort is how an init is
//   cancelled, so it may come at any time);
// - a communicator in error is aborted, not finalized;
// - no management call while operations are outstanding: the caller's part
//   (the rebuilder only frees a communicator no handle can reach: swapped
//   out, or never bound).
//
// Not thread-safe: each OwnedComm is used under its owner's lock or by one
// thread at a time.
#ifndef PITSTOP_PLUGIN_REBUILD_NCCL_H_
#define PITSTOP_PLUGIN_REBUILD_NCCL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "plugin/virtual_comms.h"

namespace pitstop::plugin {

// ncclConfig_t of NCCL 2.28 (struct tag ncclConfig_v22800; layout:
// nccl-plugin-abi.md §16). The rebuilder sets size, magic, version and
// blocking = 0; everything else stays "undefined" (INT_MIN / NULL).
struct NcclConfigV22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char* net_name;
  int split_share;
  int traffic_class;
  const char* comm_name;
  int collnet_enable;
  int cta_policy;
  int shrink_share;
  int nvls_ctas;
  int n_channels_per_net_peer;
  int nvlink_centric_sched;
};
static_assert(sizeof(NcclConfigV22800) == 80);
NcclConfigV22800 NonBlockingConfig();

// ncclDataType_t ncclUint8 (the state transfer moves bytes).
inline constexpr int kNcclUint8 = 1;

struct NcclOps {
  NcclResult (*init_rank_config)(NcclComm* comm, int n_ranks, NcclUniqueId id,
                                 int rank, void* config) = nullptr;
  NcclResult (*get_async_error)(NcclComm comm, NcclResult* result) = nullptr;
  NcclResult (*finalize)(NcclComm comm) = nullptr;
  NcclResult (*destroy)(NcclComm comm) = nullptr;
  NcclResult (*abort)(NcclComm comm) = nullptr;
  NcclResult (*send)(const void* buf, size_t count, int dtype, int peer,
                     NcclComm comm, void* stream) = nullptr;
  NcclResult (*recv)(void* buf, size_t count, int dtype, int peer,
                     NcclComm comm, void* stream) = nullptr;
  const char* (*error_string)(NcclResult r) = nullptr;
  const char* (*last_error)(NcclComm comm) = nullptr;
  // PHASE_MAKE_IDS (a joiner): a real id holds this process's address.
  NcclResult (*get_unique_id)(NcclUniqueId* id) = nullptr;
};

// The real pncclX entry points; false (and `*missing` names the first one
// absent) when the NCCL in the process lacks any.
bool LoadRealNcclOps(NcclOps* out, std::string* missing) noexcept;

// "ncclRemoteError (6): <NCCL's last error text>" for error messages.
std::string DescribeNcclError(const NcclOps& ops, NcclComm comm, NcclResult r);

class OwnedComm {
 public:
  enum class State { kEmpty, kInitializing, kReady, kFailed, kAborted, kFreed };

  OwnedComm() = default;
  // Takes over a communicator that is ready (a swapped-out old one).
  static OwnedComm Adopt(NcclComm comm);

  // Starts a non-blocking init of rank `rank` of `n_ranks` with `id`
  // (kCommIdBytes). kEmpty only. False with `*error` set when NCCL
  // refused at once: state kFailed, and a communicator NCCL returned stays
  // for the caller to Abort (with no lock held that a drain may need).
  bool StartInit(const NcclOps& ops, const std::string& id, int rank,
                 int n_ranks, std::string* error);
  // kInitializing: asks NCCL whether the init ended. Returns the state.
  State Poll(const NcclOps& ops, std::string* error);
  // Aborts any live communicator (initialising, ready or failed): state
  // kAborted, never destroyed afterwards. No-op otherwise.
  NcclResult Abort(const NcclOps& ops);
  // Frees a ready communicator: waits out an init still running
  // (ncclInProgress), aborts one in error, otherwise finalizes (NCCL's
  // barrier) and destroys. Refuses an aborted one (ncclInvalidUsage).
  NcclResult FinalizeAndDestroy(const NcclOps& ops);

  State state() const { return state_; }
  NcclComm comm() const { return comm_; }
  bool live() const {
    return state_ == State::kInitializing || state_ == State::kReady ||
           state_ == State::kFailed;
  }

 private:
  NcclComm comm_ = nullptr;
  State state_ = State::kEmpty;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_REBUILD_NCCL_H_
