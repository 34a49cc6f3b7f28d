// Which communicator-rebuild primitives the loaded NCCL has, from its
// version (pncclGetVersion): the rebuild chooses between shrink, revoke and
// grow by these, never by probing symbols one by one.
//
// Facts (../shared/docs/nccl-plugin-abi.md §16): ncclCommShrink since 2.27,
// ncclCommRevoke since 2.28.7, ncclCommGrow since 2.29.2; the version code
// is major*10000 + minor*100 + patch from 2.9 on (major*1000 + minor*100 +
// patch before).
//
// Threads: any thread; ProbeNcclCapabilities caches its first successful
// answer.
#ifndef PITSTOP_PLUGIN_NCCL_CAPS_H_
#define PITSTOP_PLUGIN_NCCL_CAPS_H_

#include <string>

namespace pitstop::plugin {

struct NcclCapabilities {
  int version = 0;  // NCCL's code, e.g. 22809; 0: no NCCL in the process
  int major = 0, minor = 0, patch = 0;
  bool shrink = false;  // ncclCommShrink
  bool revoke = false;  // ncclCommRevoke
  bool grow = false;    // ncclCommGrow
};

// Pure: what a version code means.
NcclCapabilities CapabilitiesOf(int version_code) noexcept;

// The loaded NCCL's (pncclGetVersion found with dlsym); version 0 while
// no NCCL is loaded (not cached then, so a later dlopen is seen).
NcclCapabilities ProbeNcclCapabilities() noexcept;

// "NCCL 2.28.9: shrink yes, revoke yes, grow no" for logs.
std::string DescribeCapabilities(const NcclCapabilities& caps);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_NCCL_CAPS_H_
