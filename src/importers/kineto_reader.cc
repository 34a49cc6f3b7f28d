#include "src/importers/kineto_reader.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/importers/import_util.h"
#include "src/importers/trace_event_stream.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

struct CpuOp {
  int64_t tid = 0;
  double ts = 0;
  double dur = 0;
  std::string name;
  uint64_t bytes = 0;
};

struct Launch {
  int64_t tid = 0;
  double ts = 0;
};

double Num(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : 0.0;
}

int64_t Int(const json& obj, const char* key, int64_t dflt) {
  auto it = obj.find(key);
  if (it == obj.end()) return dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) return SaturatingInt(it->get<double>());
  return dflt;
}

std::string Str(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return "";
  if (it->is_string()) return CleanText(it->get_ref<const std::string&>());
  if (it->is_number_integer()) return absl::StrCat(it->get<int64_t>());
  return "";
}

bool IsNcclKernel(absl::string_view name) {
  return absl::StartsWith(name, "ncclKernel_") ||
         absl::StartsWith(name, "ncclDevKernel_") ||
         absl::StartsWith(name, "nccl");
}

// Collects the parts of a trace the reader needs, one event at a time.
class Collector final : public TraceEventSink {
 public:
  explicit Collector(KinetoTrace* trace) : trace_(trace) {}

  void Event(const json& e) override {
    ++trace_->events;
    if (!e.is_object()) return;
    std::string cat = Str(e, "cat");
    std::string name = Str(e, "name");
    const json* args = nullptr;
    if (auto it = e.find("args"); it != e.end() && it->is_object()) {
      args = &*it;
    }
    if (cat == "kernel" && IsNcclKernel(name)) {
      KinetoKernel k;
      k.name = name;
      k.ts_us = Num(e, "ts");
      k.dur_us = Num(e, "dur");
      if (args != nullptr) {
        k.stream = Int(*args, "stream", Int(e, "tid", -1));
        k.device = Int(*args, "device", -1);
        k.correlation = Int(*args, "correlation", -1);
        k.coll_name = Str(*args, "Collective name");
        k.in_nelems = static_cast<uint64_t>(
            std::max<int64_t>(0, Int(*args, "In msg nelems", 0)));
        k.out_nelems = static_cast<uint64_t>(
            std::max<int64_t>(0, Int(*args, "Out msg nelems", 0)));
        k.group_size = Int(*args, "Group size", 0);
        k.dtype = Str(*args, "dtype");
        k.pg_name = Str(*args, "Process Group Name");
        k.pg_desc = Str(*args, "Process Group Description");
        if (auto r = args->find("Process Group Ranks"); r != args->end()) {
          ParseRankList(*r, &k.pg_ranks);
        }
      } else {
        k.stream = Int(e, "tid", -1);
      }
      trace_->kernels.push_back(std::move(k));
    } else if (cat == "cpu_op" && (absl::StartsWith(name, "c10d::") ||
                                   absl::StartsWith(name, "nccl:"))) {
      CpuOp op;
      op.tid = Int(e, "tid", 0);
      op.ts = Num(e, "ts");
      op.dur = Num(e, "dur");
      op.name = name;
      if (trace_->pid == 0)
        trace_->pid = static_cast<uint32_t>(Int(e, "pid", 0));
      if (args != nullptr) op.bytes = InputBytes(*args);
      cpu_ops_.push_back(std::move(op));
    } else if (cat == "cuda_runtime" &&
               absl::StrContains(name, "LaunchKernel") && args != nullptr) {
      launches_[Int(*args, "correlation", -1)] = {Int(e, "tid", 0),
                                                  Num(e, "ts")};
    }
  }

  void Distributed(const json& info) override {
    trace_->rank = static_cast<int32_t>(Int(info, "rank", -1));
    trace_->world_size = static_cast<int32_t>(Int(info, "world_size", 0));
  }

  // Ties kernels to the CPU op that launched them (same thread, launch time
  // inside the op).
  void Link() {
    std::sort(cpu_ops_.begin(), cpu_ops_.end(),
              [](const CpuOp& a, const CpuOp& b) {
                return a.tid != b.tid ? a.tid < b.tid : a.ts < b.ts;
              });
    for (KinetoKernel& k : trace_->kernels) {
      auto l = launches_.find(k.correlation);
      if (l == launches_.end()) continue;
      const Launch& launch = l->second;
      auto it = std::upper_bound(cpu_ops_.begin(), cpu_ops_.end(), launch,
                                 [](const Launch& x, const CpuOp& op) {
                                   return x.tid != op.tid ? x.tid < op.tid
                                                          : x.ts < op.ts;
                                 });
      while (it != cpu_ops_.begin()) {
        --it;
        if (it->tid != launch.tid) break;
        if (it->ts <= launch.ts && launch.ts <= it->ts + it->dur) {
          if (k.coll_name.empty()) k.coll_name = it->name;
          k.msg_bytes = it->bytes;
          k.cpu_ts_us = it->ts;
          break;
        }
      }
    }
  }

 private:
  static uint64_t InputBytes(const json& args) {
    auto dims = args.find("Input Dims");
    auto types = args.find("Input type");
    if (dims == args.end() || !dims->is_array() || dims->empty() ||
        !(*dims)[0].is_array() || (*dims)[0].empty()) {
      return 0;
    }
    uint64_t n = 1;
    for (const json& d : (*dims)[0]) {
      if (d.is_number_integer() && d.get<int64_t>() > 0) n *= d.get<uint64_t>();
    }
    uint32_t size = 1;
    if (types != args.end() && types->is_array() && !types->empty() &&
        (*types)[0].is_string()) {
      ParseDataType((*types)[0].get<std::string>(), &size);
    }
    return n * size;
  }

  KinetoTrace* trace_;
  std::vector<CpuOp> cpu_ops_;
  std::map<int64_t, Launch> launches_;
};

}  // namespace

bool LooksLikeKineto(absl::string_view head) {
  return absl::StrContains(head, "\"traceEvents\"") ||
         absl::StrContains(head, "\"schemaVersion\"");
}

absl::StatusOr<KinetoTrace> ParseKinetoTrace(
    InputStream* in, const std::string& file,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  KinetoTrace trace;
  trace.file = file;
  Collector collector(&trace);
  absl::StatusOr<uint64_t> events =
      StreamTraceEvents(in, file, &collector, progress);
  if (!events.ok()) return events.status();
  collector.Link();
  if (trace.rank < 0) {
    trace.rank = RankFromFileName(file);
    if (trace.rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          file,
          ": no distributedInfo.rank and no rank number in the file name"));
    }
    trace.warnings.push_back(
        absl::StrCat(file, ": no distributedInfo.rank; rank ", trace.rank,
                     " taken from the file name"));
  }
  return trace;
}

}  // namespace pitstop::importers
