// Shadow iterations in the interposer (docs/migration.md "Shadow
// iterations"): a designated rank records its collectives' outputs
// (PITSTOP_SHADOW_RECORD=DIR), a sandboxed joiner answers its collectives
// from them (PITSTOP_SHADOW_DIR=DIR). Everything here is off the hot path:
// a normal rank reaches it only while recording, a joiner only on sandbox
// handles.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "plugin/plugin_sync.h"
#include "plugin/shadow_record.h"
#include "plugin/virtual_comms.h"

namespace pitstop::plugin {

std::atomic<bool> g_shadow_recording{false};

namespace {

constexpr uint64_t kDefaultCollectives = 16;
constexpr uint64_t kMaxLoggedMisses = 4;

std::atomic<uint64_t> g_misses{0};

struct RecordConfig {
  std::string dir;  // empty: not recording
  uint64_t collectives = kDefaultCollectives;
};

uint64_t ReadCollectives() {
  const char* v = std::getenv("PITSTOP_SHADOW_COLLECTIVES");
  if (v == nullptr || v[0] == '\0') return kDefaultCollectives;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr,
                 "pitstop: PITSTOP_SHADOW_COLLECTIVES='%s' is not a number; "
                 "recording %llu\n",
                 v, static_cast<unsigned long long>(kDefaultCollectives));
    return kDefaultCollectives;
  }
  return n;
}

const RecordConfig& Recording() {
  static const RecordConfig config = [] {
    RecordConfig c;
    const char* dir = std::getenv("PITSTOP_SHADOW_RECORD");
    if (dir != nullptr) c.dir = dir;
    c.collectives = ReadCollectives();
    if (!c.dir.empty()) {
      // Made here (once, at the first collective) so a launcher need not:
      // a missing directory would fail every record write.
      if (mkdir(c.dir.c_str(), 0755) != 0 && errno != EEXIST) {
        std::fprintf(stderr, "pitstop: shadow: cannot create %s: %s\n",
                     c.dir.c_str(), std::strerror(errno));
      }
      std::fprintf(stderr,
                   "pitstop: shadow: recording the first %llu collectives of "
                   "each communicator to %s\n",
                   static_cast<unsigned long long>(c.collectives),
                   c.dir.c_str());
    }
    return c;
  }();
  return config;
}

// PITSTOP_SHADOW_DIR, for a joiner's sandbox handles; empty: off.
const std::string& AnswerDir() {
  static const std::string dir = [] {
    const char* d = std::getenv("PITSTOP_SHADOW_DIR");
    return std::string(d != nullptr && MigrationJoiner() ? d : "");
  }();
  return dir;
}

void LogWriteError(const std::string& error) {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    std::fprintf(stderr, "pitstop: shadow: cannot record: %s\n", error.c_str());
  }
}

// Writes records on its own thread, so the recording rank's collective only
// pays for a copy of its output: the file's syscalls (about 0.1 ms each)
// happen beside the training loop. Leaked on purpose: static destructors
// must not pull the queue from under the thread at exit; an atexit handler
// drains it first (bounded). A forked child has no writer thread: it
// writes in the call instead.
class Writer {
 public:
  void Push(const ShadowKey& key, const void* data, uint64_t bytes) {
    if (getpid() != pid_) {
      std::string error;
      if (!WriteShadowRecord(dir_, key, data, bytes, &error)) {
        LogWriteError(error);
      }
      return;
    }
    MutexLock lock(&mu_);
    queue_.push_back({key, std::string(static_cast<const char*>(data), bytes)});
    cv_.SignalAll();
  }
  // At exit: waits (at most `timeout_ms`) until every queued record is on
  // disk.
  void Drain(int timeout_ms) {
    MutexLock lock(&mu_);
    for (int waited = 0; (!queue_.empty() || busy_) && waited < timeout_ms;
         waited += 10) {
      cv_.WaitForNs(&mu_, 10'000'000);
    }
  }
  static Writer* Start(const std::string& dir) {
    auto* w = new Writer(dir);
    std::thread([w] { w->Run(); }).detach();
    return w;
  }

 private:
  struct Pending {
    ShadowKey key;
    std::string bytes;
  };
  explicit Writer(std::string dir) : dir_(std::move(dir)), pid_(getpid()) {}
  void Run() {
    MutexLock lock(&mu_);
    for (;;) {
      while (queue_.empty()) cv_.WaitForNs(&mu_, 1'000'000'000);
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      mu_.Unlock();
      std::string error;
      if (!WriteShadowRecord(dir_, p.key, p.bytes.data(), p.bytes.size(),
                             &error)) {
        LogWriteError(error);
      }
      mu_.Lock();
      busy_ = false;
      cv_.SignalAll();
    }
  }

  const std::string dir_;
  const pid_t pid_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ PLUGIN_GUARDED_BY(mu_);
  bool busy_ PLUGIN_GUARDED_BY(mu_) = false;
};

// Started once, on first use (thread-safe static initialisation).
Writer* TheWriter() {
  static Writer* const w = [] {
    Writer* started = Writer::Start(Recording().dir);
    std::atexit([] { TheWriter()->Drain(2000); });
    return started;
  }();
  return w;
}

bool ShadowMode(const void* handle) {
  return !AnswerDir().empty() && g_comm_table.IsSandbox(handle);
}

void LogMiss(const std::string& why) {
  const uint64_t n = g_misses.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n > kMaxLoggedMisses) return;
  std::fprintf(stderr, "pitstop: shadow: refused a sandbox collective: %s%s\n",
               why.c_str(), n == kMaxLoggedMisses ? " (no more logged)" : "");
}

}  // namespace

void EnableShadowRecording() noexcept {
  try {
    const RecordConfig& config = Recording();
    if (config.dir.empty() || config.collectives == 0) return;
    TheWriter();
    g_shadow_recording.store(true, std::memory_order_release);
  } catch (...) {
  }
}

void ShadowRecord(const void* handle, const ShadowCall& call,
                  const CommBinding& b) noexcept {
  try {
    const RecordConfig& config = Recording();
    const uint64_t seq = g_comm_table.Enqueued(handle);
    // Inside a group the operation runs at ncclGroupEnd: no output yet.
    if (seq >= config.collectives || InGroup()) return;
    const uint64_t hash = g_comm_table.CommHash(handle);
    ShadowKey key;
    uint64_t bytes = 0;
    if (hash == 0 || !ShadowOutput(call, b.rank, b.n_ranks, &key, &bytes)) {
      return;
    }
    key.comm_hash = hash;
    key.seq = seq;
    TheWriter()->Push(key, call.recv, bytes);
  } catch (...) {
  }
}

NcclResult ShadowAnswer(const void* handle, const ShadowCall& call) noexcept {
  try {
    if (!ShadowMode(handle)) return RefusedHandle(handle);
    int rank = -1, n_ranks = 0;
    if (!g_comm_table.Membership(handle, &rank, &n_ranks)) {
      return RefusedHandle(handle);
    }
    // The sandbox's own count; the join replaces it by the leaver's.
    const uint64_t seq = g_comm_table.Enqueued(handle);
    g_comm_table.CountEnqueued(handle);
    ShadowKey key;
    uint64_t bytes = 0;
    if (!ShadowOutput(call, rank, n_ranks, &key, &bytes)) {
      if (ShadowDtypeBytes(call.dtype) == 0) {
        LogMiss("unknown datatype " + std::to_string(call.dtype));
        return abi::kNcclInvalidUsage;
      }
      return abi::kNcclSuccess;  // this member gets no output
    }
    key.comm_hash = g_comm_table.CommHash(handle);
    key.seq = seq;
    std::string error;
    if (!ReadShadowRecord(AnswerDir(), key, call.recv, bytes, &error)) {
      LogMiss(error);
      return abi::kNcclInvalidUsage;
    }
    return abi::kNcclSuccess;
  } catch (...) {
    return abi::kNcclInvalidUsage;
  }
}

NcclResult ShadowQuery(const void* handle, int* count, int* rank,
                       NcclResult r) noexcept {
  if (r != abi::kNcclInvalidUsage || !g_comm_table.IsHandle(handle)) return r;
  try {
    if (!ShadowMode(handle)) return r;
    int my_rank = -1, n_ranks = 0;
    if (!g_comm_table.Membership(handle, &my_rank, &n_ranks)) return r;
    if (count != nullptr) *count = n_ranks;
    if (rank != nullptr) *rank = my_rank;
    return abi::kNcclSuccess;
  } catch (...) {
    return r;
  }
}

uint64_t ShadowMisses() noexcept {
  return g_misses.load(std::memory_order_relaxed);
}

}  // namespace pitstop::plugin
