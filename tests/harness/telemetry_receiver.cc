#include "tests/harness/telemetry_receiver.h"

#include <unistd.h>

#include <atomic>
#include <map>

#include "absl/strings/str_cat.h"
#include "pitstop/sync.h"
#include "src/agent/shm_ingest_server.h"

namespace pitstop::emu {

// The agent's real shared-memory ingest server with a handler that keeps
// what arrives.
struct TelemetryReceiver::Impl final : public agent::ShmStreamHandler {
  uint64_t Open(agent::CommandSink* sink,
                const agent::ProcessIdentity& who) override {
    (void)who;  // the receiver keeps what arrives from any process
    MutexLock lock(&mu);
    streams.emplace_back();
    const uint64_t id = streams.size();
    open[id] = sink;
    return id;
  }
  absl::Status OnMessage(uint64_t stream,
                         const v1::StreamTelemetryRequest& q) override {
    records += q.ops_size() + q.completions_size() + q.kernel_channels_size() +
               q.proxy_ops_size() + q.proxy_steps_size() + q.net_events_size();
    bytes += q.ByteSizeLong();
    MutexLock lock(&mu);
    if (keep_batches || q.has_hello() || q.has_goodbye()) {
      streams[stream - 1].batches.push_back(q);
    }
    cv.SignalAll();
    return absl::OkStatus();
  }
  void Close(uint64_t stream) override {
    MutexLock lock(&mu);
    open.erase(stream);
    streams[stream - 1].ended = true;
    cv.SignalAll();
  }

  std::unique_ptr<agent::ShmIngestServer> server;
  mutable Mutex mu;
  mutable CondVar cv;
  std::vector<ReceivedStream> streams ABSL_GUARDED_BY(mu);
  std::map<uint64_t, agent::CommandSink*> open ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  bool keep_batches = true;
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> bytes{0};
};

namespace {

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

absl::StatusOr<std::unique_ptr<TelemetryReceiver>> TelemetryReceiver::Start(
    const std::string& socket_path, bool keep_batches) {
  unlink(socket_path.c_str());
  auto impl = std::make_unique<Impl>();
  impl->keep_batches = keep_batches;
  agent::ShmIngestOptions o;
  o.socket_path = socket_path;
  auto server = agent::ShmIngestServer::Create(o, impl.get());
  if (!server.ok()) return server.status();
  impl->server = std::move(*server);
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
  impl_->server->Kill();
  unlink((impl_->server->socket_path() + ".lock").c_str());
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
  for (auto& [id, sink] : impl_->open) {
    sink->SendActivation(cmd);
    ++n;
  }
  return n;
}

bool TelemetryReceiver::SendDirective(size_t index,
                                      const v1::RankMigrationDirective& d) {
  MutexLock lock(&impl_->mu);
  auto it = impl_->open.find(index + 1);
  if (it == impl_->open.end()) return false;
  v1::StreamTelemetryResponse r;
  *r.add_migration_directive() = d;
  it->second->SendResponse(r);
  return true;
}

uint64_t TelemetryReceiver::records_received() const {
  return impl_->records.load();
}
uint64_t TelemetryReceiver::bytes_received() const {
  return impl_->bytes.load();
}

agent::ShmIngestServer* TelemetryReceiver::server() {
  return impl_->server.get();
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
std::vector<v1::RankMigrationAck> AllMigrationAcks(const ReceivedStream& s) {
  std::vector<v1::RankMigrationAck> out;
  for (const auto& b : s.batches) {
    for (const auto& a : b.migration_acks()) out.push_back(a);
  }
  return out;
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
