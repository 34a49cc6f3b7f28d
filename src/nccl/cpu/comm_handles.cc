#include "src/nccl/cpu/comm_handles.h"

#include <strings.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pitstop::cpunccl {

namespace {

thread_local std::string t_last_error;

std::mutex g_live_mu;
std::set<ncclComm_t>* g_live = nullptr;  // guarded by g_live_mu

void AddLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (g_live == nullptr) g_live = new std::set<ncclComm_t>();
  g_live->insert(comm);
}
bool RemoveLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  return g_live != nullptr && g_live->erase(comm) != 0;
}

}  // namespace

const char* LastError() { return t_last_error.c_str(); }

bool IsLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  return g_live != nullptr && g_live->count(comm) != 0;
}
ncclResult_t Fail(ncclResult_t r, const std::string& msg) {
  t_last_error = msg;
  return r;
}

ncclResult_t FromStatus(const absl::Status& st) {
  if (st.ok()) return ncclSuccess;
  t_last_error = std::string(st.message());
  switch (st.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return ncclRemoteError;
    case absl::StatusCode::kInvalidArgument:
      return ncclInvalidArgument;
    case absl::StatusCode::kFailedPrecondition:
      return ncclInvalidUsage;
    default:
      return ncclInternalError;
  }
}

// The usable communicator behind a handle, waiting for a non-blocking init
// to finish. Sets *r and returns nullptr when there is none.
CpuComm* Ready(ncclComm_t comm, ncclResult_t* r, bool allow_revoked) {
  if (comm == nullptr || !IsLive(comm)) {
    *r = Fail(ncclInvalidArgument,
              "invalid communicator (NULL, destroyed "
              "or aborted)");
    return nullptr;
  }
  CommState* s = comm->state.get();
  if (s->init_thread.joinable()) s->init_thread.join();
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->comm == nullptr) {
    *r = Fail(static_cast<ncclResult_t>(s->init_result.load()),
              "communicator init failed: " + s->init_error);
    return nullptr;
  }
  if (comm->revoked && !allow_revoked) {
    *r = Fail(ncclInvalidUsage, "communicator was revoked");
    return nullptr;
  }
  if (comm->finalized) {
    *r = Fail(ncclInvalidUsage, "communicator was finalized");
    return nullptr;
  }
  *r = ncclSuccess;
  return s->comm.get();
}

ncclResult_t ParseConfig(const ncclConfig_t* config, ParsedConfig* out) {
  if (config == nullptr) return ncclSuccess;
  if (config->magic != kConfigMagic) {
    return Fail(ncclInvalidArgument,
                "ncclConfig_t not initialised with NCCL_CONFIG_INITIALIZER "
                "(bad magic)");
  }
  if (config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) &&
      config->blocking != kConfigUndefInt) {
    out->blocking = config->blocking != 0;
  }
  if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(void*) &&
      config->commName != nullptr) {
    out->name = config->commName;
  }
  return ncclSuccess;
}

uint64_t HashId(const ncclUniqueId& id) {
  uint64_t h = 5381;  // NCCL's getHash: DJB2a over the 128 bytes
  for (char ch : id.internal) {
    h = ((h << 5) + h) ^ static_cast<uint64_t>(static_cast<int64_t>(ch));
  }
  return h;
}

ncclResult_t ReadTopologyFile(uint64_t comm_hash, int rank) {
  const char* path = std::getenv("NCCL_TOPO_FILE");
  if (path == nullptr) return ncclSuccess;
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return Fail(ncclSystemError,
                absl::StrCat("NCCL_TOPO_FILE ", path, ": cannot read"));
  }
  const char* debug = std::getenv("NCCL_DEBUG");
  if (debug == nullptr ||
      (strcasecmp(debug, "INFO") != 0 && strcasecmp(debug, "TRACE") != 0)) {
    return ncclSuccess;
  }
  std::string nets;
  const std::string xml = text.str();
  const std::regex tag("<net\\s[^>]*>");
  const std::regex name("\\sname=\"([^\"]*)\"");
  const std::regex speed("\\sspeed=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tag);
       it != std::sregex_iterator(); ++it) {
    const std::string t = it->str();
    std::smatch m;
    absl::StrAppend(&nets, nets.empty() ? "" : " ",
                    std::regex_search(t, m, name) ? m[1].str() : "?", ":",
                    std::regex_search(t, m, speed) ? m[1].str() : "-");
  }
  std::fprintf(stderr,
               "cpu-nccl: NCCL INFO NCCL_TOPO_FILE set by environment to %s\n"
               "cpu-nccl: NCCL INFO comm 0x%llx rank %d topology nets "
               "(name:speed Mb/s) %s\n",
               path, static_cast<unsigned long long>(comm_hash), rank,
               nets.c_str());
  return ncclSuccess;
}

// Starts (blocking or in the background) the init of a new communicator.
ncclResult_t StartComm(ncclComm_t* out, CommOptions options, bool blocking) {
  auto state = std::make_shared<CommState>();
  auto* handle = new ncclComm{state};
  auto run = [state, options] {
    auto c = CpuComm::Create(options);
    std::lock_guard<std::mutex> lock(state->mu);
    if (!c.ok()) {
      state->init_error = std::string(c.status().message());
      state->init_result.store(FromStatus(c.status()));
      return;
    }
    if (state->aborted) return;  // abandoned: drop it here
    state->comm = std::move(*c);
    state->init_result.store(ncclSuccess);
  };
  AddLive(handle);
  *out = handle;
  if (!blocking) {
    state->init_thread = std::thread(run);
    return ncclInProgress;
  }
  run();
  const auto r = static_cast<ncclResult_t>(state->init_result.load());
  if (r != ncclSuccess) {
    RemoveLive(handle);
    delete handle;
    *out = nullptr;
    return Fail(r, "communicator init failed: " + state->init_error);
  }
  return ncclSuccess;
}

// Wraps an already built child communicator (split, shrink) in a handle.
ncclResult_t Adopt(ncclComm_t* out, std::unique_ptr<CpuComm> comm) {
  auto state = std::make_shared<CommState>();
  state->comm = std::move(comm);
  state->init_result.store(ncclSuccess);
  *out = new ncclComm{state};
  AddLive(*out);
  return ncclSuccess;
}

ncclResult_t Release(ncclComm_t comm, bool abort) {
  if (comm == nullptr || !RemoveLive(comm)) {
    return Fail(ncclInvalidArgument,
                abort ? "ncclCommAbort: invalid communicator (NULL, "
                        "destroyed or already aborted)"
                      : "ncclCommDestroy: invalid communicator (NULL, "
                        "destroyed or aborted)");
  }
  CommState* s = comm->state.get();
  if (s->init_thread.joinable()) {
    if (abort) {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        s->aborted = true;
      }
      s->init_thread.detach();  // it holds the state; ends at its timeout
    } else {
      s->init_thread.join();
    }
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->comm.reset();
  }
  delete comm;
  return ncclSuccess;
}

}  // namespace pitstop::cpunccl
