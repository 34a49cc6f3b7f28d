#include "src/importers/import_util.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pitstop::importers {

v1::CollFunc ParseCollFunc(absl::string_view name) {
  // Normalise: lower case, no '_' / spaces, stop at the first '(' or ' '
  // after the op name ("nccl:send 0->3", kernel signatures).
  std::string norm;
  absl::string_view s = name;
  if (!absl::ConsumePrefix(&s, "nccl:")) absl::ConsumePrefix(&s, "c10d::");
  for (char c : s) {
    if (c == '(' || c == ' ') break;
    if (c == '_' || c == '-') continue;
    norm.push_back(
        static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  struct Rule {
    const char* needle;
    v1::CollFunc func;
  };
  static constexpr Rule kRules[] = {
      {"sendrecv", v1::COLL_FUNC_SEND_RECV},
      {"allreduce", v1::COLL_FUNC_ALL_REDUCE},
      {"allgather", v1::COLL_FUNC_ALL_GATHER},
      {"reducescatter", v1::COLL_FUNC_REDUCE_SCATTER},
      {"alltoall", v1::COLL_FUNC_ALL_TO_ALL},
      {"broadcast", v1::COLL_FUNC_BROADCAST},
      {"barrier", v1::COLL_FUNC_BARRIER},
      {"reduce", v1::COLL_FUNC_REDUCE},
      {"gather", v1::COLL_FUNC_GATHER},
      {"scatter", v1::COLL_FUNC_SCATTER},
      {"send", v1::COLL_FUNC_SEND},
      {"recv", v1::COLL_FUNC_RECV},
  };
  for (const Rule& r : kRules) {
    if (absl::StrContains(norm, r.needle)) return r.func;
  }
  return v1::COLL_FUNC_OTHER;
}

v1::DataType ParseDataType(absl::string_view name, uint32_t* size_bytes) {
  std::string n = absl::AsciiStrToLower(name);
  absl::string_view s = n;
  absl::ConsumePrefix(&s, "c10::");
  absl::ConsumePrefix(&s, "torch.");
  absl::ConsumePrefix(&s, "nccl");
  struct Rule {
    const char* name;
    v1::DataType type;
    uint32_t size;
  };
  static constexpr Rule kRules[] = {
      {"bfloat16", v1::DATA_TYPE_BFLOAT16, 2},
      {"bf16", v1::DATA_TYPE_BFLOAT16, 2},
      {"float16", v1::DATA_TYPE_FLOAT16, 2},
      {"half", v1::DATA_TYPE_FLOAT16, 2},
      {"f16", v1::DATA_TYPE_FLOAT16, 2},
      {"float32", v1::DATA_TYPE_FLOAT32, 4},
      {"float", v1::DATA_TYPE_FLOAT32, 4},
      {"f32", v1::DATA_TYPE_FLOAT32, 4},
      {"float64", v1::DATA_TYPE_FLOAT64, 8},
      {"double", v1::DATA_TYPE_FLOAT64, 8},
      {"f64", v1::DATA_TYPE_FLOAT64, 8},
      {"int8", v1::DATA_TYPE_INT8, 1},
      {"unsigned char", v1::DATA_TYPE_UINT8, 1},
      {"signed char", v1::DATA_TYPE_INT8, 1},
      {"long int", v1::DATA_TYPE_INT64, 8},
      {"c10::half", v1::DATA_TYPE_FLOAT16, 2},
      {"char", v1::DATA_TYPE_INT8, 1},
      {"uint8", v1::DATA_TYPE_UINT8, 1},
      {"byte", v1::DATA_TYPE_UINT8, 1},
      {"bool", v1::DATA_TYPE_UINT8, 1},
      {"int32", v1::DATA_TYPE_INT32, 4},
      {"int", v1::DATA_TYPE_INT32, 4},
      {"uint32", v1::DATA_TYPE_UINT32, 4},
      {"int64", v1::DATA_TYPE_INT64, 8},
      {"long", v1::DATA_TYPE_INT64, 8},
      {"uint64", v1::DATA_TYPE_UINT64, 8},
      {"float8_e4m3fn", v1::DATA_TYPE_FLOAT8_E4M3, 1},
      {"float8e4m3", v1::DATA_TYPE_FLOAT8_E4M3, 1},
      {"float8_e5m2", v1::DATA_TYPE_FLOAT8_E5M2, 1},
      {"float8e5m2", v1::DATA_TYPE_FLOAT8_E5M2, 1},
  };
  for (const Rule& r : kRules) {
    if (s == r.name) {
      *size_bytes = r.size;
      return r.type;
    }
  }
  *size_bytes = 1;
  return s.empty() ? v1::DATA_TYPE_UNSPECIFIED : v1::DATA_TYPE_OTHER;
}

const char* CollFuncName(v1::CollFunc func) {
  switch (func) {
    case v1::COLL_FUNC_ALL_REDUCE:
      return "all_reduce";
    case v1::COLL_FUNC_ALL_GATHER:
      return "all_gather";
    case v1::COLL_FUNC_REDUCE_SCATTER:
      return "reduce_scatter";
    case v1::COLL_FUNC_BROADCAST:
      return "broadcast";
    case v1::COLL_FUNC_REDUCE:
      return "reduce";
    case v1::COLL_FUNC_ALL_TO_ALL:
      return "all_to_all";
    case v1::COLL_FUNC_GATHER:
      return "gather";
    case v1::COLL_FUNC_SCATTER:
      return "scatter";
    case v1::COLL_FUNC_SEND:
      return "send";
    case v1::COLL_FUNC_RECV:
      return "recv";
    case v1::COLL_FUNC_SEND_RECV:
      return "send_recv";
    case v1::COLL_FUNC_BARRIER:
      return "barrier";
    case v1::COLL_FUNC_OTHER:
      return "other";
    default:
      return "unknown";
  }
}

int64_t SaturatingInt(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

std::string CleanText(absl::string_view s, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max_bytes) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    bool ok =
        len > 0 && i + len <= s.size() && !(c >= 0xc0 && c < 0xc2) && c < 0xf5;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    }
    if (ok && len == 1 && (c < 0x20 || c == 0x7f)) ok = false;
    if (!ok) {
      out.push_back('?');
      ++i;
      continue;
    }
    out.append(s.data() + i, len);
    i += len;
  }
  return out;
}

uint64_t StableHash(absl::string_view key) {
  uint64_t h = 1469598103934665603ull;
  for (char c : key) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

bool ParseRankList(const nlohmann::json& value, std::vector<int32_t>* out) {
  out->clear();
  auto add = [out](int64_t r) {
    if (r < 0 || r >= kMaxWorldSize) return false;
    out->push_back(static_cast<int32_t>(r));
    return true;
  };
  if (value.is_array()) {
    for (const auto& v : value) {
      if (!v.is_number_integer() || !add(v.get<int64_t>())) return false;
    }
  } else {
    if (!value.is_string()) return false;
    absl::string_view s = value.get_ref<const std::string&>();
    s = absl::StripAsciiWhitespace(s);
    if (!absl::ConsumePrefix(&s, "[") || !absl::ConsumeSuffix(&s, "]")) {
      return false;
    }
    if (absl::StripAsciiWhitespace(s).empty()) return true;
    for (absl::string_view part : absl::StrSplit(s, ',')) {
      int64_t r;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r) || !add(r))
        return false;
    }
  }
  std::vector<int32_t> sorted = *out;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

std::string RankRanges(const std::vector<int32_t>& v) {
  std::string out;
  for (size_t k = 0; k < v.size();) {
    size_t j = k;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", v[k]);
    if (j > k) absl::StrAppend(&out, "-", v[j]);
    k = j + 1;
  }
  return out;
}

const char* FaultClassLabel(v1::FaultClass c) {
  switch (c) {
    case v1::FAULT_CLASS_COMM_HANG:
      return "comm-hang";
    case v1::FAULT_CLASS_NON_COMM_HANG:
      return "non-comm-hang";
    case v1::FAULT_CLASS_COMM_SLOW:
      return "comm-slow";
    case v1::FAULT_CLASS_NON_COMM_SLOW:
      return "non-comm-slow";
    case v1::FAULT_CLASS_PROCESS_DIED:
      return "process-died";
    case v1::FAULT_CLASS_MISMATCH:
      return "mismatch";
    case v1::FAULT_CLASS_CONFIG:
      return "config";
    default:
      return "none";
  }
}

int32_t RankFromFileName(absl::string_view path) {
  size_t slash = path.rfind('/');
  absl::string_view base =
      slash == absl::string_view::npos ? path : path.substr(slash + 1);
  // Drop extensions (".json", ".json.gz", ".pkl", ".jsonl", ".log").
  while (true) {
    size_t dot = base.rfind('.');
    if (dot == absl::string_view::npos || dot == 0) break;
    absl::string_view ext = base.substr(dot + 1);
    bool digits_only = !ext.empty();
    for (char c : ext)
      digits_only &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (digits_only) break;
    base = base.substr(0, dot);
  }
  size_t end = base.size();
  size_t begin = end;
  while (begin > 0 &&
         std::isdigit(static_cast<unsigned char>(base[begin - 1]))) {
    --begin;
  }
  if (begin == end || end - begin > 9) return -1;
  int32_t r = 0;
  if (!absl::SimpleAtoi(base.substr(begin, end - begin), &r)) return -1;
  return r;
}

std::string SyntheticHost(absl::string_view prefix, int32_t global_rank,
                          int32_t ranks_per_node) {
  if (ranks_per_node <= 0) ranks_per_node = 1;
  int32_t node = global_rank < 0 ? 0 : global_rank / ranks_per_node;
  return absl::StrCat(prefix, "node", node);
}

}  // namespace pitstop::importers
