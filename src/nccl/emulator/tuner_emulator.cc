#include "src/nccl/emulator/tuner_emulator.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plugin/abi/profiler_common.h"
#include "src/nccl/emulator/emulator_loader.h"
#include "tuner/abi/tuner_abi.h"

namespace pitstop::emu {
namespace {

// The plugin's log lines, process-wide (ncclDebugLog is one function).
std::mutex& LogMu() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::vector<std::string>& LogLines() {
  static std::vector<std::string>* lines = new std::vector<std::string>;
  return *lines;
}

void EmulatedNcclLog(abi::NcclLogLevel level, unsigned long /*flags*/,
                     const char* /*file*/, int /*line*/, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = PrintNcclLogLine(level, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(LogMu());
  LogLines().push_back(std::move(line));
}

void* OpenByName(const std::string& name, std::string* err) {
  return DlopenByName(name, BuiltTunerPath(), err);
}

}  // namespace

std::string BuiltTunerPath() { return PITSTOP_TUNER_PATH; }

CostTable DefaultCostTable() {
  CostTable t;
  for (auto& row : t) row.fill(-1.0f);
  // microseconds, shaped like a 1 GiB all-reduce over 2+ nodes
  t[0] = {9000.0f, 5200.0f, 4100.0f};  // TREE
  t[1] = {8800.0f, 5000.0f, 4300.0f};  // RING
  t[6] = {-1.0f, -1.0f, 4700.0f};      // PAT
  return t;
}

std::vector<int> TunerVersionsOf(int nccl_version) {
  int minor = (nccl_version / 100) % 100;
  int major = nccl_version / 10000;
  if (major != 2 || minor < 24 || minor > 30) return {};
  int newest = minor >= 30 ? 6 : minor >= 28 ? 5 : 4;
  std::vector<int> out;
  for (int v = newest; v >= 2; --v) out.push_back(v);
  return out;
}

absl::StatusOr<std::unique_ptr<TunerEmulator>> TunerEmulator::Create(
    const TunerLoadOptions& options) {
  std::string value = options.plugin;
  if (value.empty()) {
    const char* env = std::getenv("NCCL_TUNER_PLUGIN");
    if (env != nullptr) value = env;
  }
  std::vector<int> versions = TunerVersionsOf(options.nccl_version);
  if (versions.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL ", options.nccl_version, ": no tuner ABI known (2.24-2.30)"));
  }
  std::vector<std::string> tried;
  const std::string first = value.empty() ? "libnccl-tuner.so" : value;
  tried.push_back(first);
  std::string err;
  void* lib = OpenByName(first, &err);
  const bool looks_like_lib = value.rfind("lib", 0) == 0 && value.size() > 3 &&
                              value.compare(value.size() - 3, 3, ".so") == 0;
  if (lib == nullptr && !value.empty() &&
      value.find('/') == std::string::npos && !looks_like_lib) {
    tried.push_back("libnccl-tuner-" + value + ".so");
    lib = OpenByName(tried.back(), &err);
  }
  if (lib == nullptr) {
    return absl::NotFoundError(absl::StrCat("tuner plugin not found; tried ",
                                            absl::StrJoin(tried, ", "), ": ",
                                            err));
  }
  auto emu = std::unique_ptr<TunerEmulator>(new TunerEmulator);
  emu->lib_ = lib;
  for (int v : versions) {
    void* sym = dlsym(lib, absl::StrCat("ncclTunerPlugin_v", v).c_str());
    if (sym != nullptr) {
      emu->version_ = v;
      emu->table_ = sym;
      break;
    }
  }
  if (emu->table_ == nullptr || emu->version_ < 4) {
    return absl::NotFoundError(
        absl::StrCat(value, ": no ncclTunerPlugin_v", versions.front(),
                     "..v4 (the emulator drives v4-v6)"));
  }
  Dl_info info{};
  emu->path_ = dladdr(emu->table_, &info) != 0 && info.dli_fname != nullptr
                   ? info.dli_fname
                   : value;
  return emu;
}

TunerEmulator::~TunerEmulator() {
  if (lib_ != nullptr) dlclose(lib_);
}

const char* TunerEmulator::plugin_name() const {
  return static_cast<const abi::TunerV4*>(table_)->name;  // first member
}

std::vector<std::string> TunerEmulator::log_lines() const {
  std::lock_guard<std::mutex> lock(LogMu());
  return LogLines();
}

absl::StatusOr<std::unique_ptr<TunerComm>> TunerEmulator::InitComm(
    const TunerCommSpec& spec) {
  void* ctx = nullptr;
  abi::NcclResult rc;
  if (version_ == 4) {
    rc = static_cast<abi::TunerV4*>(table_)->init(spec.n_ranks, spec.n_nodes,
                                                  &EmulatedNcclLog, &ctx);
  } else {
    // NCCL's defaults would be here; zeros are enough for a tuner that
    // reads no constant.
    abi::NvlDomainInfoV5 nvl{static_cast<int>(spec.n_nodes),
                             static_cast<int>(spec.n_ranks / spec.n_nodes),
                             static_cast<int>(spec.n_ranks / spec.n_nodes)};
    abi::TunerConstantsV5 constants{};
    auto init = version_ == 5 ? static_cast<abi::TunerV5*>(table_)->init
                              : static_cast<abi::TunerV6*>(table_)->init;
    rc = init(&ctx, spec.comm_hash, spec.n_ranks, spec.n_nodes,
              &EmulatedNcclLog, &nvl, &constants);
  }
  if (rc != abi::kNcclSuccess) {
    return absl::InternalError(
        absl::StrCat("tuner init returned ncclResult ", static_cast<int>(rc)));
  }
  return std::unique_ptr<TunerComm>(new TunerComm(this, ctx));
}

CollDecision TunerComm::GetCollInfo(int func, size_t n_bytes,
                                    const CostTable& costs) {
  CollDecision d;
  float table[kTunerAlgos][kTunerProtos];
  for (int a = 0; a < kTunerAlgos; ++a) {
    for (int p = 0; p < kTunerProtos; ++p) table[a][p] = costs[a][p];
  }
  int n_channels = 0;
  // The same member offset in every version (static_asserts in tuner_abi.h).
  auto fn = static_cast<abi::TunerV4*>(emu_->table_)->get_coll_info;
  d.result = fn(context_, static_cast<abi::NcclFunc>(func), n_bytes,
                /*num_pipe_ops=*/1, reinterpret_cast<float**>(table),
                kTunerAlgos, kTunerProtos, /*reg_buff=*/0, &n_channels);
  d.n_channels = n_channels;
  float best = 3.6e9f;
  for (int a = 0; a < kTunerAlgos; ++a) {
    for (int p = 0; p < kTunerProtos; ++p) {
      d.costs[a][p] = table[a][p];
      if (table[a][p] >= 0.0f && table[a][p] < best) {
        best = table[a][p];
        d.algo = a;
        d.proto = p;
      }
    }
  }
  return d;
}

int TunerComm::Finalize() {
  if (finalized_) return 0;
  finalized_ = true;
  if (context_ == nullptr) return 0;
  abi::NcclResult rc;
  switch (emu_->version_) {
    case 4:
      rc = static_cast<abi::TunerV4*>(emu_->table_)->destroy(context_);
      break;
    case 5:
      rc = static_cast<abi::TunerV5*>(emu_->table_)->finalize(context_);
      break;
    default:
      rc = static_cast<abi::TunerV6*>(emu_->table_)->finalize(context_);
      break;
  }
  return static_cast<int>(rc);
}

TunerComm::~TunerComm() { Finalize(); }

}  // namespace pitstop::emu
