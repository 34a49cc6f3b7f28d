// Our own declarations of the NCCL public API types the CPU backend
// implements (facts: ../shared/docs/nccl-plugin-abi.md §3 and §16, NCCL
// 2.28.9 nccl.h). Not NCCL's header: written from the documented layout and
// pinned with static_asserts so a mismatch fails the build, not a run.
//
// C types only (the library's entry points are extern "C"). The enums have
// a fixed underlying int, as in NCCL's ABI: an out-of-range value from a
// caller (a bad datatype, a user reduction op above ncclNumOps) is then a
// valid value to check, not undefined behaviour (UBSan flagged the
// backend's own bad-datatype test).
#ifndef PITSTOP_SRC_NCCL_CPU_NCCL_API_H_
#define PITSTOP_SRC_NCCL_CPU_NCCL_API_H_

#include <climits>
#include <cstddef>
#include <cstdint>

extern "C" {

typedef enum : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum : int {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5
} ncclRedOp_t;

typedef struct {
  char internal[128];
} ncclUniqueId;

// ncclConfig_t (struct tag ncclConfig_v22800 in 2.28). Fields past
// `commName` are declared for layout only; the CPU backend reads `size`,
// `magic`, `blocking` and `commName`.
typedef struct {
  size_t size;
  unsigned int magic;    // 0xcafebeef
  unsigned int version;  // NCCL_VERSION code of the header used
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

}  // extern "C"

static_assert(sizeof(ncclResult_t) == 4);
static_assert(sizeof(ncclDataType_t) == 4);
static_assert(sizeof(ncclRedOp_t) == 4);
static_assert(sizeof(ncclUniqueId) == 128);
static_assert(offsetof(ncclConfig_t, magic) == 8);
static_assert(offsetof(ncclConfig_t, blocking) == 16);
static_assert(offsetof(ncclConfig_t, netName) == 32);
static_assert(offsetof(ncclConfig_t, commName) == 48);
static_assert(sizeof(ncclConfig_t) == 80);

namespace pitstop::cpunccl {

inline constexpr unsigned int kConfigMagic = 0xcafebeef;
inline constexpr int kConfigUndefInt = INT_MIN;
inline constexpr int kSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR
inline constexpr int kShrinkAbort = 1;    // NCCL_SHRINK_ABORT
// The version the backend reports: 2.28.9 (shrink since 2.27, revoke since
// 2.28.7), code = major*10000 + minor*100 + patch.
inline constexpr int kReportedVersion = 22809;

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_NCCL_API_H_
