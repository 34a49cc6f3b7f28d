#include "tests/agent/fake_rank.h"

#include <cstdlib>
#include <string>

#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"

namespace pitstop::agent::testing {

FakeRank::FakeRank(const std::string& socket_path, bool wait_for_ready)
    : channel_(CreateChannel("unix:" + socket_path)),
      stub_(v1::Telemetry::NewStub(channel_)) {
  // Wait for the connection rather than failing fast on a transient
  // connect failure (slow sanitizer builds under load).
  ctx_.set_wait_for_ready(wait_for_ready);
  stream_ = stub_->StreamTelemetry(&ctx_);
  reader_ = std::thread([this] {
    v1::StreamTelemetryResponse resp;
    while (stream_->Read(&resp)) {
      MutexLock lock(&mu_);
      for (const auto& a : resp.activation()) activations_.push_back(a);
      cv_.SignalAll();
    }
  });
}

FakeRank::~FakeRank() {
  if (!closed_) Cancel();
}

bool FakeRank::Send(const v1::StreamTelemetryRequest& req) {
  return stream_->Write(req);
}

grpc::Status FakeRank::Close() {
  closed_ = true;
  stream_->WritesDone();
  reader_.join();
  return stream_->Finish();
}

void FakeRank::Cancel() {
  closed_ = true;
  ctx_.TryCancel();
  reader_.join();
  stream_->Finish().ok();
}

bool FakeRank::WaitForActivation(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (activations_.empty()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return true;
}

std::vector<v1::ActivationCommand> FakeRank::activations() {
  MutexLock lock(&mu_);
  return activations_;
}

namespace {

// The job the library would name from this process's environment
// (plugin/config.cc): the agent holds a hello to it (LocalTenants).
std::string JobOfEnvironment() {
  for (const char* name :
       {"PITSTOP_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "default";
}

}  // namespace

v1::StreamTelemetryRequest MakeHello(uint32_t pid, int32_t global_rank,
                                     uint64_t comm_hash, int32_t rank,
                                     int32_t n_ranks) {
  v1::StreamTelemetryRequest req;
  v1::ProcessHello* h = req.mutable_hello();
  h->set_host("rank-host");
  h->set_pid(pid);
  h->set_job_id(JobOfEnvironment());
  h->set_global_rank(global_rank);
  h->set_load_mode("emulator");
  h->set_start_cpu_ns(MonotonicNowNs());
  req.set_batch_seq(1);
  auto* ev = req.add_communicators();
  ev->set_kind(v1::CommunicatorEvent::KIND_INIT);
  ev->mutable_info()->set_comm_hash(comm_hash);
  ev->mutable_info()->set_comm_name("world");
  ev->mutable_info()->set_rank(rank);
  ev->mutable_info()->set_n_ranks(n_ranks);
  return req;
}

void AddCompleteOps(v1::StreamTelemetryRequest* req, uint64_t comm_hash,
                    int32_t rank, uint64_t first_seq, int n) {
  const uint64_t now = MonotonicNowNs();
  const uint64_t gpu_base = 5'000'000'000'000;  // GPU timer: its own domain
  for (int i = 0; i < n; ++i) {
    const uint64_t seq = first_seq + i;
    const uint64_t id = seq + 1;
    v1::OpRecord* r = req->add_ops();
    r->set_op_id(id);
    r->set_comm_hash(comm_hash);
    r->set_rank(rank);
    r->set_kind(v1::OP_KIND_COLLECTIVE);
    r->set_func(v1::COLL_FUNC_ALL_REDUCE);
    r->set_seq_number(seq);
    r->set_count(1 << 18);
    r->set_bytes(1 << 20);
    r->set_datatype(v1::DATA_TYPE_FLOAT32);
    r->set_algorithm(v1::ALGORITHM_RING);
    r->set_protocol(v1::PROTOCOL_SIMPLE);
    r->set_n_channels(2);
    r->set_root(-1);
    r->set_peer(-1);
    r->set_api_cpu_ns(now - 50'000);
    r->set_enqueue_start_cpu_ns(now - 40'000);
    r->set_enqueue_stop_cpu_ns(now - 35'000);
    for (uint32_t ch = 0; ch < 2; ++ch) {
      auto* k = req->add_kernel_channels();
      k->set_op_id(id);
      k->set_channel_id(ch);
      k->set_start_gpu_ns(gpu_base + seq * 100'000);
      k->set_stop_gpu_ns(gpu_base + seq * 100'000 + 20'000 + ch * 1000);
      k->set_start_cpu_ns(now - 30'000);
      k->set_stop_cpu_ns(now - 5'000);
      auto* p = req->add_proxy_ops();
      p->set_op_id(id);
      p->set_proxy_index(ch);
      p->set_channel_id(ch);
      p->set_peer(ch == 0 ? rank + 1 : rank - 1);
      p->set_is_send(ch == 0);
      p->set_n_steps(4);
      p->set_bytes(1 << 19);
      p->set_start_cpu_ns(now - 30'000);
      p->set_stop_cpu_ns(now - 6'000);
    }
    auto* c = req->add_completions();
    c->set_op_id(id);
    c->set_completion_cpu_ns(now);
    c->set_children(4);
  }
}

v1::StreamTelemetryRequest MakeGoodbye() {
  v1::StreamTelemetryRequest req;
  req.mutable_goodbye()->set_reason(v1::ProcessGoodbye::REASON_FINALIZE);
  req.mutable_goodbye()->set_time_cpu_ns(MonotonicNowNs());
  return req;
}

}  // namespace pitstop::agent::testing
