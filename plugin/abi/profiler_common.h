// Types shared by every version of NCCL's profiler plugin ABI.
//
// Our own declarations, written from the facts in
// ../shared/docs/nccl-plugin-abi.md (secs. 3-5); no NVIDIA header is used.
// All sizes are LP64 (x86-64 / aarch64 Linux).
#ifndef PITSTOP_PLUGIN_ABI_PROFILER_COMMON_H_
#define PITSTOP_PLUGIN_ABI_PROFILER_COMMON_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace pitstop::abi {

// ncclResult_t: a 4-byte C enum.
enum NcclResult : int {
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};
static_assert(sizeof(NcclResult) == 4);

// ncclDebugLogLevel values and subsystem flags (sec. 3).
enum NcclLogLevel : int {
  kNcclLogNone = 0,
  kNcclLogVersion = 1,
  kNcclLogWarn = 2,
  kNcclLogInfo = 3,
  kNcclLogAbort = 4,
  kNcclLogTrace = 5,
};
inline constexpr unsigned long kNcclLogSubsysInit = 0x1;
inline constexpr unsigned long kNcclLogSubsysProfile = 0x4000;

// ncclDebugLogger_t.
using NcclLogger = void (*)(NcclLogLevel level, unsigned long flags,
                            const char* file, int line, const char* fmt, ...);

// Event type bits: descriptor `type` and activation-mask bits (sec. 4).
enum EventType : uint32_t {
  kGroup = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,
  kNetPlugin = 1u << 7,
  kGroupApi = 1u << 8,
  kCollApi = 1u << 9,
  kP2pApi = 1u << 10,
  kKernelLaunch = 1u << 11,
  kCeColl = 1u << 12,
  kCeSync = 1u << 13,
  kCeBatch = 1u << 14,
};

// Event states, the `recordEventState` argument (sec. 5). A 4-byte C enum on
// the wire; we take it as int.
enum EventState : int {
  kProxyStepSendGpuWait = 8,
  kProxyStepSendWait = 9,
  kProxyStepRecvWait = 10,
  kProxyStepRecvFlushWait = 11,
  kProxyStepRecvGpuWait = 12,
  kProxyCtrlIdle = 13,
  kProxyCtrlActive = 14,
  kProxyCtrlSleep = 15,
  kProxyCtrlWakeup = 16,
  kProxyCtrlAppend = 17,
  kProxyCtrlAppendEnd = 18,
  kProxyOpInProgress = 19,
  kProxyStepSendPeerWait = 20,
  kNetPluginUpdate = 21,
  kKernelChStop = 22,
  kGroupStartApiStop = 23,
  kGroupEndApiStart = 24,
};

// Network-plugin event ids (sec. 10): low 16 bits version, next 16 type.
inline constexpr int64_t kNetPluginVersionMask = 0xffff;
inline constexpr int64_t kNetPluginTypeIb = 1 << 16;
inline constexpr int64_t kNetPluginTypeSocket = 2 << 16;

// IB plugin event data, version 1.
struct NetIbEventV1 {
  uint8_t type;  // 1 = QP
  struct {
    int device;
    uint64_t wr_id;
    int opcode;
    int qp_num;
    size_t length;
  } qp;
};
static_assert(offsetof(NetIbEventV1, qp) == 8);
static_assert(sizeof(NetIbEventV1) == 40);

// Socket plugin event data, version 1.
struct NetSocketEventV1 {
  uint8_t type;  // 1 = socket
  struct {
    int fd;
    int op;
    size_t length;
  } sock;
};
static_assert(offsetof(NetSocketEventV1, sock) == 8);

}  // namespace pitstop::abi

#endif  // PITSTOP_PLUGIN_ABI_PROFILER_COMMON_H_
