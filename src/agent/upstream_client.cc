#include "src/agent/upstream_client.h"

#include <algorithm>

#include "pitstop/grpc_util.h"
#include "pitstop/logging.h"
#include "pitstop/v1/agent.grpc.pb.h"

namespace pitstop::agent {

UpstreamClient::UpstreamClient(UpstreamOptions options, AgentCore* core)
    : options_(std::move(options)), core_(core) {}

UpstreamClient::~UpstreamClient() { Stop(); }

void UpstreamClient::Start() {
  thread_ = std::thread([this] { Run(); });
}

void UpstreamClient::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool UpstreamClient::WaitFor(absl::Duration d, bool wake_on_backlog) {
  const absl::Time deadline = absl::Now() + d;
  while (true) {
    // A full message's worth of summaries goes out at once: bounds memory
    // and loss under bursts without waiting for the batch period.
    const bool backlog = wake_on_backlog && Backlog();
    MutexLock lock(&mu_);
    if (stop_ || backlog || !acks_.empty() || pong_ != 0) return stop_;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return stop_;
    cv_.WaitWithTimeout(&mu_, std::min(left, absl::Milliseconds(20)));
  }
}

bool UpstreamClient::Backlog() const {
  return core_->buffer()->queued() >=
         static_cast<size_t>(kMaxSummariesPerMessage);
}

void UpstreamClient::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  auto log = Logger("agent.upstream");
  while (true) {
    const uint64_t before = connects_.load();
    RunStream();
    {
      MutexLock lock(&mu_);
      if (stop_) return;
    }
    if (connects_.load() != before) backoff = absl::Milliseconds(100);
    log->info("controller {} unreachable; retrying in {} ms", options_.address,
              absl::ToInt64Milliseconds(backoff));
    core_->PublishMetrics(false, connects_.load());
    if (WaitFor(backoff, /*wake_on_backlog=*/false)) return;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void UpstreamClient::RunStream() {
  auto log = Logger("agent.upstream");
  auto channel = CreateChannel(options_.address);
  auto stub = v1::AgentLink::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);

  v1::ConnectRequest hello;
  *hello.mutable_registration() = options_.registration;
  std::vector<v1::CommunicatorInfo> comms;
  core_->AllCommunicators(&comms);
  for (auto& c : comms) *hello.add_communicators() = std::move(c);
  if (!stream->Write(hello)) {
    ctx.TryCancel();
    stream->Finish().IgnoreError();
    return;
  }
  connected_ = true;
  connects_.fetch_add(1);
  log->info("connected to controller {}", options_.address);

  std::atomic<bool> server_ended{false};
  std::thread reader([&] {
    v1::ConnectResponse resp;
    while (stream->Read(&resp)) {
      for (const v1::AgentCommand& cmd : resp.commands()) {
        MutexLock lock(&mu_);
        if (cmd.has_set_activation_mask()) {
          core_->ApplyActivation(cmd.command_id(), cmd.set_activation_mask());
          acks_.push_back(cmd.command_id());
        } else if (cmd.ping()) {
          pong_ = cmd.command_id();
        }
        cv_.SignalAll();
      }
    }
    server_ended = true;
    MutexLock lock(&mu_);
    cv_.SignalAll();
  });

  absl::Time next_batch = absl::Now();
  bool stopping = false;
  while (!server_ended) {
    const absl::Duration wait = next_batch - absl::Now();
    stopping = WaitFor(std::max(wait, absl::ZeroDuration()),
                       /*wake_on_backlog=*/true);
    if (server_ended) break;
    v1::ConnectRequest batch;
    const bool backlog = Backlog();
    const bool periodic = absl::Now() >= next_batch || stopping || backlog;
    {
      MutexLock lock(&mu_);
      for (uint64_t id : acks_) batch.add_acked_command_ids(id);
      acks_.clear();
      batch.set_pong_command_id(pong_);
      pong_ = 0;
    }
    if (periodic) {
      if (!backlog) next_batch = absl::Now() + options_.batch;
      core_->FillBatch(kMaxSummariesPerMessage, &batch);
    }
    bool ok = stream->Write(batch);
    // More summaries queued than one message carries: send them now.
    while (ok && periodic &&
           batch.summaries_size() == kMaxSummariesPerMessage) {
      batch.Clear();
      core_->buffer()->Drain(kMaxSummariesPerMessage, &batch);
      if (batch.summaries_size() == 0) break;
      ok = stream->Write(batch);
    }
    if (!ok) {
      core_->buffer()->Requeue(&batch);
      break;
    }
    core_->PublishMetrics(true, connects_.load());
    if (stopping) break;
  }
  connected_ = false;
  if (stopping && !server_ended) {
    stream->WritesDone();
    // Give the controller a moment to read the flush and end the stream.
    for (int i = 0; i < 40 && !server_ended; ++i) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  ctx.TryCancel();
  reader.join();
  {
    MutexLock lock(&mu_);  // answers for a dead stream cannot be delivered
    acks_.clear();
    pong_ = 0;
  }
  grpc::Status st = stream->Finish();
  if (!stopping) {
    log->warn("controller stream ended: {} {}",
              static_cast<int>(st.error_code()), st.error_message());
  }
}

}  // namespace pitstop::agent
