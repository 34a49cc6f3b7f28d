#include "src/sim/scenario.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/status_macros.h"
#include "src/sim/topology.h"
#include "yaml-cpp/yaml.h"

namespace pitstop::sim {
namespace {

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {
    {FaultKind::kSlowGpu, "slow_gpu"},
    {FaultKind::kSlowNic, "slow_nic"},
    {FaultKind::kFlappingNic, "flapping_nic"},
    {FaultKind::kSlowLink, "slow_link"},
    {FaultKind::kNonCommHang, "non_comm_hang"},
    {FaultKind::kCommHang, "comm_hang"},
    {FaultKind::kCrash, "crash"},
    {FaultKind::kMismatch, "mismatch"},
    {FaultKind::kCheckpointPause, "checkpoint_pause"},
    {FaultKind::kEvalPhase, "eval_phase"},
    {FaultKind::kDataLoaderJitter, "data_loader_jitter"},
    {FaultKind::kSlowCollective, "slow_collective"},
};

std::string Where(const std::string& source, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return source;
  return absl::StrCat(source, ":", m.line + 1, ":", m.column + 1);
}

absl::Status Bad(const std::string& source, const YAML::Node& n,
                 const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(Where(source, n), ": ", key, ": ", what));
}

// "16MiB", "512KiB", "1GiB", "4096", "1MB" -> bytes.
bool ParseBytes(std::string text, uint64_t* out) {
  text = std::string(absl::StripAsciiWhitespace(text));
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"GiB", 1ull << 30},
      {"MiB", 1ull << 20},
      {"KiB", 1ull << 10},
      {"GB", 1000000000ull},
      {"MB", 1000000ull},
      {"KB", 1000ull},
      {"B", 1}};
  uint64_t mult = 1;
  for (const auto& [suffix, m] : kUnits) {
    const std::string s = suffix;
    if (text.size() > s.size() &&
        text.compare(text.size() - s.size(), s.size(), s) == 0) {
      text = std::string(
          absl::StripAsciiWhitespace(text.substr(0, text.size() - s.size())));
      mult = m;
      break;
    }
  }
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || v < 0) return false;
  *out = static_cast<uint64_t>(v * mult);
  return true;
}

// Reads helpers: a missing key leaves *out unchanged.
class Reader {
 public:
  Reader(const std::string& source, const YAML::Node& node)
      : source_(source), node_(node) {}

  absl::Status Check(std::initializer_list<const char*> allowed) const {
    if (!node_.IsMap()) return Bad(source_, node_, "(node)", "expected a map");
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) {
        return Bad(source_, kv.first, key,
                   absl::StrCat("unknown key (allowed: ",
                                absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Get(const char* key, T* out) const {
    const YAML::Node n = node_[key];
    if (!n) return absl::OkStatus();
    try {
      *out = n.as<T>();
    } catch (const YAML::Exception& e) {
      return Bad(source_, n, key, "wrong type");
    }
    return absl::OkStatus();
  }

  absl::Status GetBytes(const char* key, uint64_t* out) const {
    const YAML::Node n = node_[key];
    if (!n) return absl::OkStatus();
    if (!ParseBytes(n.as<std::string>(), out)) {
      return Bad(source_, n, key, "expected a size like 16MiB or 4096");
    }
    return absl::OkStatus();
  }

  const YAML::Node& node() const { return node_; }
  const std::string& source() const { return source_; }

 private:
  const std::string& source_;
  YAML::Node node_;
};

absl::Status ParseGroup(const Reader& r, const std::string& text, Group* g) {
  if (text == "tp")
    *g = Group::kTp;
  else if (text == "pp")
    *g = Group::kPp;
  else if (text == "dp")
    *g = Group::kDp;
  else if (text == "world")
    *g = Group::kWorld;
  else
    return Bad(r.source(), r.node()["group"], "group",
               "expected tp, pp, dp or world");
  return absl::OkStatus();
}

absl::Status ParsePhases(const std::string& source, const YAML::Node& list,
                         const char* key, std::vector<PhaseSpec>* out) {
  if (!list) return absl::OkStatus();
  if (!list.IsSequence()) return Bad(source, list, key, "expected a list");
  out->clear();
  for (const YAML::Node& item : list) {
    PhaseSpec p;
    if (item["compute_ms"]) {
      Reader r(source, item);
      RETURN_IF_ERROR(r.Check({"compute_ms"}));
      RETURN_IF_ERROR(r.Get("compute_ms", &p.compute_ms));
      if (p.compute_ms < 0) return Bad(source, item, "compute_ms", "< 0");
    } else if (item["collective"]) {
      Reader r(source, item["collective"]);
      RETURN_IF_ERROR(r.Check({"group", "func", "bytes"}));
      p.compute = false;
      std::string group = "dp";
      RETURN_IF_ERROR(r.Get("group", &group));
      RETURN_IF_ERROR(ParseGroup(r, group, &p.group));
      RETURN_IF_ERROR(r.Get("func", &p.func));
      static const char* kFuncs[] = {"AllReduce", "AllGather", "ReduceScatter",
                                     "Broadcast", "Reduce"};
      bool known = false;
      for (const char* f : kFuncs) known = known || p.func == f;
      if (!known) {
        return Bad(source, item["collective"]["func"], "func",
                   "expected AllReduce, AllGather, ReduceScatter, Broadcast "
                   "or Reduce");
      }
      RETURN_IF_ERROR(r.GetBytes("bytes", &p.bytes));
      if (p.bytes == 0) return Bad(source, item, "bytes", "must be > 0");
    } else {
      return Bad(source, item, key,
                 "each entry is {compute_ms: N} or {collective: {...}}");
    }
    out->push_back(p);
  }
  return absl::OkStatus();
}

absl::Status ParseFault(const std::string& source, const YAML::Node& n,
                        FaultSpec* f) {
  Reader r(source, n);
  RETURN_IF_ERROR(
      r.Check({"kind", "at_s", "duration_s", "rank", "node", "nic", "peer_node",
               "factor", "period_s", "pause_s", "jitter_ms", "probability"}));
  std::string kind;
  RETURN_IF_ERROR(r.Get("kind", &kind));
  bool found = false;
  for (const auto& k : kKinds) {
    if (kind == k.name) {
      f->kind = k.kind;
      found = true;
    }
  }
  if (!found) {
    std::vector<std::string> names;
    for (const auto& k : kKinds) names.push_back(k.name);
    return Bad(source, n["kind"] ? n["kind"] : n, "kind",
               absl::StrCat("unknown fault kind '", kind,
                            "' (known: ", absl::StrJoin(names, ", "), ")"));
  }
  RETURN_IF_ERROR(r.Get("at_s", &f->at_s));
  RETURN_IF_ERROR(r.Get("duration_s", &f->duration_s));
  RETURN_IF_ERROR(r.Get("rank", &f->rank));
  RETURN_IF_ERROR(r.Get("node", &f->node));
  RETURN_IF_ERROR(r.Get("nic", &f->nic));
  RETURN_IF_ERROR(r.Get("peer_node", &f->peer_node));
  RETURN_IF_ERROR(r.Get("factor", &f->factor));
  RETURN_IF_ERROR(r.Get("period_s", &f->period_s));
  RETURN_IF_ERROR(r.Get("pause_s", &f->pause_s));
  RETURN_IF_ERROR(r.Get("jitter_ms", &f->jitter_ms));
  RETURN_IF_ERROR(r.Get("probability", &f->probability));
  return absl::OkStatus();
}

absl::Status ParseInto(const YAML::Node& root, const std::string& source,
                       Scenario* s) {
  Reader top(source, root);
  RETURN_IF_ERROR(
      top.Check({"name", "description", "seed", "duration_s", "job_id",
                 "cluster", "job", "faults", "planning"}));
  if (const YAML::Node p = root["planning"]) {
    Reader r(source, p);
    RETURN_IF_ERROR(r.Check({"fabric", "marks", "measure_nics"}));
    RETURN_IF_ERROR(r.Get("fabric", &s->fabric));
    RETURN_IF_ERROR(r.Get("measure_nics", &s->measure_nics));
    if (const YAML::Node m = p["marks"]) {
      if (!m.IsSequence()) {
        return Bad(source, m, "planning.marks", "expected a list");
      }
      for (const YAML::Node& item : m) {
        Reader mr(source, item);
        RETURN_IF_ERROR(mr.Check({"at_s", "link", "share"}));
        Scenario::LinkMark mark;
        RETURN_IF_ERROR(mr.Get("at_s", &mark.at_s));
        RETURN_IF_ERROR(mr.Get("link", &mark.link));
        RETURN_IF_ERROR(mr.Get("share", &mark.share));
        if (mark.link.empty() || !(mark.share > 0 && mark.share < 1)) {
          return Bad(source, item, "planning.marks",
                     "needs a link and a share in (0, 1)");
        }
        s->link_marks.push_back(mark);
      }
    }
  }
  RETURN_IF_ERROR(top.Get("name", &s->name));
  RETURN_IF_ERROR(top.Get("description", &s->description));
  RETURN_IF_ERROR(top.Get("seed", &s->seed));
  RETURN_IF_ERROR(top.Get("duration_s", &s->duration_s));
  RETURN_IF_ERROR(top.Get("job_id", &s->job_id));
  if (const YAML::Node c = root["cluster"]) {
    Reader r(source, c);
    RETURN_IF_ERROR(r.Check({"nodes", "gpus_per_node", "nics_per_node",
                             "nvlink_gbps", "nic_gbps", "nvlink_latency_us",
                             "net_latency_us", "topology"}));
    RETURN_IF_ERROR(r.Get("topology", &s->topology_file));
    if (!s->topology_file.empty()) {
      ASSIGN_OR_RETURN(Topology t, LoadTopologyFile(s->topology_file));
      s->nodes = t.nodes;
      s->gpus_per_node = t.gpus_per_node;
      s->nics_per_node = t.gpus_per_node;
      s->nvlink_gbps = t.nvlink_gbps;
      s->nic_gbps = t.nic_gbps;
      s->nvlink_latency_us = t.nvlink_latency_us;
      s->net_latency_us = t.net_latency_us;
    }
    RETURN_IF_ERROR(r.Get("nodes", &s->nodes));
    RETURN_IF_ERROR(r.Get("gpus_per_node", &s->gpus_per_node));
    RETURN_IF_ERROR(r.Get("nics_per_node", &s->nics_per_node));
    RETURN_IF_ERROR(r.Get("nvlink_gbps", &s->nvlink_gbps));
    RETURN_IF_ERROR(r.Get("nic_gbps", &s->nic_gbps));
    RETURN_IF_ERROR(r.Get("nvlink_latency_us", &s->nvlink_latency_us));
    RETURN_IF_ERROR(r.Get("net_latency_us", &s->net_latency_us));
  }
  if (const YAML::Node j = root["job"]) {
    Reader r(source, j);
    RETURN_IF_ERROR(r.Check({"tp", "pp", "dp", "channels", "steps_per_proxy_op",
                             "compute_jitter", "step", "eval_step"}));
    RETURN_IF_ERROR(r.Get("tp", &s->tp));
    RETURN_IF_ERROR(r.Get("pp", &s->pp));
    RETURN_IF_ERROR(r.Get("dp", &s->dp));
    RETURN_IF_ERROR(r.Get("channels", &s->channels));
    RETURN_IF_ERROR(r.Get("steps_per_proxy_op", &s->steps_per_proxy_op));
    RETURN_IF_ERROR(r.Get("compute_jitter", &s->compute_jitter));
    RETURN_IF_ERROR(ParsePhases(source, j["step"], "step", &s->step));
    RETURN_IF_ERROR(
        ParsePhases(source, j["eval_step"], "eval_step", &s->eval_step));
  }
  if (const YAML::Node f = root["faults"]) {
    if (!f.IsSequence()) return Bad(source, f, "faults", "expected a list");
    for (const YAML::Node& item : f) {
      FaultSpec spec;
      RETURN_IF_ERROR(ParseFault(source, item, &spec));
      s->faults.push_back(spec);
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

bool IsDeceptiveNormal(FaultKind kind) {
  return kind == FaultKind::kCheckpointPause || kind == FaultKind::kEvalPhase ||
         kind == FaultKind::kDataLoaderJitter ||
         kind == FaultKind::kSlowCollective;
}

int ExtendScenario(Scenario* s, double duration_s) {
  const double period = s->duration_s;
  s->duration_s = duration_s;
  const bool all_normal =
      std::all_of(s->faults.begin(), s->faults.end(),
                  [](const FaultSpec& f) { return IsDeceptiveNormal(f.kind); });
  if (!all_normal || s->faults.empty() || period <= 0 || duration_s <= period) {
    return 1;
  }
  const std::vector<FaultSpec> once = s->faults;
  int copies = 1;
  for (double offset = period; offset < duration_s; offset += period) {
    ++copies;
    for (FaultSpec f : once) {
      f.at_s += offset;
      if (f.at_s >= duration_s) continue;
      s->faults.push_back(f);
    }
  }
  return copies;
}

const char* GroupName(Group g) {
  switch (g) {
    case Group::kTp:
      return "tp";
    case Group::kPp:
      return "pp";
    case Group::kDp:
      return "dp";
    case Group::kWorld:
      return "world";
  }
  return "?";
}

namespace {

template <typename... Parts>
absl::Status Invalid(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// "faults[i] (kind): what".
absl::Status ValidateFault(const Scenario& s, size_t i) {
  const FaultSpec& f = s.faults[i];
  const std::string where =
      absl::StrCat("faults[", i, "] (", FaultKindName(f.kind), "): ");
  const bool rank_fault =
      f.kind == FaultKind::kSlowGpu || f.kind == FaultKind::kNonCommHang ||
      f.kind == FaultKind::kCrash || f.kind == FaultKind::kMismatch;
  const bool nic_fault =
      f.kind == FaultKind::kSlowNic || f.kind == FaultKind::kFlappingNic;
  const bool pair_fault =
      f.kind == FaultKind::kSlowLink || f.kind == FaultKind::kCommHang;
  if (rank_fault && (f.rank < 0 || f.rank >= s.world_size())) {
    return Invalid(where, "rank must be in [0, ", s.world_size(), ")");
  }
  if ((nic_fault || pair_fault) && (f.node < 0 || f.node >= s.nodes)) {
    return Invalid(where, "node must be in [0, ", s.nodes, ")");
  }
  if (nic_fault && (f.nic < 0 || f.nic >= s.nics_per_node)) {
    return Invalid(where, "nic must be in [0, ", s.nics_per_node, ")");
  }
  if (pair_fault &&
      (f.peer_node < 0 || f.peer_node >= s.nodes || f.peer_node == f.node)) {
    return Invalid(where, "peer_node must be another node in [0, ", s.nodes,
                   ")");
  }
  const bool needs_factor = f.kind == FaultKind::kSlowGpu || nic_fault ||
                            f.kind == FaultKind::kSlowLink ||
                            f.kind == FaultKind::kSlowCollective;
  if (needs_factor && f.factor <= 1)
    return Invalid(where, "factor must be > 1");
  if (f.at_s < 0 || f.duration_s < 0)
    return Invalid(where, "times must be >= 0");
  if (f.kind == FaultKind::kFlappingNic && f.period_s <= 0) {
    return Invalid(where, "period_s must be > 0");
  }
  if (f.kind == FaultKind::kCheckpointPause && f.pause_s <= 0) {
    return Invalid(where, "pause_s must be > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateLayout(const Scenario& s) {
  if (!s.link_marks.empty() && s.fabric.empty()) {
    return Invalid("planning.marks: needs planning.fabric (planning is off)");
  }
  if (s.nodes < 1 || s.gpus_per_node < 1 || s.nics_per_node < 1) {
    return Invalid("cluster: nodes, gpus_per_node, nics_per_node must be >= 1");
  }
  if (s.world_size() > 256) return Invalid("cluster: at most 256 ranks");
  if (s.tp < 1 || s.pp < 1 || s.dp < 1 ||
      s.tp * s.pp * s.dp != s.world_size()) {
    return Invalid("job: tp * pp * dp (", s.tp, " * ", s.pp, " * ", s.dp,
                   ") must equal nodes * gpus_per_node (", s.world_size(), ")");
  }
  if (s.channels < 1 || s.channels > 32) return Invalid("job.channels: 1..32");
  if (s.steps_per_proxy_op < 1) return Invalid("job.steps_per_proxy_op: >= 1");
  if (s.duration_s <= 0) return Invalid("duration_s: must be > 0");
  if (s.nic_gbps <= 0 || s.nvlink_gbps <= 0)
    return Invalid("cluster: bandwidths > 0");
  bool any_coll = false;
  for (const PhaseSpec& p : s.step) any_coll = any_coll || !p.compute;
  if (!any_coll) return Invalid("job.step: needs at least one collective");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml,
                                       const std::string& source) {
  Scenario s;
  s.source = source;
  std::vector<YAML::Node> fault_nodes;  // to name a bad fault's line
  try {
    const YAML::Node root = YAML::Load(yaml);
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected a YAML map at the top"));
    }
    RETURN_IF_ERROR(ParseInto(root, source, &s));
    if (const YAML::Node f = root["faults"]) {
      for (const YAML::Node& item : f) fault_nodes.push_back(item);
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (s.dp == 0 && s.tp > 0 && s.pp > 0) {
    s.dp = s.world_size() / (s.tp * s.pp);
  }
  if (s.step.empty()) {
    s.step = {PhaseSpec{true, 150, Group::kDp, "", 0},
              PhaseSpec{false, 0, Group::kDp, "AllReduce", 32 << 20}};
  }
  if (s.eval_step.empty()) {
    s.eval_step = {PhaseSpec{true, 60, Group::kDp, "", 0},
                   PhaseSpec{false, 0, Group::kWorld, "AllGather", 1 << 20},
                   PhaseSpec{false, 0, Group::kWorld, "Broadcast", 64 << 10}};
  }
  absl::Status st = ValidateLayout(s);
  for (size_t i = 0; st.ok() && i < s.faults.size(); ++i) {
    st = ValidateFault(s, i);
    if (!st.ok() && i < fault_nodes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(source, fault_nodes[i]), ": ", st.message()));
    }
  }
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", st.message()));
  }
  return s;
}

absl::StatusOr<Scenario> LoadScenarioFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseScenario(ss.str(), path);
}

absl::StatusOr<Scenario> BuiltinScenario(const std::string& name) {
  const std::string text = BuiltinScenarioText(name);
  if (text.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no built-in scenario '", name,
        "' (known: ", absl::StrJoin(BuiltinScenarioNames(), ", "), ")"));
  }
  return ParseScenario(text, absl::StrCat("builtin:", name));
}

absl::Status ValidateScenario(const Scenario& s) {
  RETURN_IF_ERROR(ValidateLayout(s));
  for (size_t i = 0; i < s.faults.size(); ++i) {
    RETURN_IF_ERROR(ValidateFault(s, i));
  }
  return absl::OkStatus();
}

std::string ScenarioToYaml(const Scenario& s) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << s.name;
  out << YAML::Key << "description" << YAML::Value << s.description;
  out << YAML::Key << "seed" << YAML::Value << s.seed;
  out << YAML::Key << "duration_s" << YAML::Value << s.duration_s;
  out << YAML::Key << "job_id" << YAML::Value << s.job_id;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "nodes" << YAML::Value << s.nodes;
  out << YAML::Key << "gpus_per_node" << YAML::Value << s.gpus_per_node;
  out << YAML::Key << "nics_per_node" << YAML::Value << s.nics_per_node;
  out << YAML::Key << "nvlink_gbps" << YAML::Value << s.nvlink_gbps;
  out << YAML::Key << "nic_gbps" << YAML::Value << s.nic_gbps;
  out << YAML::Key << "nvlink_latency_us" << YAML::Value << s.nvlink_latency_us;
  out << YAML::Key << "net_latency_us" << YAML::Value << s.net_latency_us;
  out << YAML::EndMap;
  auto phases = [&out](const char* key, const std::vector<PhaseSpec>& v) {
    out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (const PhaseSpec& p : v) {
      out << YAML::BeginMap;
      if (p.compute) {
        out << YAML::Key << "compute_ms" << YAML::Value << p.compute_ms;
      } else {
        out << YAML::Key << "collective" << YAML::Value << YAML::BeginMap;
        out << YAML::Key << "group" << YAML::Value << GroupName(p.group);
        out << YAML::Key << "func" << YAML::Value << p.func;
        out << YAML::Key << "bytes" << YAML::Value << p.bytes;
        out << YAML::EndMap;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  };
  out << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "tp" << YAML::Value << s.tp;
  out << YAML::Key << "pp" << YAML::Value << s.pp;
  out << YAML::Key << "dp" << YAML::Value << s.dp;
  out << YAML::Key << "channels" << YAML::Value << s.channels;
  out << YAML::Key << "steps_per_proxy_op" << YAML::Value
      << s.steps_per_proxy_op;
  out << YAML::Key << "compute_jitter" << YAML::Value << s.compute_jitter;
  phases("step", s.step);
  phases("eval_step", s.eval_step);
  out << YAML::EndMap;
  if (!s.fabric.empty()) {
    out << YAML::Key << "planning" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "fabric" << YAML::Value << s.fabric;
    out << YAML::Key << "measure_nics" << YAML::Value << s.measure_nics;
    if (!s.link_marks.empty()) {
      out << YAML::Key << "marks" << YAML::Value << YAML::BeginSeq;
      for (const Scenario::LinkMark& m : s.link_marks) {
        out << YAML::BeginMap << YAML::Key << "at_s" << YAML::Value << m.at_s
            << YAML::Key << "link" << YAML::Value << m.link << YAML::Key
            << "share" << YAML::Value << m.share << YAML::EndMap;
      }
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
  }
  out << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
  for (const FaultSpec& f : s.faults) {
    out << YAML::BeginMap;
    out << YAML::Key << "kind" << YAML::Value << FaultKindName(f.kind);
    out << YAML::Key << "at_s" << YAML::Value << f.at_s;
    out << YAML::Key << "duration_s" << YAML::Value << f.duration_s;
    out << YAML::Key << "rank" << YAML::Value << f.rank;
    out << YAML::Key << "node" << YAML::Value << f.node;
    out << YAML::Key << "nic" << YAML::Value << f.nic;
    out << YAML::Key << "peer_node" << YAML::Value << f.peer_node;
    out << YAML::Key << "factor" << YAML::Value << f.factor;
    out << YAML::Key << "period_s" << YAML::Value << f.period_s;
    out << YAML::Key << "pause_s" << YAML::Value << f.pause_s;
    out << YAML::Key << "jitter_ms" << YAML::Value << f.jitter_ms;
    out << YAML::Key << "probability" << YAML::Value << f.probability;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace pitstop::sim
