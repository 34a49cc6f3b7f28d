#include "src/c4p/plan_codec.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pitstop::c4p {
namespace {

using nlohmann::json;

// Reads `j[key]` as an integer in [lo, hi]; `where` names it in errors.
absl::StatusOr<int64_t> Int(const json& j, const char* key, int64_t lo,
                            int64_t hi, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", where, key, ": missing or not an integer"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", where, key, ": ", v, " out of range"));
  }
  return v;
}

// A JSON array of link ids (non-negative ints).
absl::StatusOr<std::vector<int>> Links(const json& j,
                                       const std::string& where) {
  if (!j.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", where, ": not an array"));
  }
  std::vector<int> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 ||
        j[i].get<int64_t>() > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: ", where, "[", i, "]: not a link id"));
    }
    out.push_back(j[i].get<int>());
  }
  return out;
}

absl::StatusOr<PlannedPath> DecodePath(const json& j,
                                       const std::string& where) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", where, ": not an object"));
  }
  PlannedPath p;
  const std::string w = where + ".";
  auto links = Links(j.value("links", json::array()), w + "links");
  if (!links.ok()) return links.status();
  p.links = std::move(*links);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  auto src = Int(j, "src_gpu", -1, kMaxInt, w);
  auto dst = Int(j, "dst_gpu", -1, kMaxInt, w);
  auto port = Int(j, "src_port", 0, 65535, w);
  for (const auto* s : {&src, &dst, &port}) {
    if (!s->ok()) return s->status();
  }
  p.src_gpu = static_cast<int>(*src);
  p.dst_gpu = static_cast<int>(*dst);
  p.src_port = static_cast<uint16_t>(*port);
  const json split = j.value("split", json::array());
  const json ports = j.value("split_ports", json::array());
  if (!split.is_array() || !ports.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", w, "split: not an array"));
  }
  for (size_t i = 0; i < split.size(); ++i) {
    auto part = Links(split[i], absl::StrCat(w, "split[", i, "]"));
    if (!part.ok()) return part.status();
    p.split.push_back(std::move(*part));
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    if (!ports[i].is_number_unsigned() || ports[i].get<uint64_t>() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: ", w, "split_ports[", i, "]: not a port"));
    }
    p.split_ports.push_back(ports[i].get<uint16_t>());
  }
  return p;
}

}  // namespace

std::string EncodePlan(const FlowPlan& plan) {
  json paths = json::array();
  for (const PlannedPath& p : plan.paths) {
    json j = {{"links", p.links},
              {"src_gpu", p.src_gpu},
              {"dst_gpu", p.dst_gpu},
              {"src_port", p.src_port}};
    if (!p.split.empty()) j["split"] = p.split;
    if (!p.split_ports.empty()) j["split_ports"] = p.split_ports;
    paths.push_back(std::move(j));
  }
  return json{{"epoch", plan.epoch}, {"paths", std::move(paths)}}.dump();
}

absl::StatusOr<FlowPlan> DecodePlan(absl::string_view bytes) {
  const json j = json::parse(bytes.begin(), bytes.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("plan: not a JSON object");
  }
  FlowPlan plan;
  auto epoch = j.find("epoch");
  if (epoch == j.end() || !epoch->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        "plan: epoch: missing or not an unsigned integer");
  }
  plan.epoch = epoch->get<uint64_t>();
  auto paths = j.find("paths");
  if (paths == j.end() || !paths->is_array()) {
    return absl::InvalidArgumentError("plan: paths: missing or not an array");
  }
  plan.paths.reserve(paths->size());
  for (size_t i = 0; i < paths->size(); ++i) {
    auto p = DecodePath((*paths)[i], absl::StrCat("paths[", i, "]"));
    if (!p.ok()) return p.status();
    plan.paths.push_back(std::move(*p));
  }
  return plan;
}

}  // namespace pitstop::c4p
