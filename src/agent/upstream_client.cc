#include "src/agent/upstream_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pitstop/address.h"
#include "pitstop/grpc_util.h"
#include "pitstop/leader_hint.h"
#include "pitstop/logging.h"
#include "pitstop/v1/agent.grpc.pb.h"

namespace pitstop::agent {
namespace {

// Steady time as absl::Time: batch and wait deadlines must not follow
// wall-clock steps (NTP).
absl::Time SteadyNow() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

// A stream that stayed up this long resets the reconnect backoff.
constexpr absl::Duration kHealthyStream = absl::Seconds(2);
// How long one attempt waits for the channel to connect.
constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
// Several controllers: after a stream ends, retry every 100 ms for this
// long (a leader election takes a lease TTL), then back off.
constexpr absl::Duration kFastFailover = absl::Seconds(15);

const char* StateName(grpc_connectivity_state s) {
  switch (s) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "transient failure (connection refused, unreachable or "
             "timed out)";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shutdown";
  }
  return "unknown";
}

}  // namespace

absl::Status ValidateControllerAddress(const std::string& address) {
  if (address.empty()) return absl::OkStatus();
  // Several controllers (docs/ha.md): "a:7070,b:7070" follows the leader.
  if (address.find(',') != std::string::npos) {
    const std::vector<std::string> list = SplitControllerList(address);
    if (list.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller: empty address list '", address, "'"));
    }
    for (const std::string& a : list) {
      if (absl::Status s = ValidateControllerAddress(a); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return ValidateAddress(address, "controller", {.allow_unix = true}).status();
}

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
  const absl::Time deadline = SteadyNow() + d;
  while (true) {
    // A full message's worth of summaries goes out at once: bounds memory
    // and loss under bursts without waiting for the batch period.
    const bool backlog = wake_on_backlog && Backlog();
    MutexLock lock(&mu_);
    if (stop_ || backlog || !acks_.empty() || pong_ != 0 ||
        !migration_acks_.empty()) {
      return stop_;
    }
    const absl::Duration left = deadline - SteadyNow();
    if (left <= absl::ZeroDuration()) return stop_;
    cv_.WaitWithTimeout(&mu_, std::min(left, absl::Milliseconds(20)));
  }
}

absl::Status UpstreamClient::refused() const {
  MutexLock lock(&mu_);
  return refused_;
}

void UpstreamClient::Ack(const v1::MigrationAck& ack) {
  MutexLock lock(&mu_);
  migration_acks_.push_back(ack);
  cv_.SignalAll();
}

bool UpstreamClient::Backlog() const {
  return core_->buffer()->queued() >=
         static_cast<size_t>(kMaxSummariesPerMessage);
}

void UpstreamClient::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  auto log = Logger("agent.upstream");
  const std::vector<std::string> list = SplitControllerList(options_.address);
  const bool several = list.size() > 1;
  size_t next = 0;
  std::string target = list.empty() ? options_.address : list[0];
  absl::Time healthy_at = SteadyNow();
  while (true) {
    const absl::Duration up = RunStream(target);
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      if (last_code_ == grpc::StatusCode::INVALID_ARGUMENT ||
          last_code_ == grpc::StatusCode::PERMISSION_DENIED) {
        refused_ =
            absl::Status(static_cast<absl::StatusCode>(last_code_),
                         absl::StrCat("controller ", target,
                                      " refused this agent: ", last_error_));
        log->error("{}; not retrying", std::string(refused_.message()));
        return;
      }
    }
    // Only a stream that actually worked for a while resets the backoff.
    // With several controllers a stream the leader accepted counts: a
    // follower's refusal ends the stream by the first batch, while the
    // leader may be killed again within seconds.
    if (up >= kHealthyStream ||
        (several && up > options_.batch + absl::Milliseconds(100))) {
      backoff = absl::Milliseconds(100);
      healthy_at = SteadyNow();
    }
    absl::Duration wait = backoff;
    if (several) {
      // A follower names the leader; otherwise try the next controller.
      // Failover takes a lease TTL or two: retry fast for a while.
      const std::string hint = LeaderFromMessage(last_error_);
      if (!hint.empty() && hint != target) {
        target = hint;
      } else {
        // The next address other than the one that just failed (which
        // may have come from a stale hint).
        for (size_t i = 0; i < list.size(); ++i) {
          next = (next + 1) % list.size();
          if (list[next] != target) break;
        }
        target = list[next];
      }
      if (SteadyNow() - healthy_at < kFastFailover) {
        wait = absl::Milliseconds(100);
      }
    }
    log->info("controller {} unavailable; trying {} in {} ms",
              several ? "stream" : options_.address, target,
              absl::ToInt64Milliseconds(wait));
    core_->PublishMetrics(false, connects_.load());
    if (WaitFor(wait, /*wake_on_backlog=*/false)) return;
    if (wait == backoff) backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void UpstreamClient::MarkApplied(uint64_t id) {
  if (id == 0 || !applied_.insert(id).second) return;
  applied_order_.push_back(id);
  while (applied_order_.size() > kAppliedIds) {
    applied_.erase(applied_order_.front());
    applied_order_.pop_front();
  }
}

std::shared_ptr<grpc::Channel> UpstreamClient::ConnectChannel(
    const std::string& address) {
  auto log = Logger("agent.upstream");
  const bool several = SplitControllerList(options_.address).size() > 1;
  std::shared_ptr<grpc::Channel> channel;
  if (options_.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        TlsClientCredentials(options_.tls);
    if (!creds.ok()) {
      log->error("controller {}: {}", address,
                 std::string(creds.status().message()));
      return nullptr;
    }
    channel =
        grpc::CreateCustomChannel(address, *creds, StreamChannelArguments());
  } else {
    channel = CreateChannel(address);
  }
  // Connected means the channel is READY, not that a write was buffered.
  const absl::Time connect_deadline = SteadyNow() + kConnectTimeout;
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    {
      MutexLock lock(&mu_);
      if (stop_) return nullptr;
    }
    // With several controllers a refused connection moves on at once.
    if (SteadyNow() >= connect_deadline ||
        (several && state == GRPC_CHANNEL_TRANSIENT_FAILURE)) {
      log->warn("controller {}: cannot connect within {} s: {}", address,
                absl::ToInt64Seconds(kConnectTimeout), StateName(state));
      return nullptr;
    }
    channel->WaitForStateChange(state, std::chrono::system_clock::now() +
                                           std::chrono::milliseconds(200));
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return channel;
}

void UpstreamClient::HandleCommand(const v1::AgentCommand& cmd) {
  if (cmd.has_path() || cmd.has_set_activation_mask()) {
    // Acked by id: one the controller sent again (it had no ack when this
    // stream opened) is acked again and not applied twice.
    MutexLock lock(&mu_);
    if (Applied(cmd.command_id())) {
      duplicates_.fetch_add(1);
      acks_.push_back(cmd.command_id());
      cv_.SignalAll();
      return;
    }
  }
  if (cmd.has_migration()) {
    // Its answers come back through Ack(), which takes mu_.
    if (options_.migration) options_.migration->OnDirective(cmd.migration());
    return;
  }
  if (cmd.has_path()) {
    // Written to the tuner table outside mu_; acked once applied, so the
    // controller's plan shows which epoch each host runs.
    absl::Status s = options_.paths
                         ? options_.paths->OnDirective(cmd.path())
                         : absl::UnimplementedError("no tuner table");
    if (!s.ok()) {
      Logger("agent")->warn("flow plan of job {} epoch {} not applied: {}",
                            cmd.path().job_id(), cmd.path().epoch(),
                            s.ToString());
      return;
    }
    MutexLock lock(&mu_);
    MarkApplied(cmd.command_id());
    acks_.push_back(cmd.command_id());
    cv_.SignalAll();
    return;
  }
  MutexLock lock(&mu_);
  if (cmd.has_set_activation_mask()) {
    core_->ApplyActivation(cmd.command_id(), cmd.set_activation_mask());
    MarkApplied(cmd.command_id());
    acks_.push_back(cmd.command_id());
  } else if (cmd.ping()) {
    pong_ = cmd.command_id();
  } else if (cmd.has_trainer_directive() && options_.trainer) {
    options_.trainer->OnDirective(cmd.trainer_directive());
  } else if (cmd.has_trainer_profile() && options_.trainer) {
    options_.trainer->OnProfileRequest(cmd.trainer_profile());
  }
  cv_.SignalAll();
}

bool UpstreamClient::SendBatches(
    const std::function<bool(const v1::ConnectRequest&)>& write,
    const std::atomic<bool>& server_ended) {
  absl::Time next_batch = SteadyNow();
  bool stopping = false;
  while (!server_ended) {
    const absl::Duration wait = next_batch - SteadyNow();
    stopping = WaitFor(std::max(wait, absl::ZeroDuration()),
                       /*wake_on_backlog=*/true);
    if (server_ended) break;
    v1::ConnectRequest batch;
    const bool backlog = Backlog();
    const bool periodic = SteadyNow() >= next_batch || stopping || backlog;
    {
      MutexLock lock(&mu_);
      for (uint64_t id : acks_) batch.add_acked_command_ids(id);
      acks_.clear();
      for (v1::MigrationAck& a : migration_acks_) {
        *batch.add_migration_acks() = std::move(a);
      }
      migration_acks_.clear();
      batch.set_pong_command_id(pong_);
      pong_ = 0;
    }
    if (periodic) {
      if (!backlog) next_batch = SteadyNow() + options_.batch;
      core_->FillBatch(kMaxSummariesPerMessage, &batch);
      if (options_.trainer) options_.trainer->FillBatch(&batch);
    }
    if (stopping) batch.set_agent_stopping(true);
    bool ok = write(batch);
    // More summaries queued than one message carries: send them now.
    while (ok && periodic &&
           batch.summaries_size() == kMaxSummariesPerMessage) {
      batch.Clear();
      core_->buffer()->Drain(kMaxSummariesPerMessage, &batch);
      if (stopping) batch.set_agent_stopping(true);
      if (batch.summaries_size() == 0) break;
      ok = write(batch);
    }
    if (!ok) {
      core_->buffer()->Requeue(&batch);
      break;
    }
    core_->PublishMetrics(true, connects_.load());
    if (stopping) break;
  }
  return stopping;
}

absl::Duration UpstreamClient::RunStream(const std::string& address) {
  auto log = Logger("agent.upstream");
  last_error_.clear();
  last_code_ = grpc::StatusCode::OK;
  std::shared_ptr<grpc::Channel> channel = ConnectChannel(address);
  if (channel == nullptr) return absl::ZeroDuration();
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
    const grpc::Status st = stream->Finish();
    log->warn("controller {}: registration failed: {} {}", address,
              static_cast<int>(st.error_code()), st.error_message());
    last_error_ = st.error_message();
    last_code_ = st.error_code();
    return absl::ZeroDuration();
  }
  const absl::Time connected_at = SteadyNow();
  connected_ = true;
  connects_.fetch_add(1);
  if (options_.trainer) options_.trainer->SetControllerConnected(true);
  log->info("connected to controller {}", address);

  std::atomic<bool> server_ended{false};
  std::thread reader([&] {
    v1::ConnectResponse resp;
    while (stream->Read(&resp)) {
      for (const v1::AgentCommand& cmd : resp.commands()) HandleCommand(cmd);
    }
    server_ended = true;
    MutexLock lock(&mu_);
    cv_.SignalAll();
  });
  const bool stopping = SendBatches(
      [&stream](const v1::ConnectRequest& b) { return stream->Write(b); },
      server_ended);
  connected_ = false;
  if (options_.trainer) options_.trainer->SetControllerConnected(false);
  const absl::Duration up = SteadyNow() - connected_at;
  if (stopping && !server_ended) {
    stream->WritesDone();
    // Give the controller a moment to read the flush and end the stream.
    for (int i = 0; i < 40 && !server_ended; ++i) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  // A stream the controller ended keeps its status (a follower's names the
  // leader; PERMISSION_DENIED, ALREADY_EXISTS, ...) for the log; cancelling
  // it would say CANCELLED. A failed write usually means the controller
  // ended it: give the reader up to 200 ms to see the status arrive.
  for (int i = 0; i < 20 && !stopping && !server_ended; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!server_ended) ctx.TryCancel();
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
    last_error_ = st.error_message();
    last_code_ = st.error_code();
  }
  return up;
}

}  // namespace pitstop::agent
