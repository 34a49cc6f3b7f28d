#include "src/importers/nccl_log_reader.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

constexpr size_t kMaxWarnings = 8;
constexpr size_t kMaxText = 512;
constexpr size_t kMaxProcesses = 4096;

// ncclResult_t named by PyTorch's or NCCL's wording; 0 if none.
int32_t ResultNamed(absl::string_view line) {
  static const std::pair<const char*, int32_t> kNames[] = {
      {"ncclUnhandledCudaError", 1}, {"unhandled cuda error", 1},
      {"ncclSystemError", 2},        {"unhandled system error", 2},
      {"ncclInternalError", 3},      {"internal error - please report", 3},
      {"ncclInvalidArgument", 4},    {"ncclInvalidUsage", 5},
      {"ncclRemoteError", 6},        {"remote process exited or there was", 6},
  };
  for (const auto& [name, code] : kNames) {
    if (absl::StrContains(line, name)) return code;
  }
  return 0;
}

// "[rank12]:" / "[default12]:" (torchrun, PyTorch) at the start: 12.
int32_t RankPrefix(absl::string_view* line) {
  for (absl::string_view tag : {"[rank", "[default"}) {
    if (!absl::StartsWith(*line, tag)) continue;
    const size_t close = line->find("]:");
    if (close == absl::string_view::npos) return -1;
    int32_t r = -1;
    if (!absl::SimpleAtoi(line->substr(tag.size(), close - tag.size()), &r)) {
      return -1;
    }
    line->remove_prefix(close + 2);
    *line = absl::StripLeadingAsciiWhitespace(*line);
    return r;
  }
  return -1;
}

// Digits at the end of the file's base name before the extension
// ("rank-3.log", "worker_12.txt"): the rank; -1 if none.
int32_t RankFromFileName(const std::string& file) {
  absl::string_view base = file;
  if (size_t slash = base.rfind('/'); slash != absl::string_view::npos) {
    base.remove_prefix(slash + 1);
  }
  if (size_t dot = base.find('.'); dot != absl::string_view::npos) {
    base = base.substr(0, dot);
  }
  size_t end = base.size();
  size_t start = end;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(base[start - 1])))
    --start;
  int32_t r = -1;
  if (start == end || !absl::SimpleAtoi(base.substr(start), &r)) return -1;
  return r;
}

// "HOST:PID:TID [DEV] REST": host, pid and REST; false if not that shape.
bool SplitNcclPrefix(absl::string_view line, std::string* host, uint32_t* pid,
                     absl::string_view* rest) {
  const size_t space = line.find(' ');
  if (space == absl::string_view::npos) return false;
  const absl::string_view who = line.substr(0, space);
  const size_t c2 = who.rfind(':');
  if (c2 == absl::string_view::npos || c2 == 0) return false;
  const size_t c1 = who.rfind(':', c2 - 1);
  if (c1 == absl::string_view::npos || c1 == 0) return false;
  if (!absl::SimpleAtoi(who.substr(c1 + 1, c2 - c1 - 1), pid)) return false;
  *host = std::string(who.substr(0, c1));
  absl::string_view r = absl::StripLeadingAsciiWhitespace(line.substr(space));
  if (absl::StartsWith(r, "[")) {
    const size_t close = r.find(']');
    if (close == absl::string_view::npos) return false;
    r = absl::StripLeadingAsciiWhitespace(r.substr(close + 1));
  }
  *rest = r;
  return true;
}

// "... rank R nranks N ..." values of an Init START/COMPLETE line.
void ReadInitLine(absl::string_view rest, NcclLogProcess* p) {
  std::vector<absl::string_view> words =
      absl::StrSplit(rest, ' ', absl::SkipEmpty());
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    int32_t v = 0;
    if (words[i] == "rank" && absl::SimpleAtoi(words[i + 1], &v)) {
      p->comm_rank = v;
    } else if (words[i] == "nranks" && absl::SimpleAtoi(words[i + 1], &v)) {
      p->n_ranks = v;
    }
  }
  for (absl::string_view w : words) {
    if (absl::StartsWith(w, "ncclCommInit") || w == "ncclCommSplit" ||
        w == "ncclCommShrink") {
      p->call = std::string(w);
      break;
    }
  }
}

std::string Cut(absl::string_view s) {
  return std::string(s.substr(0, kMaxText));
}

}  // namespace

bool LooksLikeNcclLog(absl::string_view head) {
  return absl::StrContains(head, " NCCL INFO ") ||
         absl::StrContains(head, " NCCL WARN ") ||
         absl::StrContains(head, "NCCL error in:") ||
         absl::StrContains(head, "ncclSystemError") ||
         absl::StrContains(head, "ncclInternalError");
}

bool NcclLogProcess::InitFailed() const {
  if (result == 0 || init_completed) return false;
  return init_started || init_trace;
}

std::string NcclLogProcess::ErrorText() const {
  for (absl::string_view key :
       {"No device found", "Connection refused", "connect", "Bootstrap",
        "no socket interface", "timeout", "failed"}) {
    for (const std::string& w : warnings) {
      if (absl::StrContains(w, key)) return w;
    }
  }
  return warnings.empty() ? "" : warnings.front();
}

absl::StatusOr<NcclLog> ParseNcclLog(std::istream* in,
                                     const std::string& file) {
  NcclLog log;
  log.file = file;
  const int32_t file_rank = RankFromFileName(file);
  // Processes by (host, pid); lines without that prefix (PyTorch's
  // exception) go to the process of their rank prefix, else the file's
  // only or last process.
  std::map<std::pair<std::string, uint32_t>, size_t> index;
  std::map<int32_t, size_t> by_rank;
  size_t last = SIZE_MAX;
  std::string line_buf;
  int64_t line_no = 0;
  auto process = [&](const std::string& host, uint32_t pid) -> NcclLogProcess* {
    auto [it, fresh] = index.try_emplace({host, pid}, log.processes.size());
    if (fresh) {
      if (log.processes.size() >= kMaxProcesses) {
        index.erase(it);
        return nullptr;
      }
      NcclLogProcess p;
      p.host = host;
      p.pid = pid;
      log.processes.push_back(std::move(p));
    }
    last = it->second;
    return &log.processes[it->second];
  };
  while (std::getline(*in, line_buf)) {
    ++line_no;
    absl::string_view line = absl::StripTrailingAsciiWhitespace(line_buf);
    const int32_t prefix_rank = RankPrefix(&line);
    std::string host;
    uint32_t pid = 0;
    absl::string_view rest;
    NcclLogProcess* p = nullptr;
    if (SplitNcclPrefix(line, &host, &pid, &rest) &&
        absl::StrContains(rest, "NCCL ")) {
      p = process(host, pid);
      if (p == nullptr) continue;
      if (prefix_rank >= 0) {
        p->global_rank = prefix_rank;
        by_rank[prefix_rank] = last;
      }
      const size_t info = rest.find("NCCL INFO ");
      const size_t warn = rest.find("NCCL WARN ");
      if (warn != absl::string_view::npos) {
        if (p->warnings.size() < kMaxWarnings) {
          p->warnings.push_back(Cut(absl::StripAsciiWhitespace(
              rest.substr(warn + sizeof("NCCL WARN ") - 1))));
        }
        // "file.cc:123 NCCL WARN": where it came from.
        const absl::string_view where = rest.substr(0, warn);
        if (absl::StrContains(where, "init.cc") ||
            absl::StrContains(where, "bootstrap.cc")) {
          p->init_trace = true;
        }
      } else if (info != absl::string_view::npos) {
        absl::string_view msg = rest.substr(info + 10);
        if (absl::StrContains(msg, "Init START")) {
          p->init_started = true;
          ReadInitLine(msg, p);
        } else if (absl::StrContains(msg, "Init COMPLETE")) {
          p->init_completed = true;
          ReadInitLine(msg, p);
        } else if (const size_t arrow = msg.find(" -> ");
                   arrow != absl::string_view::npos) {
          // Error unwinding: "init.cc:1266 -> 2".
          int32_t code = 0;
          if (absl::SimpleAtoi(
                  absl::StripAsciiWhitespace(msg.substr(arrow + 4)), &code) &&
              code > 0 && code != 7) {
            if (p->result == 0) {
              p->result = code;
              p->error_line = line_no;
            }
            const absl::string_view where = msg.substr(0, arrow);
            if (absl::StartsWith(where, "init.cc") ||
                absl::StartsWith(where, "bootstrap.cc") ||
                absl::StrContains(where, "ncclCommInit")) {
              p->init_trace = true;
            }
          }
        }
      }
      continue;
    }
    // Other lines: PyTorch's error naming the NCCL result.
    const int32_t code = ResultNamed(line);
    if (code == 0) continue;
    size_t target = last;
    if (prefix_rank >= 0 && by_rank.count(prefix_rank)) {
      target = by_rank[prefix_rank];
    }
    if (target == SIZE_MAX) {
      p = process("", 0);
      if (p == nullptr) continue;
      target = last;
      if (prefix_rank >= 0) p->global_rank = prefix_rank;
    }
    NcclLogProcess& t = log.processes[target];
    if (t.result == 0) {
      t.result = code;
      t.error_line = line_no;
    }
    if (absl::StrContains(line, "ncclCommInit")) t.init_trace = true;
  }
  if (in->bad()) {
    return absl::DataLossError(
        absl::StrCat(file, ": read error at line ", line_no + 1));
  }
  for (NcclLogProcess& p : log.processes) {
    if (p.global_rank < 0 && log.processes.size() == 1) {
      p.global_rank = file_rank >= 0 ? file_rank : p.comm_rank;
    }
  }
  return log;
}

int AddNcclLogFailures(const std::vector<NcclLog>& logs, ImportedJob* job) {
  int added = 0;
  int32_t next_rank = 0;
  for (const ImportedRank& r : job->ranks) {
    next_rank = std::max(next_rank, r.global_rank + 1);
  }
  for (const NcclLog& log : logs) {
    for (const NcclLogProcess& p : log.processes) {
      if (!p.InitFailed()) continue;
      v1::CommInitFailure f;
      f.set_call(p.call.empty() ? "ncclCommInitRank" : p.call);
      f.set_result(p.result);
      f.set_error(p.ErrorText());
      f.set_n_ranks(p.n_ranks);
      f.set_rank(p.comm_rank);
      const int32_t g = p.global_rank >= 0 ? p.global_rank : next_rank++;
      auto it = std::find_if(
          job->ranks.begin(), job->ranks.end(),
          [&](const ImportedRank& r) { return r.global_rank == g; });
      if (it == job->ranks.end()) {
        ImportedRank r;
        r.global_rank = g;
        r.host = p.host;
        r.pid = p.pid;
        r.file = log.file;
        job->ranks.push_back(std::move(r));
        it = std::prev(job->ranks.end());
      }
      if (it->host.empty()) it->host = p.host;
      if (it->pid == 0) it->pid = p.pid;
      // Lines without NCCL's prefix name no host or pid (as importers do).
      if (it->host.empty()) it->host = SyntheticHost("log-", g, 8);
      if (it->pid == 0) it->pid = 1000000 + static_cast<uint32_t>(g);
      it->init_failures.push_back(std::move(f));
      job->notes.push_back(absl::StrCat(
          log.file, ":", p.error_line, ": rank ", g, " (", p.host, " pid ",
          p.pid, "): communicator creation failed: ", p.ErrorText()));
      ++added;
    }
  }
  std::sort(job->ranks.begin(), job->ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) {
              return a.global_rank < b.global_rank;
            });
  return added;
}

}  // namespace pitstop::importers
