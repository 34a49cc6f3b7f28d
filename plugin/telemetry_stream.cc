#include "plugin/telemetry_stream.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "plugin/recorder.h"

#ifdef PITSTOP_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace pitstop::plugin {
namespace {

// gRPC hands the reactor between our exporter thread and its own threads
// inside Debian's uninstrumented libgrpc, where TSan cannot see it. These
// annotations state that handoff: release before giving gRPC work, acquire
// when gRPC calls back.
inline void HandOff(void* p) {
#ifdef PITSTOP_TSAN
  __tsan_release(p);
#else
  (void)p;
#endif
}
inline void TakeBack(void* p) {
#ifdef PITSTOP_TSAN
  __tsan_acquire(p);
#else
  (void)p;
#endif
}

// The reactor's state lock. A spin lock on an atomic rather than a pthread
// mutex: this file is compiled without TSan instrumentation, and TSan's
// pthread interceptors then saw half of gRPC's inline reactions and
// reported phantom double locks. Held for a few instructions only; its
// ordering is stated to TSan with the same annotations.
class ABSL_LOCKABLE SpinLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    while (flag_.test_and_set(std::memory_order_acquire)) sched_yield();
    TakeBack(this);  // TSan: what the last holder did happens before us
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    HandOff(this);
    flag_.clear(std::memory_order_release);
  }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

class ABSL_SCOPED_LOCKABLE SpinLockGuard {
 public:
  explicit SpinLockGuard(SpinLock* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~SpinLockGuard() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  SpinLockGuard(const SpinLockGuard&) = delete;
  SpinLockGuard& operator=(const SpinLockGuard&) = delete;

 private:
  SpinLock* const mu_;
};

}  // namespace

class TelemetryStream::Reactor final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `dropped` counts the records of writes that fail.
  Reactor(const std::string& socket_path, std::atomic<uint64_t>* dropped)
      : dropped_(dropped) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Each stream gets its own channel: a fresh connection attempt instead
    // of waiting out a shared channel's backoff after the agent restarts.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(
        "unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
    stub_->PrepareBidiStreamingCall(&context_, kMethod, grpc::StubOptions(),
                                    this);
    HandOff(this);
    StartRead(&response_);
    StartCall();
  }

  // Exporter thread. False if a write is in flight or the stream is over.
  bool TryWrite(const std::string& request, uint32_t records, bool last) {
    {
      SpinLockGuard lock(&mu_);
      if (writing_ || done_ || broken_) return false;
      writing_ = true;
      in_flight_records_ = records;
      grpc::Slice slice(request);
      in_flight_ = grpc::ByteBuffer(&slice, 1);
    }
    HandOff(this);
    if (last) {
      StartWriteLast(&in_flight_, grpc::WriteOptions());
    } else {
      StartWrite(&in_flight_);
    }
    return true;
  }
  bool Writable() {
    SpinLockGuard lock(&mu_);
    return !writing_ && !done_ && !broken_;
  }
  bool Broken() {
    SpinLockGuard lock(&mu_);
    return broken_ || done_;
  }
  bool Done() {
    SpinLockGuard lock(&mu_);
    return done_;
  }
  void Cancel() { context_.TryCancel(); }
  bool delivered_any() {
    SpinLockGuard lock(&mu_);
    return delivered_any_;
  }
  std::vector<Activation> TakeCommands() {
    SpinLockGuard lock(&mu_);
    return std::exchange(commands_, {});
  }

  void OnWriteDone(bool ok) override {
    TakeBack(this);
    SpinLockGuard lock(&mu_);
    writing_ = false;
    if (ok) {
      delivered_any_ = true;
    } else {
      broken_ = true;
      dropped_->fetch_add(in_flight_records_);
    }
  }
  void OnReadDone(bool ok) override {
    TakeBack(this);
    if (!ok) {
      SpinLockGuard lock(&mu_);
      broken_ = true;
      return;
    }
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (response_.Dump(&slices).ok()) {
      for (const auto& sl : slices) {
        bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      }
    }
    {
      SpinLockGuard lock(&mu_);
      DecodeResponse(bytes, &commands_);  // malformed: keep what parsed
    }
    response_.Clear();
    HandOff(this);
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& /*status*/) override {
    TakeBack(this);
    SpinLockGuard lock(&mu_);
    done_ = true;
  }

 private:
  std::atomic<uint64_t>* const dropped_;
  std::shared_ptr<grpc::Channel> channel_;
  static constexpr char kMethod[] = "/pitstop.v1.Telemetry/StreamTelemetry";
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::ClientContext context_;
  grpc::ByteBuffer in_flight_;
  grpc::ByteBuffer response_;
  SpinLock mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t in_flight_records_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool delivered_any_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Activation> commands_ ABSL_GUARDED_BY(mu_);
};

TelemetryStream::TelemetryStream(const std::string& socket_path,
                                 std::atomic<uint64_t>* dropped)
    : reactor_(new Reactor(socket_path, dropped)) {}
TelemetryStream::~TelemetryStream() { delete reactor_; }
bool TelemetryStream::TryWrite(const std::string& request, uint32_t records,
                               bool last) {
  return reactor_->TryWrite(request, records, last);
}
bool TelemetryStream::Writable() { return reactor_->Writable(); }
bool TelemetryStream::Broken() { return reactor_->Broken(); }
bool TelemetryStream::Done() { return reactor_->Done(); }
// Polls (1 ms) instead of a timed condition-variable wait: libstdc++ waits
// with pthread_cond_clockwait, which GCC 12's TSan does not intercept, so a
// timed wait here looked like a mutex held forever. This is the exporter's
// own thread; 1 ms granularity is plenty for flush bounds.
bool TelemetryStream::WaitDone(uint64_t deadline_ns) {
  while (!reactor_->Done()) {
    if (NowCpuNs() >= deadline_ns) return false;
    usleep(1000);
  }
  return true;
}
bool TelemetryStream::WaitWritable(uint64_t deadline_ns) {
  for (;;) {
    if (reactor_->Writable()) return true;
    if (reactor_->Broken() || NowCpuNs() >= deadline_ns) return false;
    usleep(1000);
  }
}
void TelemetryStream::Cancel() { reactor_->Cancel(); }
bool TelemetryStream::delivered_any() { return reactor_->delivered_any(); }
std::vector<Activation> TelemetryStream::TakeCommands() {
  return reactor_->TakeCommands();
}

}  // namespace pitstop::plugin
