#include "plugin/nccl_caps.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

namespace pitstop::plugin {
namespace {

constexpr int Code(int major, int minor, int patch) {
  return major * 10000 + minor * 100 + patch;
}

}  // namespace

NcclCapabilities CapabilitiesOf(int version_code) noexcept {
  NcclCapabilities c;
  if (version_code <= 0) return c;
  c.version = version_code;
  if (version_code >= 10000) {
    c.major = version_code / 10000;
    c.minor = version_code / 100 % 100;
  } else {
    // Before 2.9 the code was major*1000 + minor*100 + patch (2.8.4: 2804).
    c.major = version_code / 1000;
    c.minor = version_code / 100 % 10;
  }
  c.patch = version_code % 100;
  const int normal = Code(c.major, c.minor, c.patch);
  c.shrink = normal >= Code(2, 27, 0);
  c.revoke = normal >= Code(2, 28, 7);
  c.grow = normal >= Code(2, 29, 2);
  return c;
}

NcclCapabilities ProbeNcclCapabilities() noexcept {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_acquire);
  if (v == 0) {
    using GetVersionFn = int (*)(int*);
    auto fn =
        reinterpret_cast<GetVersionFn>(dlsym(RTLD_DEFAULT, "pncclGetVersion"));
    int got = 0;
    if (fn != nullptr && fn(&got) == 0 && got > 0) {
      v = got;
      cached.store(v, std::memory_order_release);
    }
  }
  return CapabilitiesOf(v);
}

std::string DescribeCapabilities(const NcclCapabilities& caps) {
  if (caps.version == 0) return "no NCCL loaded";
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  return "NCCL " + std::to_string(caps.major) + "." +
         std::to_string(caps.minor) + "." + std::to_string(caps.patch) +
         ": shrink " + yes(caps.shrink) + ", revoke " + yes(caps.revoke) +
         ", grow " + yes(caps.grow);
}

}  // namespace pitstop::plugin
