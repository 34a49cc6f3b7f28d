#include "src/importers/replay.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/status_macros.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/exporter.h"
#include "plugin/record.h"
#include "plugin/ring.h"
#include "src/importers/analysis.h"
#include "src/sim/local_cluster.h"

namespace pitstop::importers {
namespace {

// NCCL's own spellings (static literals, as the profiler ABI hands them).
const char* NcclFunc(v1::CollFunc f) {
  switch (f) {
    case v1::COLL_FUNC_ALL_REDUCE:
      return "AllReduce";
    case v1::COLL_FUNC_ALL_GATHER:
      return "AllGather";
    case v1::COLL_FUNC_REDUCE_SCATTER:
      return "ReduceScatter";
    case v1::COLL_FUNC_BROADCAST:
      return "Broadcast";
    case v1::COLL_FUNC_REDUCE:
      return "Reduce";
    case v1::COLL_FUNC_ALL_TO_ALL:
      return "AlltoAll";
    case v1::COLL_FUNC_GATHER:
      return "Gather";
    case v1::COLL_FUNC_SCATTER:
      return "Scatter";
    case v1::COLL_FUNC_SEND:
      return "Send";
    case v1::COLL_FUNC_RECV:
      return "Recv";
    case v1::COLL_FUNC_SEND_RECV:
      return "SendRecv";
    case v1::COLL_FUNC_UNSPECIFIED:
      return nullptr;
    default:
      return "Other";
  }
}

const char* NcclType(v1::DataType t) {
  switch (t) {
    case v1::DATA_TYPE_INT8:
      return "ncclInt8";
    case v1::DATA_TYPE_UINT8:
      return "ncclUint8";
    case v1::DATA_TYPE_INT32:
      return "ncclInt32";
    case v1::DATA_TYPE_UINT32:
      return "ncclUint32";
    case v1::DATA_TYPE_INT64:
      return "ncclInt64";
    case v1::DATA_TYPE_UINT64:
      return "ncclUint64";
    case v1::DATA_TYPE_FLOAT16:
      return "ncclFloat16";
    case v1::DATA_TYPE_FLOAT32:
      return "ncclFloat32";
    case v1::DATA_TYPE_FLOAT64:
      return "ncclFloat64";
    case v1::DATA_TYPE_BFLOAT16:
      return "ncclBfloat16";
    case v1::DATA_TYPE_FLOAT8_E4M3:
      return "ncclFloat8e4m3";
    case v1::DATA_TYPE_FLOAT8_E5M2:
      return "ncclFloat8e5m2";
    default:
      return nullptr;
  }
}

// One record to send at a data time.
struct Event {
  uint64_t t;  // data time (ns); 0 = at the start
  int order;   // enqueue before kernel before completion at equal times
  plugin::Record rec;
};

// Maps data time to this host's monotonic clock.
struct TimeMap {
  uint64_t t0 = 0;
  int64_t start_mono = 0;
  double speed = 1;
  uint64_t operator()(uint64_t t) const {
    if (t == 0 || t < t0) return static_cast<uint64_t>(start_mono);
    return static_cast<uint64_t>(start_mono) +
           static_cast<uint64_t>(static_cast<double>(t - t0) / speed);
  }
};

std::vector<Event> EventsOf(const ImportedRank& rank, const TimeMap& tm) {
  std::vector<Event> out;
  for (const ImportedOp& op : rank.ops) {
    if (!op.for_detection) continue;
    const v1::OpRecord& r = op.record;
    uint64_t enq = r.enqueue_start_cpu_ns();
    Event e{enq, 0, {}};
    e.rec.type = plugin::RecordType::kOp;
    plugin::OpRec& o = e.rec.op;
    o = plugin::OpRec{};
    o.op_id = r.op_id();
    o.comm_hash = r.comm_hash();
    o.rank = r.rank();
    o.is_p2p = r.kind() == v1::OP_KIND_P2P;
    o.seq_number = r.seq_number();
    o.count = r.count();
    o.root = r.root();
    o.peer = r.peer();
    o.func = NcclFunc(r.func());
    o.datatype = NcclType(r.datatype());
    o.api_cpu_ns = r.api_cpu_ns() != 0 ? tm(r.api_cpu_ns()) : 0;
    o.enqueue_start_cpu_ns = tm(enq);
    o.enqueue_stop_cpu_ns =
        tm(r.enqueue_stop_cpu_ns() != 0 ? r.enqueue_stop_cpu_ns() : enq);
    out.push_back(e);
    bool timed = op.start_ns != 0 && op.end_ns >= op.start_ns;
    bool done = op.state == v1::OP_STATE_COMPLETED;
    if (timed || op.state == v1::OP_STATE_STARTED) {
      uint64_t start = op.start_ns != 0 ? op.start_ns : enq;
      Event k{done && timed ? op.end_ns : start, 1, {}};
      k.rec.type = plugin::RecordType::kKernelCh;
      k.rec.kernel = plugin::KernelChRec{};
      k.rec.kernel.op_id = r.op_id();
      k.rec.kernel.start_cpu_ns = tm(start);
      k.rec.kernel.start_gpu_ns = timed ? tm(start) : 0;
      if (done && timed) {
        k.rec.kernel.stop_cpu_ns = tm(op.end_ns);
        k.rec.kernel.stop_gpu_ns = tm(op.end_ns);
      }
      out.push_back(k);
    }
    if (done) {
      uint64_t end = op.end_ns != 0 ? op.end_ns : enq;
      Event c{end, 2, {}};
      c.rec.type = plugin::RecordType::kCompletion;
      c.rec.completion = plugin::CompletionRec{};
      c.rec.completion.op_id = r.op_id();
      c.rec.completion.completion_cpu_ns = tm(end);
      c.rec.completion.children = timed ? 1 : 0;
      out.push_back(c);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) {
    return a.t != b.t ? a.t < b.t : a.order < b.order;
  });
  return out;
}

plugin::CommInfo ToPluginComm(const v1::CommunicatorInfo& c) {
  plugin::CommInfo p;
  p.comm_hash = c.comm_hash();
  p.comm_name = c.comm_name();
  p.n_ranks = c.n_ranks();
  p.n_nodes = c.n_nodes();
  p.rank = c.rank();
  p.global_ranks.assign(c.global_ranks().begin(), c.global_ranks().end());
  p.host = c.host();
  p.pid = c.pid();
  p.job_id = c.job_id();
  p.cuda_device = c.cuda_device();
  p.source = plugin::CommInfo::kInterposer;
  return p;
}

// Streams one rank's records to its agent, paced by `tm`.
class RankReplayer {
 public:
  RankReplayer(const ImportedJob& job, const ImportedRank& rank,
               const std::string& socket)
      : rank_(rank),
        rings_(4, 1 << 14),
        registry_(plugin::kDefaultEventMask, plugin::kDefaultDeepEventMask) {
    plugin::ExporterOptions o;
    o.socket_path = socket;
    o.hello.host = rank.host;
    o.hello.pid = rank.pid;
    o.hello.job_id = job.job_id;
    o.hello.library_version = "replay";
    o.hello.load_mode = "replay";
    o.hello.global_rank = rank.global_rank;
    // Many ranks on one loaded machine: give the goodbye time to arrive, so
    // a clean end is never read as a crash.
    o.finalize_timeout_ms = 15000;
    exporter_ = plugin::Exporter::Start(o, &rings_, &registry_);
  }

  // Registers the communicators (their INIT goes out with the first batch).
  void Register(const TimeMap& tm) {
    for (const v1::CommunicatorInfo& c : rank_.comms) {
      // The registry keeps the pointer (NCCL's mask word): stable storage.
      masks_.push_back(0);
      registry_.Add(ToPluginComm(c), &masks_.back(), tm(0));
    }
  }

  // True once the agent took the stream's first batch (hello + comms).
  bool Accepted() const { return exporter_->batches_sent() > 0; }

  void Run(const TimeMap& tm, std::atomic<uint64_t>* sent) {
    for (const Event& e : EventsOf(rank_, tm)) {
      int64_t due = static_cast<int64_t>(tm(e.t));
      int64_t now = MonotonicNowNs();
      if (due > now) {
        absl::SleepFor(absl::Nanoseconds(due - now));
      }
      while (true) {
        plugin::Ring* ring = rings_.ThreadRing();
        if (ring == nullptr) return;
        if (plugin::Record* rec = ring->Reserve()) {
          *rec = e.rec;
          ring->Publish();
          sent->fetch_add(1);
          break;
        }
        absl::SleepFor(absl::Milliseconds(1));  // ring full: wait, never drop
      }
    }
  }

  void Stop() { exporter_->Stop(plugin::kGoodbyeExit); }

 private:
  const ImportedRank& rank_;
  plugin::RingSet rings_;
  plugin::CommRegistry registry_;
  std::deque<int> masks_;
  std::unique_ptr<plugin::Exporter> exporter_;
};

absl::StatusOr<std::vector<v1::Fault>> ListFaults(v1::Controller::Stub* stub,
                                                  const std::string& job_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListFaultsRequest req;
  req.set_job_id(job_id);
  v1::ListFaultsResponse resp;
  grpc::Status s = stub->ListFaults(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("ListFaults: ", s.error_message()));
  }
  return std::vector<v1::Fault>(resp.faults().begin(), resp.faults().end());
}

// What a verdict reads of the faults: class, suspects and victims.
std::string VerdictShape(const std::vector<v1::Fault>& faults) {
  const Verdict v = VerdictFromFaults(faults, {});
  std::string out = absl::StrCat(v.fault_class, ":");
  for (int32_t r : v.suspects) absl::StrAppend(&out, r, ",");
  absl::StrAppend(&out, "|");
  for (int32_t r : v.victims) absl::StrAppend(&out, r, ",");
  return absl::StrCat(out, "|", faults.size());
}

// Detection runs on the controller's real clock. On a loaded machine its
// cycles and the agents' batches lag the replay, and a verdict read at a
// fixed time can miss a fault still being confirmed (seen: one of two
// faults of a Flight Recorder scenario under load). After `settle`, the
// faults are read again until their verdict has kept its shape for
// `settle` / 2, for at most `settle_max` in all.
absl::StatusOr<std::vector<v1::Fault>> SettledFaults(
    v1::Controller::Stub* stub, const std::string& job_id,
    absl::Duration settle, absl::Duration settle_max,
    const std::function<void(const std::string&)>& say) {
  const absl::Time start = absl::Now();
  absl::SleepFor(settle);
  ASSIGN_OR_RETURN(std::vector<v1::Fault> faults, ListFaults(stub, job_id));
  std::string shape = VerdictShape(faults);
  absl::Time same_since = absl::Now();
  while (absl::Now() - same_since < settle / 2) {
    if (absl::Now() - start >= settle_max) {
      say(absl::StrCat("the faults were still changing after ",
                       absl::FormatDuration(settle_max),
                       "; reading the verdict now"));
      break;
    }
    absl::SleepFor(absl::Milliseconds(250));
    ASSIGN_OR_RETURN(faults, ListFaults(stub, job_id));
    if (std::string now = VerdictShape(faults); now != shape) {
      shape = std::move(now);
      same_since = absl::Now();
    }
  }
  return faults;
}

using Say = std::function<void(const std::string&)>;

// The data's time span (ns) over the ops used for detection.
std::pair<uint64_t, uint64_t> DataSpan(const ImportedJob& job) {
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (const ImportedRank& r : job.ranks) {
    for (const ImportedOp& op : r.ops) {
      for (uint64_t t :
           {op.record.enqueue_start_cpu_ns(), op.start_ns, op.end_ns}) {
        if (t == 0 || !op.for_detection) continue;
        t0 = std::min(t0, t);
        t1 = std::max(t1, t);
      }
    }
  }
  if (t0 == UINT64_MAX) t0 = t1 = 0;
  return {t0, t1};
}

// The replay's speed: --speed, else what fits max_replay (at least 1x);
// clamped (with a note) where scaled durations would shrink below what the
// clocks and the agents' batching can tell apart (microseconds).
double ReplaySpeed(double span_s, const ReplayOptions& options,
                   std::string* note, const Say& say) {
  double speed = options.speed;
  double fit = span_s / absl::ToDoubleSeconds(options.max_replay);
  if (speed <= 0) speed = std::max(1.0, fit);
  // The data still fits in max_replay at this speed.
  double max_speed = std::max(kMaxReplaySpeed, fit);
  if (speed > max_speed) {
    *note = absl::StrCat("--speed ", speed, " clamped to ", max_speed,
                         ": faster replay loses the timing evidence");
    say(*note);
    speed = max_speed;
  }
  return speed;
}

absl::Status SetImportedPolicy(v1::Controller::Stub* stub,
                               const std::string& address,
                               const std::string& job_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::SetJobPolicyRequest req;
  req.set_job_id(job_id);
  *req.mutable_policy() = ImportedJobPolicy();
  v1::SetJobPolicyResponse resp;
  grpc::Status s = stub->SetJobPolicy(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "controller at ", address, ": SetJobPolicy: ", s.error_message()));
  }
  return absl::OkStatus();
}

// Registers every rank's stream and waits (up to 60 s) until the agents
// accepted all of them: pacing starts only then, so the replay does not
// depend on how loaded the machine is.
absl::Status OpenStreams(
    const std::vector<std::unique_ptr<RankReplayer>>& replayers,
    const TimeMap& tm) {
  for (auto& rp : replayers) rp->Register(tm);
  int64_t open_deadline = MonotonicNowNs() + 60'000'000'000;
  size_t accepted = 0;
  while (true) {
    accepted = 0;
    for (auto& rp : replayers) accepted += rp->Accepted();
    if (accepted == replayers.size() || MonotonicNowNs() > open_deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (accepted != replayers.size()) {
    return absl::DeadlineExceededError(
        absl::StrCat("replay: only ", accepted, " of ", replayers.size(),
                     " rank stream(s) were accepted by the agents in 60 s"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayJob(const ImportedJob& imported,
                                       const ReplayOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  // As in AnalyzeJob: records above where a rank's log merely ends are not
  // sent.
  LogEndReport ends =
      JudgeLogEnds(imported, LogEndOptionsOf(ImportedJobPolicy()));
  ImportedJob job = imported;
  ApplyLogEnds(ends, &job);
  // Nodes, in order of first appearance.
  std::vector<std::string> hosts;
  std::map<std::string, int> node_of;
  for (const ImportedRank& r : job.ranks) {
    if (node_of.emplace(r.host, static_cast<int>(hosts.size())).second) {
      hosts.push_back(r.host);
    }
  }
  const auto [t0, t1] = DataSpan(job);
  const double span_s = static_cast<double>(t1 - t0) / 1e9;
  std::string speed_note;
  const double speed = ReplaySpeed(span_s, options, &speed_note, say);
  sim::LocalClusterOptions co;
  co.nodes = static_cast<int>(hosts.size());
  co.host_names = hosts;
  co.keep_work_dir = options.keep_work_dir;
  co.agent_batch_ms = 100;
  co.log_level = "warn";
  // One replaying process speaks for every rank of the trace with the pids
  // the trace recorded; these private agents must not hold it to its own.
  co.agent_extra_args.push_back("--ingest-verify-pid=false");
  say(absl::StrCat("starting a controller and ", hosts.size(), " agent(s)"));
  ASSIGN_OR_RETURN(auto cluster, sim::LocalCluster::Start(co));
  auto channel = grpc::CreateChannel(cluster->controller_address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Controller::NewStub(channel);
  RETURN_IF_ERROR(
      SetImportedPolicy(stub.get(), cluster->controller_address(), job.job_id));
  say(absl::StrCat("replaying ", job.ranks.size(), " rank(s), ", span_s,
                   " s of data at ", speed, "x"));
  std::vector<std::unique_ptr<RankReplayer>> replayers;
  for (const ImportedRank& r : job.ranks) {
    // A rank without a file left no data: its stream never starts, as in
    // pitstop analyze (known to the controller from its peers' member
    // lists only).
    if (r.absent) continue;
    replayers.push_back(std::make_unique<RankReplayer>(
        job, r, cluster->shm_socket(node_of[r.host])));
  }
  TimeMap tm;
  tm.t0 = t0;
  tm.speed = speed;
  RETURN_IF_ERROR(OpenStreams(replayers, tm));
  tm.start_mono = MonotonicNowNs() + 100'000'000;
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> threads;
  for (size_t k = 0; k < replayers.size(); ++k) {
    threads.emplace_back([&, p = replayers[k].get()] { p->Run(tm, &sent); });
  }
  for (std::thread& t : threads) t.join();
  say(absl::StrCat(sent.load(), " records sent; letting detection settle for ",
                   absl::FormatDuration(options.settle)));
  ASSIGN_OR_RETURN(std::vector<v1::Fault> faults,
                   SettledFaults(stub.get(), job.job_id, options.settle,
                                 options.settle_max, say));
  // Every stream ends with a goodbye before the daemons go down.
  for (auto& rp : replayers) rp->Stop();
  ReplayResult result;
  result.faults = std::move(faults);
  result.records_sent = sent.load();
  result.nodes = static_cast<int>(hosts.size());
  result.speed = speed;
  result.speed_note = speed_note;
  result.work_dir = cluster->work_dir();
  result.log_ends = std::move(ends.ends);
  for (auto& rp : replayers) rp->Stop();
  replayers.clear();
  absl::Status down = cluster->Shutdown();
  if (!down.ok()) say(absl::StrCat("shutdown: ", down.message()));
  return result;
}

}  // namespace pitstop::importers
