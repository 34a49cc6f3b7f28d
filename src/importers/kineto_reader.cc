#include "src/importers/kineto_reader.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/importers/import_util.h"

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
class Collector {
 public:
  explicit Collector(KinetoTrace* trace) : trace_(trace) {}

  void Event(const json& e) {
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

  void Distributed(const json& info) {
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

// SAX handler: builds a small DOM for each element of the top-level
// "traceEvents" array (and for "distributedInfo"), hands it to the
// collector and forgets it.
class Sax final : public nlohmann::json_sax<json> {
 public:
  Sax(Collector* collector, InputStream* in,
      const std::function<void(uint64_t, uint64_t)>& progress)
      : collector_(collector), in_(in), progress_(progress) {}

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override { return Value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override {
    return Value(json(v));
  }
  bool string(string_t& v) override { return Value(json(std::move(v))); }
  bool binary(binary_t&) override { return Value(json(nullptr)); }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override {
    if (depth_ == 1 && root_key_ == "traceEvents") {
      ++depth_;
      in_events_ = true;
      return true;
    }
    return Open(json::array());
  }
  bool end_object() override { return Close(); }
  bool end_array() override {
    if (in_events_ && depth_ == 2 && stack_.empty()) {
      --depth_;
      in_events_ = false;
      return true;
    }
    return Close();
  }
  bool key(string_t& k) override {
    if (depth_ == 1) root_key_ = k;
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_position_ = position;
    error_ = ex.what();
    return false;
  }

  size_t error_position() const { return error_position_; }
  const std::string& error() const { return error_; }
  bool saw_root_object() const { return saw_root_; }

 private:
  bool Capturing() const {
    return (in_events_ && depth_ >= 2) ||
           (depth_ >= 1 && root_key_ == "distributedInfo" && !stack_.empty());
  }

  bool Open(json fresh) {
    if (depth_ == 0) {
      saw_root_ = fresh.is_object();
      ++depth_;
      return true;
    }
    bool start_capture =
        stack_.empty() && ((in_events_ && depth_ == 2) ||
                           (depth_ == 1 && root_key_ == "distributedInfo"));
    ++depth_;
    if (start_capture) {
      current_ = std::move(fresh);
      stack_.push_back(&current_);
      return true;
    }
    if (stack_.empty()) return true;  // skipping an uninteresting subtree
    json* parent = stack_.back();
    json* child;
    if (parent->is_array()) {
      parent->push_back(std::move(fresh));
      child = &parent->back();
    } else {
      child = &(*parent)[key_];
      *child = std::move(fresh);
    }
    stack_.push_back(child);
    return true;
  }

  bool Close() {
    --depth_;
    if (stack_.empty()) return true;
    stack_.pop_back();
    if (stack_.empty()) {
      if (in_events_) {
        collector_->Event(current_);
        if (++count_ % 4096 == 0 && progress_) {
          uint64_t off = in_->compressed_offset();
          if (off >= next_report_) {
            progress_(off, in_->file_size());
            next_report_ = off + (16u << 20);
          }
        }
      } else {
        collector_->Distributed(current_);
      }
      current_ = json();
    }
    return true;
  }

  bool Value(json v) {
    if (stack_.empty()) return true;
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
    } else {
      (*top)[key_] = std::move(v);
    }
    return true;
  }

  Collector* collector_;
  InputStream* in_;
  const std::function<void(uint64_t, uint64_t)>& progress_;
  int depth_ = 0;
  bool in_events_ = false;
  bool saw_root_ = false;
  std::string root_key_;
  std::string key_;
  json current_;
  std::vector<json*> stack_;
  uint64_t count_ = 0;
  uint64_t next_report_ = 16u << 20;
  size_t error_position_ = 0;
  std::string error_;
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
  Sax sax(&collector, in, progress);
  bool ok = false;
  try {
    ok = json::sax_parse(in->stream(), &sax, json::input_format_t::json, true);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
  if (!in->status().ok()) return in->status();
  if (!ok) {
    if (sax.error_position() <= 1 && trace.events == 0 &&
        sax.error().find("empty input") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": empty file"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": malformed JSON at byte ", sax.error_position(),
                     " (after decompression): ", sax.error()));
  }
  if (!sax.saw_root_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": not a Chrome trace (top level is not an object)"));
  }
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
