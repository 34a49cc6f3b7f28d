#include "tests/harness/telemetry_receiver.h"

#include <unistd.h>

#include <atomic>
#include <set>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"
#include "pitstop/v1/telemetry.grpc.pb.h"

namespace pitstop::emu {

namespace {
class Reactor;
}

struct TelemetryReceiver::Impl final : public v1::Telemetry::CallbackService {
  grpc::ServerBidiReactor<v1::StreamTelemetryRequest,
                          v1::StreamTelemetryResponse>*
  StreamTelemetry(grpc::CallbackServerContext* context) override;

  std::unique_ptr<grpc::Server> server;
  mutable Mutex mu;
  mutable CondVar cv;
  std::vector<ReceivedStream> streams ABSL_GUARDED_BY(mu);
  std::set<Reactor*> open ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  bool keep_batches = true;
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> bytes{0};
};

namespace {

class Reactor final
    : public grpc::ServerBidiReactor<v1::StreamTelemetryRequest,
                                     v1::StreamTelemetryResponse> {
 public:
  Reactor(TelemetryReceiver::Impl* impl, size_t index)
      : impl_(impl), index_(index) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      {
        MutexLock lock(&impl_->mu);
        impl_->streams[index_].ended = true;
        impl_->cv.SignalAll();
      }
      Finish(grpc::Status::OK);
      return;
    }
    const auto& q = request_;
    impl_->records += q.ops_size() + q.completions_size() +
                      q.kernel_channels_size() + q.proxy_ops_size() +
                      q.proxy_steps_size() + q.net_events_size();
    impl_->bytes += q.ByteSizeLong();
    {
      MutexLock lock(&impl_->mu);
      if (impl_->keep_batches || request_.has_hello() ||
          request_.has_goodbye()) {
        impl_->streams[index_].batches.push_back(request_);
      }
      impl_->cv.SignalAll();
    }
    request_.Clear();
    StartRead(&request_);
  }
  // Any thread.
  bool Send(const v1::ActivationCommand& cmd) {
    MutexLock lock(&mu_);
    if (writing_) {
      *queued_.add_activation() = cmd;
      return true;
    }
    writing_ = true;
    response_.Clear();
    *response_.add_activation() = cmd;
    StartWrite(&response_);
    return true;
  }
  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (ok && queued_.activation_size() > 0) {
      response_.Swap(&queued_);
      queued_.Clear();
      writing_ = true;
      StartWrite(&response_);
    }
  }
  void OnDone() override {
    {
      MutexLock lock(&impl_->mu);
      impl_->open.erase(this);
      impl_->streams[index_].ended = true;
      impl_->cv.SignalAll();
    }
    delete this;
  }

 private:
  TelemetryReceiver::Impl* const impl_;
  const size_t index_;
  v1::StreamTelemetryRequest request_;
  Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  v1::StreamTelemetryResponse response_;
  v1::StreamTelemetryResponse queued_ ABSL_GUARDED_BY(mu_);
};

template <typename T, typename F>
std::vector<T> Collect(const std::vector<ReceivedStream>& streams, F&& field) {
  std::vector<T> out;
  for (const auto& s : streams) {
    for (const auto& b : s.batches) {
      for (const auto& r : field(b)) out.push_back(r);
    }
  }
  return out;
}

}  // namespace

grpc::ServerBidiReactor<v1::StreamTelemetryRequest,
                        v1::StreamTelemetryResponse>*
TelemetryReceiver::Impl::StreamTelemetry(grpc::CallbackServerContext*) {
  MutexLock lock(&mu);
  streams.emplace_back();
  auto* r = new Reactor(this, streams.size() - 1);
  open.insert(r);
  return r;
}

absl::StatusOr<std::unique_ptr<TelemetryReceiver>> TelemetryReceiver::Start(
    const std::string& socket_path, bool keep_batches) {
  unlink(socket_path.c_str());
  auto impl = std::make_unique<Impl>();
  impl->keep_batches = keep_batches;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(impl.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", socket_path));
  }
  return std::unique_ptr<TelemetryReceiver>(
      new TelemetryReceiver(std::move(impl)));
}

TelemetryReceiver::TelemetryReceiver(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

TelemetryReceiver::~TelemetryReceiver() { Shutdown(); }

void TelemetryReceiver::Shutdown() {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
}

std::vector<ReceivedStream> TelemetryReceiver::Streams() const {
  MutexLock lock(&impl_->mu);
  return impl_->streams;
}

bool TelemetryReceiver::WaitFor(
    const std::function<bool(const std::vector<ReceivedStream>&)>& pred,
    absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&impl_->mu);
  while (!pred(impl_->streams)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    impl_->cv.WaitWithTimeout(&impl_->mu,
                              std::min(left, absl::Milliseconds(50)));
  }
  return true;
}

int TelemetryReceiver::SendActivation(const v1::ActivationCommand& cmd) {
  MutexLock lock(&impl_->mu);
  int n = 0;
  for (Reactor* r : impl_->open) n += r->Send(cmd) ? 1 : 0;
  return n;
}

uint64_t TelemetryReceiver::records_received() const {
  return impl_->records.load();
}
uint64_t TelemetryReceiver::bytes_received() const {
  return impl_->bytes.load();
}

std::vector<v1::OpRecord> AllOps(const std::vector<ReceivedStream>& s) {
  return Collect<v1::OpRecord>(s, [](const auto& b) { return b.ops(); });
}
std::vector<v1::OpCompletion> AllCompletions(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::OpCompletion>(
      s, [](const auto& b) { return b.completions(); });
}
std::vector<v1::KernelChannelRecord> AllKernels(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::KernelChannelRecord>(
      s, [](const auto& b) { return b.kernel_channels(); });
}
std::vector<v1::ProxyOpRecord> AllProxyOps(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::ProxyOpRecord>(
      s, [](const auto& b) { return b.proxy_ops(); });
}
std::vector<v1::ProxyStepRecord> AllProxySteps(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::ProxyStepRecord>(
      s, [](const auto& b) { return b.proxy_steps(); });
}
std::vector<v1::NetPluginRecord> AllNetEvents(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::NetPluginRecord>(
      s, [](const auto& b) { return b.net_events(); });
}
std::vector<v1::CommunicatorEvent> AllCommEvents(
    const std::vector<ReceivedStream>& s) {
  return Collect<v1::CommunicatorEvent>(
      s, [](const auto& b) { return b.communicators(); });
}
v1::DropCounters LastDrops(const std::vector<ReceivedStream>& s) {
  v1::DropCounters last;
  uint64_t best = 0;
  for (const auto& st : s) {
    for (const auto& b : st.batches) {
      if (b.has_drops() && b.sent_cpu_ns() >= best) {
        best = b.sent_cpu_ns();
        last = b.drops();
      }
    }
  }
  return last;
}
bool HasGoodbye(const std::vector<ReceivedStream>& s,
                v1::ProcessGoodbye::Reason reason) {
  for (const auto& st : s) {
    for (const auto& b : st.batches) {
      if (b.has_goodbye() && b.goodbye().reason() == reason) return true;
    }
  }
  return false;
}

}  // namespace pitstop::emu
