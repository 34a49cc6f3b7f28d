#include "src/nccl/emulator/emulator_loader.h"

#include <dlfcn.h>

#include <cstdio>

namespace pitstop::emu {

void* DlopenByName(const std::string& name, const std::string& built_library,
                   std::string* err) {
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) return h;
  const char* why = dlerror();
  *err = why != nullptr ? why : "dlopen failed";
  if (name.find('/') != std::string::npos) return nullptr;
  const std::string dir = built_library.substr(0, built_library.rfind('/') + 1);
  return dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL);
}

std::string PrintNcclLogLine(abi::NcclLogLevel level, const char* fmt,
                             va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  std::fprintf(stderr, "[emulated NCCL %s] %s\n",
               level == abi::kNcclLogWarn ? "WARN" : "INFO", buf);
  return buf;
}

}  // namespace pitstop::emu
