#include "src/importers/inspector_reader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

int64_t Int(const json& o, const char* key, int64_t dflt) {
  auto it = o.find(key);
  if (it == o.end()) return dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) return SaturatingInt(it->get<double>());
  return dflt;
}

double Num(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string Str(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string()
             ? CleanText(it->get_ref<const std::string&>())
             : "";
}

bool Record(const json& obj, int64_t line, InspectorRecord* r) {
  auto h = obj.find("header");
  auto c = obj.find("coll_perf");
  if (h == obj.end() || c == obj.end() || !h->is_object() || !c->is_object()) {
    return false;
  }
  std::string id = Str(*h, "id");
  absl::string_view hex = id;
  absl::ConsumePrefix(&hex, "0x");
  if (!absl::SimpleHexAtoi(hex, &r->comm_id)) {
    r->comm_id = StableHash(id);
  }
  r->rank = static_cast<int32_t>(Int(*h, "rank", -1));
  r->n_ranks = static_cast<int32_t>(Int(*h, "n_ranks", 0));
  r->n_nodes = static_cast<int32_t>(Int(*h, "nnodes", 0));
  if (auto m = obj.find("metadata"); m != obj.end() && m->is_object()) {
    r->hostname = Str(*m, "hostname");
    r->pid = static_cast<uint32_t>(Int(*m, "pid", 0));
    r->dump_ts_us = static_cast<uint64_t>(
        std::max<int64_t>(0, Int(*m, "dump_timestamp_us", 0)));
  }
  r->coll = Str(*c, "coll");
  r->seq = static_cast<uint64_t>(std::max<int64_t>(0, Int(*c, "coll_sn", 0)));
  r->msg_bytes = static_cast<uint64_t>(
      std::max<int64_t>(0, Int(*c, "coll_msg_size_bytes", 0)));
  r->exec_time_us = Num(*c, "coll_exec_time_us");
  r->timing_source = Str(*c, "coll_timing_source");
  r->busbw_gbs = Num(*c, "coll_busbw_gbs");
  if (auto t = c->find("event_trace_ts"); t != c->end() && t->is_object()) {
    r->start_us = static_cast<uint64_t>(
        std::max<int64_t>(0, Int(*t, "coll_start_ts", 0)));
    if (auto k = t->find("kernel_events"); k != t->end() && k->is_array()) {
      uint64_t first = 0, last = 0;
      for (const json& ev : *k) {
        if (!ev.is_object()) continue;
        uint64_t s = static_cast<uint64_t>(
            std::max<int64_t>(0, Int(ev, "kernel_start_ts", 0)));
        uint64_t e = static_cast<uint64_t>(
            std::max<int64_t>(0, Int(ev, "kernel_stop_ts", 0)));
        if (s > 0 && (first == 0 || s < first)) first = s;
        last = std::max(last, e);
      }
      if (first > 0) r->start_us = first;
      r->stop_us = last;
    }
  }
  r->line = line;
  return r->rank >= 0;
}

// The file's last dump time and its dump interval (the median gap between
// successive dump times; 0 with fewer than two gaps), in ns.
void FlushTimes(const InspectorFile& f, ImportedRank* rank) {
  std::set<uint64_t> dumps;
  for (const InspectorRecord& r : f.records) {
    if (r.dump_ts_us > 0) dumps.insert(r.dump_ts_us);
  }
  if (dumps.empty()) return;
  rank->log_end_ns = *dumps.rbegin() * 1000;
  std::vector<uint64_t> gaps;
  for (auto it = std::next(dumps.begin()); it != dumps.end(); ++it) {
    gaps.push_back(*it - *std::prev(it));
  }
  if (gaps.size() < 2) return;
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  rank->flush_interval_ns = gaps[gaps.size() / 2] * 1000;
}

}  // namespace

bool LooksLikeInspector(absl::string_view head) {
  return absl::StrContains(head, "\"coll_perf\"") ||
         (absl::StrContains(head, "\"header\"") &&
          absl::StrContains(head, "\"n_ranks\""));
}

absl::StatusOr<InspectorFile> ParseInspectorFile(InputStream* in,
                                                 const std::string& file) {
  InspectorFile out;
  out.file = file;
  std::string line, pending;
  int64_t line_no = 0, start_line = 0;
  int depth = 0;
  bool in_string = false, escape = false;
  while (std::getline(in->stream(), line)) {
    ++line_no;
    if (pending.empty()) {
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      start_line = line_no;
    }
    // Track brace depth outside strings so pretty-printed objects work.
    for (char ch : line) {
      if (in_string) {
        if (escape)
          escape = false;
        else if (ch == '\\')
          escape = true;
        else if (ch == '"')
          in_string = false;
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == '{' || ch == '[') {
        ++depth;
      } else if (ch == '}' || ch == ']') {
        --depth;
      }
    }
    pending += line;
    pending += '\n';
    if (depth > 0 && pending.size() < (64u << 20)) continue;
    json obj;
    try {
      obj = json::parse(pending);
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": line ", start_line, ": malformed JSON: ", e.what()));
    }
    pending.clear();
    depth = 0;
    in_string = escape = false;
    InspectorRecord r;
    if (!obj.is_object() || !Record(obj, start_line, &r)) {
      if (out.warnings.size() < 5) {
        out.warnings.push_back(absl::StrCat(
            file, ": line ", start_line,
            ": not an Inspector record (no header.rank / coll_perf); skipped"));
      }
      continue;
    }
    out.records.push_back(std::move(r));
  }
  if (!in->status().ok()) return in->status();
  if (!pending.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": line ", start_line, ": truncated JSON object at end of file"));
  }
  if (out.records.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, line_no == 0 ? ": empty file" : ": no Inspector records"));
  }
  return out;
}

absl::StatusOr<ImportedJob> BuildInspectorJob(
    std::vector<InspectorFile> files, const InspectorJobOptions& options) {
  ImportedJob job;
  job.format = "inspector";
  job.job_id = options.job_id;
  // Global rank of each file: its rank in the largest communicator.
  int32_t world = 0;
  uint64_t world_comm = 0;
  for (const InspectorFile& f : files) {
    for (const InspectorRecord& r : f.records) {
      if (r.n_ranks > world) {
        world = r.n_ranks;
        world_comm = r.comm_id;
      }
    }
  }
  job.world_size = world;
  // comm -> comm rank -> global rank, learned from files that are in the
  // world communicator too.
  std::map<uint64_t, std::map<int32_t, int32_t>> members;
  std::vector<int32_t> global(files.size(), -1);
  for (size_t k = 0; k < files.size(); ++k) {
    for (const InspectorRecord& r : files[k].records) {
      if (r.comm_id == world_comm) global[k] = r.rank;
    }
    if (global[k] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(files[k].file,
                       ": has no record of the largest communicator; cannot "
                       "tell its global rank"));
    }
    for (const InspectorRecord& r : files[k].records) {
      members[r.comm_id][r.rank] = global[k];
    }
    for (const std::string& w : files[k].warnings) job.warnings.push_back(w);
  }
  std::set<int32_t> present(global.begin(), global.end());
  if (present.size() != files.size()) {
    return absl::InvalidArgumentError(
        "two Inspector files claim the same rank");
  }
  for (int32_t r = 0; r < world; ++r) {
    if (!present.count(r)) job.missing_ranks.push_back(r);
  }
  if (!job.missing_ranks.empty()) {
    job.warnings.push_back(absl::StrCat("no Inspector file for rank(s) ",
                                        absl::StrJoin(job.missing_ranks, ","),
                                        ": analysis is partial"));
  }
  for (size_t k = 0; k < files.size(); ++k) {
    ImportedRank rank;
    rank.global_rank = global[k];
    rank.file = files[k].file;
    FlushTimes(files[k], &rank);
    std::set<uint64_t> seen;
    uint64_t op_id = 0;
    for (const InspectorRecord& r : files[k].records) {
      rank.host = r.hostname.empty() ? SyntheticHost("inspector-", global[k], 8)
                                     : r.hostname;
      rank.pid = r.pid;
      const auto& m = members[r.comm_id];
      bool complete = static_cast<int32_t>(m.size()) == r.n_ranks;
      if (seen.insert(r.comm_id).second) {
        v1::CommunicatorInfo info;
        info.set_comm_hash(r.comm_id);
        info.set_comm_name(absl::StrCat("comm 0x", absl::Hex(r.comm_id)));
        info.set_n_ranks(r.n_ranks);
        info.set_n_nodes(r.n_nodes);
        info.set_rank(r.rank);
        for (int32_t cr = 0; cr < r.n_ranks; ++cr) {
          auto it = m.find(cr);
          info.add_global_ranks(it == m.end() ? -1 : it->second);
        }
        info.set_host(rank.host);
        info.set_pid(rank.pid);
        info.set_job_id(job.job_id);
        info.set_source(v1::CommunicatorInfo::SOURCE_IMPORTED);
        rank.comms.push_back(std::move(info));
      }
      ImportedOp op;
      v1::OpRecord& rec = op.record;
      rec.set_op_id(++op_id);
      rec.set_comm_hash(r.comm_id);
      rec.set_rank(r.rank);
      rec.set_func(ParseCollFunc(r.coll));
      rec.set_kind(v1::OP_KIND_COLLECTIVE);
      rec.set_seq_number(r.seq);
      rec.set_bytes(r.msg_bytes);
      rec.set_root(-1);
      rec.set_peer(-1);
      uint64_t dur_ns = static_cast<uint64_t>(
          std::max<int64_t>(0, SaturatingInt(r.exec_time_us * 1000)));
      uint64_t end = r.stop_us > 0 ? r.stop_us * 1000 : r.dump_ts_us * 1000;
      uint64_t start = r.start_us > 0 && r.stop_us > 0 ? r.start_us * 1000
                       : end > dur_ns                  ? end - dur_ns
                                                       : 0;
      rec.set_enqueue_start_cpu_ns(start);
      op.state = v1::OP_STATE_COMPLETED;
      op.start_ns = start;
      op.end_ns = start + dur_ns;
      op.name = r.coll;
      op.track = absl::StrCat("comm 0x", absl::Hex(r.comm_id));
      op.for_detection = complete;
      rank.ops.push_back(std::move(op));
    }
    job.ranks.push_back(std::move(rank));
  }
  std::sort(job.ranks.begin(), job.ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) {
              return a.global_rank < b.global_rank;
            });
  job.notes.push_back(absl::StrCat("inspector: ", files.size(),
                                   " process files, world of ", world,
                                   " ranks"));
  return job;
}

}  // namespace pitstop::importers
