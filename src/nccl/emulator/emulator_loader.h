// What the profiler and tuner emulators share: loading a plugin by name the
// way NCCL does, and standing in for ncclDebugLog.
//
// Thread-safety: both functions may be called from any thread.

#ifndef PITSTOP_SRC_NCCL_EMULATOR_EMULATOR_LOADER_H_
#define PITSTOP_SRC_NCCL_EMULATOR_EMULATOR_LOADER_H_

#include <cstdarg>
#include <string>

#include "plugin/abi/profiler_common.h"

namespace pitstop::emu {

// dlopen(name, RTLD_NOW | RTLD_LOCAL), as NCCL does. Sanitizer runtimes
// intercept dlopen, which hides the executable's RUNPATH from the loader;
// so a bare name that fails is tried again in the directory of
// `built_library` (the plugin built with this tree). Returns nullptr with
// the first dlerror() in *err when neither loads.
void* DlopenByName(const std::string& name, const std::string& built_library,
                   std::string* err);

// Formats one plugin log line (printf-style `fmt` with `ap`), prints it to
// stderr tagged "[emulated NCCL WARN|INFO]" and returns it.
std::string PrintNcclLogLine(abi::NcclLogLevel level, const char* fmt,
                             va_list ap);

}  // namespace pitstop::emu

#endif  // PITSTOP_SRC_NCCL_EMULATOR_EMULATOR_LOADER_H_
