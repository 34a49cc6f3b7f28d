#include "src/importers/flight_recorder_reader.h"

#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "pitstop/status_macros.h"
#include "src/importers/import_util.h"
#include "src/importers/pickle_decoder.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

int64_t GetInt(const json& obj, const char* key, int64_t dflt) {
  auto it = obj.find(key);
  if (it == obj.end()) return dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) return SaturatingInt(it->get<double>());
  if (it->is_string()) {
    int64_t v;
    if (absl::SimpleAtoi(it->get_ref<const std::string&>(), &v)) return v;
  }
  return dflt;
}

std::string GetString(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return "";
  if (it->is_string()) return CleanText(it->get_ref<const std::string&>());
  if (it->is_number_integer()) return absl::StrCat(it->get<int64_t>());
  return "";
}

bool GetBool(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

uint64_t Elements(const json& sizes) {
  if (!sizes.is_array()) return 0;
  uint64_t total = 0;
  for (const json& tensor : sizes) {
    if (!tensor.is_array()) continue;
    uint64_t n = 1;
    for (const json& d : tensor) {
      if (d.is_number_integer() && d.get<int64_t>() >= 0) {
        n *= static_cast<uint64_t>(d.get<int64_t>());
      }
    }
    total += n;
  }
  return total;
}

FrEntry ParseEntry(const json& e) {
  FrEntry out;
  out.record_id = GetInt(e, "record_id", 0);
  out.pg_id = GetInt(e, "pg_id", -1);
  auto pg = e.find("process_group");
  if (pg != e.end() && pg->is_array() && pg->size() >= 2) {
    if ((*pg)[0].is_string())
      out.pg_name = CleanText((*pg)[0].get<std::string>());
    if ((*pg)[1].is_string())
      out.pg_desc = CleanText((*pg)[1].get<std::string>());
  }
  out.collective_seq_id = std::clamp<int64_t>(GetInt(e, "collective_seq_id", 0),
                                              0, int64_t{1} << 60);
  out.p2p_seq_id =
      std::clamp<int64_t>(GetInt(e, "p2p_seq_id", 0), 0, int64_t{1} << 60);
  out.profiling_name = GetString(e, "profiling_name");
  out.state = GetString(e, "state");
  out.is_p2p = GetBool(e, "is_p2p");
  out.time_created_ns = static_cast<uint64_t>(
      std::max<int64_t>(0, GetInt(e, "time_created_ns", 0)));
  out.time_started_ns = static_cast<uint64_t>(
      std::max<int64_t>(0, GetInt(e, "time_discovered_started_ns", 0)));
  out.time_completed_ns = static_cast<uint64_t>(
      std::max<int64_t>(0, GetInt(e, "time_discovered_completed_ns", 0)));
  if (auto it = e.find("input_sizes"); it != e.end()) {
    out.elements = Elements(*it);
  }
  if (auto it = e.find("input_dtypes");
      it != e.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    out.dtype = CleanText((*it)[0].get<std::string>());
  }
  out.timeout_ms = GetInt(e, "timeout_ms", 0);
  return out;
}

// Maps the rank-local pg ids of pg_status to pg names: from the entries
// where they say, else by creation order (both ids and names grow as groups
// are created), checked against the entries' pairs.
void MapStatus(const json& status, FlightRecorderDump* dump) {
  std::map<int64_t, std::string> known;
  for (const FrEntry& e : dump->entries) {
    if (e.pg_id >= 0 && !e.pg_name.empty()) known[e.pg_id] = e.pg_name;
  }
  // (pg id, its status object); the key text is kept as found ("07").
  std::vector<std::pair<int64_t, const json*>> ids;
  for (auto it = status.begin(); it != status.end(); ++it) {
    int64_t id;
    if (absl::SimpleAtoi(it.key(), &id)) ids.push_back({id, &*it});
  }
  std::stable_sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  std::vector<std::string> names;
  for (const auto& [name, pg] : dump->groups) names.push_back(name);
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) {
              int64_t x, y;
              bool nx = absl::SimpleAtoi(a, &x), ny = absl::SimpleAtoi(b, &y);
              if (nx && ny) return x < y;
              return nx != ny ? nx : a < b;
            });
  bool by_order = ids.size() == names.size();
  for (size_t k = 0; by_order && k < ids.size(); ++k) {
    auto it = known.find(ids[k].first);
    if (it != known.end() && it->second != names[k]) by_order = false;
  }
  int unmapped = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    std::string name;
    if (auto it = known.find(ids[k].first); it != known.end()) {
      name = it->second;
    } else if (by_order) {
      name = names[k];
    } else {
      ++unmapped;
      continue;
    }
    const json& s = *ids[k].second;
    if (!s.is_object()) continue;
    FrStatus st;
    // Clamped so later arithmetic (seq + 1, windows) cannot overflow.
    auto counter = [&s](const char* key) {
      return std::clamp<int64_t>(GetInt(s, key, -1), -1, int64_t{1} << 60);
    };
    st.last_enqueued = counter("last_enqueued_collective");
    st.last_started = counter("last_started_collective");
    st.last_completed = counter("last_completed_collective");
    dump->status[name] = st;
  }
  if (unmapped > 0) {
    dump->warnings.push_back(absl::StrCat(
        dump->file, ": ", unmapped,
        " pg_status entries could not be mapped to a process group name "
        "(ignored)"));
  }
}

absl::Status ParseDoc(const json& doc, FlightRecorderDump* dump) {
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dump->file, ": not a Flight Recorder dump (the top level is ",
        doc.is_array() ? "a list" : doc.type_name(),
        ", not a dict with 'pg_config' and 'entries')"));
  }
  if (doc.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dump->file, ": empty dump (an empty top-level dict)"));
  }
  if (doc.find("pg_config") == doc.end() && doc.find("entries") == doc.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dump->file,
        ": not a Flight Recorder dump (top-level dict without 'pg_config' "
        "or 'entries')"));
  }
  dump->version = GetString(doc, "version");
  dump->nccl_version = GetString(doc, "nccl_version");
  if (auto it = doc.find("pg_config"); it != doc.end() && it->is_object()) {
    for (auto pg = it->begin(); pg != it->end(); ++pg) {
      FrProcessGroup g;
      g.name = CleanText(pg.key());
      if (pg->is_object()) {
        g.desc = GetString(*pg, "desc");
        std::string n = GetString(*pg, "name");
        if (!n.empty()) g.name = n;
        auto ranks = pg->find("ranks");
        if (ranks == pg->end() || !ParseRankList(*ranks, &g.ranks)) {
          dump->warnings.push_back(
              absl::StrCat(dump->file, ": pg_config['", CleanText(pg.key()),
                           "'].ranks is not a list of distinct ranks in [0, ",
                           kMaxWorldSize, ") (group not judged for any rank)"));
          dump->malformed_groups.insert(g.name);
          dump->malformed_groups.insert(CleanText(pg.key()));
          continue;
        }
      }
      dump->groups[g.name] = std::move(g);
    }
  }
  if (auto it = doc.find("entries"); it != doc.end()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dump->file, ": 'entries' is not a list"));
    }
    size_t index = 0;
    for (const json& e : *it) {
      if (!e.is_object()) {
        dump->warnings.push_back(absl::StrCat(dump->file, ": entries[", index,
                                              "] is not a dict (skipped)"));
      } else {
        dump->entries.push_back(ParseEntry(e));
      }
      ++index;
    }
  }
  if (auto it = doc.find("pg_status"); it != doc.end() && it->is_object()) {
    MapStatus(*it, dump);
  }
  // Own rank: explicit, file name, or the intersection of all groups.
  int64_t explicit_rank = GetInt(doc, "rank", -1);
  int32_t from_name = RankFromFileName(dump->file);
  std::set<int32_t> common;
  bool first = true;
  for (const auto& [name, g] : dump->groups) {
    std::set<int32_t> s(g.ranks.begin(), g.ranks.end());
    if (first) {
      common = s;
      first = false;
    } else {
      std::set<int32_t> both;
      std::set_intersection(common.begin(), common.end(), s.begin(), s.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
  }
  if (explicit_rank >= 0) {
    dump->rank = static_cast<int32_t>(explicit_rank);
  } else if (from_name >= 0) {
    dump->rank = from_name;
  } else if (common.size() == 1) {
    dump->rank = *common.begin();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        dump->file,
        ": cannot tell which rank wrote this dump (no 'rank' key, no rank "
        "number at the end of the file name)"));
  }
  if (!first && common.count(dump->rank) == 0) {
    dump->warnings.push_back(absl::StrCat(
        dump->file, ": rank ", dump->rank,
        " (from the file name) is not a member of every process group"));
  }
  return absl::OkStatus();
}

absl::Status JsonParseError(const std::string& file, absl::string_view text,
                            size_t byte, absl::string_view what) {
  byte = std::min(byte, text.size());
  size_t line = 1 + std::count(text.begin(), text.begin() + byte, '\n');
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": line ", line, " (byte ", byte, "): ", what));
}

}  // namespace

bool LooksLikeFlightRecorder(absl::string_view bytes) {
  if (LooksLikePickle(bytes)) return true;
  absl::string_view head = bytes.substr(0, 4096);
  return absl::StartsWith(absl::StripLeadingAsciiWhitespace(head), "{") &&
         (absl::StrContains(head, "\"pg_config\"") ||
          absl::StrContains(head, "\"entries\"") ||
          absl::StrContains(head, "\"pg_status\""));
}

absl::StatusOr<FlightRecorderDump> ParseFlightRecorderDump(
    absl::string_view bytes, const std::string& file) {
  FlightRecorderDump dump;
  dump.file = file;
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": empty file"));
  }
  json doc;
  if (LooksLikePickle(bytes)) {
    ASSIGN_OR_RETURN(doc, DecodePickle(bytes, file));
  } else {
    try {
      doc = json::parse(bytes.begin(), bytes.end());
    } catch (const json::parse_error& e) {
      return JsonParseError(file, bytes, e.byte > 0 ? e.byte - 1 : 0,
                            absl::StrCat("malformed JSON: ", e.what()));
    } catch (const json::exception& e) {  // e.g. a number out of range
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": bad JSON: ", e.what()));
    }
  }
  RETURN_IF_ERROR(ParseDoc(doc, &dump));
  return dump;
}

}  // namespace pitstop::importers
