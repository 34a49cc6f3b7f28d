#include "src/c4p/fabric_io.h"

#include <deque>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pitstop/bounded_file.h"

namespace pitstop::c4p {
namespace {

bool ParseWithSuffix(absl::string_view text, absl::string_view suffix,
                     double* out) {
  if (!absl::ConsumeSuffix(&text, suffix)) return false;
  return absl::SimpleAtod(text, out) && *out >= 0;
}

absl::Status LineError(const std::string& source, int line,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", line, ": ", what));
}

// A SimAI file of 100k GPUs is ~10 MB; 256 MiB is far beyond any fabric
// the planner can evaluate.
constexpr uint64_t kMaxFabricFileBytes = uint64_t{256} << 20;

}  // namespace

absl::StatusOr<SimAiFile> ParseSimAi(const std::string& text,
                                     const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 2) {
    return LineError(source, 1, "too short for a SimAI topology file");
  }
  SimAiFile f;
  std::vector<std::string> head =
      absl::StrSplit(lines[0], ' ', absl::SkipWhitespace());
  if (head.size() < 5 || !absl::SimpleAtoi(head[0], &f.total_nodes) ||
      !absl::SimpleAtoi(head[1], &f.gpus_per_server) ||
      !absl::SimpleAtoi(head[2], &f.nvswitches) ||
      !absl::SimpleAtoi(head[3], &f.switches) ||
      !absl::SimpleAtoi(head[4], &f.declared_links)) {
    return LineError(source, 1,
                     "expected '<nodes> <gpus_per_server> <nvswitches> "
                     "<switches> <links> <gpu_type>'");
  }
  if (head.size() > 5) f.gpu_type = head[5];
  f.gpus = f.total_nodes - f.nvswitches - f.switches;
  if (f.gpus_per_server <= 0 || f.gpus <= 0 || f.nvswitches < 0 ||
      f.switches < 0 || f.gpus % f.gpus_per_server != 0) {
    return LineError(source, 1,
                     absl::StrCat(f.gpus, " GPUs do not fill servers of ",
                                  f.gpus_per_server));
  }
  for (absl::string_view id :
       absl::StrSplit(lines[1], ' ', absl::SkipWhitespace())) {
    int v = 0;
    if (!absl::SimpleAtoi(id, &v) || v < f.gpus || v >= f.total_nodes) {
      return LineError(source, 2,
                       absl::StrCat("switch id '", id, "' is not in [", f.gpus,
                                    ", ", f.total_nodes, ")"));
    }
    f.switch_ids.push_back(v);
  }
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> w =
        absl::StrSplit(lines[i], ' ', absl::SkipWhitespace());
    if (w.empty()) continue;
    const int line = static_cast<int>(i) + 1;
    SimAiLink l;
    l.line = line;
    if (w.size() < 4 || !absl::SimpleAtoi(w[0], &l.src) ||
        !absl::SimpleAtoi(w[1], &l.dst) ||
        !ParseWithSuffix(w[2], "Gbps", &l.gbps) ||
        !ParseWithSuffix(w[3], "ms", &l.latency_ms)) {
      return LineError(source, line,
                       "expected '<src> <dst> <N>Gbps <N>ms <error_rate>'");
    }
    if (w.size() > 4 && !absl::SimpleAtod(w[4], &l.error_rate)) {
      return LineError(source, line, "bad error rate");
    }
    for (int end : {l.src, l.dst}) {
      if (end < 0 || end >= f.total_nodes) {
        return LineError(source, line,
                         absl::StrCat("node id ", end, " is not in [0, ",
                                      f.total_nodes, ")"));
      }
    }
    if (l.src == l.dst) return LineError(source, line, "a link to itself");
    f.links.push_back(l);
  }
  if (static_cast<int>(f.links.size()) != f.declared_links) {
    return LineError(source, 1,
                     absl::StrCat("header declares ", f.declared_links,
                                  " links, the file has ", f.links.size()));
  }
  return f;
}

absl::StatusOr<Fabric> FabricFromSimAi(const SimAiFile& f,
                                       const std::string& source) {
  Fabric fab;
  const int hosts = f.gpus / f.gpus_per_server;
  for (int h = 0; h < hosts; ++h) fab.AddHost(absl::StrCat("host", h));
  std::vector<int> node_of(f.total_nodes, -1);
  for (int g = 0; g < f.gpus; ++g) {
    node_of[g] = fab.AddGpu(g / f.gpus_per_server);
  }
  std::set<int> nvswitch_ids;
  for (int i = 0; i < f.nvswitches && i < static_cast<int>(f.switch_ids.size());
       ++i) {
    nvswitch_ids.insert(f.switch_ids[i]);
  }
  // Tiers of the other switches: ToRs touch a GPU, then BFS upwards.
  std::map<int, std::vector<int>> adj;
  std::map<int, int> nvswitch_host;
  for (const SimAiLink& l : f.links) {
    adj[l.src].push_back(l.dst);
    adj[l.dst].push_back(l.src);
    for (auto [a, b] : {std::pair{l.src, l.dst}, std::pair{l.dst, l.src}}) {
      if (a < f.gpus && nvswitch_ids.count(b)) {
        nvswitch_host.emplace(b, a / f.gpus_per_server);
      }
      if (a >= f.gpus && b >= f.gpus &&
          (nvswitch_ids.count(a) > 0) != (nvswitch_ids.count(b) > 0)) {
        return LineError(source, l.line,
                         "a link between an NVSwitch and a network switch");
      }
    }
  }
  std::map<int, int> tier;
  std::deque<int> q;
  for (const SimAiLink& l : f.links) {
    for (auto [a, b] : {std::pair{l.src, l.dst}, std::pair{l.dst, l.src}}) {
      if (a < f.gpus && b >= f.gpus && !nvswitch_ids.count(b) &&
          tier.emplace(b, 1).second) {
        q.push_back(b);
      }
    }
  }
  while (!q.empty()) {
    const int s = q.front();
    q.pop_front();
    for (int n : adj[s]) {
      if (n < f.gpus || nvswitch_ids.count(n) || tier.count(n)) continue;
      tier[n] = tier[s] + 1;
      q.push_back(n);
    }
  }
  for (int id = f.gpus; id < f.total_nodes; ++id) {
    if (nvswitch_ids.count(id)) {
      auto h = nvswitch_host.find(id);
      node_of[id] = fab.AddNvSwitch(h == nvswitch_host.end() ? 0 : h->second,
                                    absl::StrCat("nvsw", id));
      continue;
    }
    auto t = tier.find(id);
    if (t == tier.end()) continue;  // an unconnected switch id
    const NodeKind kind = t->second == 1   ? NodeKind::kTor
                          : t->second == 2 ? NodeKind::kAgg
                                           : NodeKind::kCore;
    const char* prefix = t->second == 1   ? "tor"
                         : t->second == 2 ? "spine"
                                          : "core";
    node_of[id] = fab.AddSwitch(kind, absl::StrCat(prefix, id));
  }
  for (const SimAiLink& l : f.links) {
    const int a = node_of[l.src], b = node_of[l.dst];
    if (a < 0 || b < 0) {
      return LineError(source, l.line,
                       "links a node that is neither a GPU nor a switch "
                       "reachable from one");
    }
    const bool gpu_a = l.src < f.gpus, gpu_b = l.dst < f.gpus;
    if (gpu_a && gpu_b) {
      return LineError(source, l.line,
                       "a direct GPU-to-GPU link (expected through an "
                       "NVSwitch)");
    }
    LinkKind kind = LinkKind::kFabric;
    if (nvswitch_ids.count(l.src) || nvswitch_ids.count(l.dst)) {
      kind = LinkKind::kNvLink;
    } else if (gpu_a || gpu_b) {
      kind = LinkKind::kNic;
    }
    fab.AddCable(a, b, kind, l.gbps, l.line);
  }
  fab.description =
      absl::StrCat("SimAI file ", source, ": ", hosts, " host(s) x ",
                   f.gpus_per_server, " GPUs (", f.gpu_type, "), ", f.switches,
                   " switches, ", f.links.size(), " cables");
  if (f.nvswitches > 0 && nvswitch_host.size() < static_cast<size_t>(hosts)) {
    fab.assumptions().push_back(
        "some hosts have no NVSwitch links; their GPUs talk over the network");
  }
  absl::Status s = fab.Finalize();
  if (!s.ok()) return s;
  return fab;
}

namespace {

// The rows of a three-tier CSV (ip,DSW,PSW,ASW) and the switch hierarchy
// they state, with the line that first said each relation.
struct ClosRows {
  struct Row {
    std::string ip, dsw, psw, asw;
    int line;
  };
  std::vector<Row> rows;
  std::set<std::string> ips;
  std::map<std::string, std::string> tor_pod, pod_core;
  std::map<std::string, int> tor_line, pod_line;
};

// The header's column of each name (-1 when absent).
struct ClosColumns {
  int ip = -1, dsw = -1, psw = -1, asw = -1;
};

ClosColumns FindColumns(const std::vector<std::string>& head) {
  ClosColumns c;
  for (size_t i = 0; i < head.size(); ++i) {
    const std::string h =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(head[i]));
    if (h == "ip") c.ip = static_cast<int>(i);
    if (h == "dsw") c.dsw = static_cast<int>(i);
    if (h == "psw") c.psw = static_cast<int>(i);
    if (h == "asw") c.asw = static_cast<int>(i);
  }
  return c;
}

// One data row into `out`: InvalidArgument naming the line for a wrong
// column count, an empty field, a repeated host, or an ASW (PSW group)
// placed under two different PSW groups (DSWs).
absl::Status AddClosRow(const std::string& source, int line,
                        absl::string_view raw, size_t columns,
                        const ClosColumns& col, ClosRows* out) {
  std::vector<std::string> c = absl::StrSplit(raw, ',');
  if (c.size() != columns) {
    return LineError(
        source, line,
        absl::StrCat("expected ", columns, " columns, got ", c.size()));
  }
  ClosRows::Row r{std::string(absl::StripAsciiWhitespace(c[col.ip])),
                  std::string(absl::StripAsciiWhitespace(c[col.dsw])),
                  std::string(absl::StripAsciiWhitespace(c[col.psw])),
                  std::string(absl::StripAsciiWhitespace(c[col.asw])), line};
  if (r.ip.empty() || r.dsw.empty() || r.psw.empty() || r.asw.empty()) {
    return LineError(source, line, "an empty ip, DSW, PSW or ASW");
  }
  if (!out->ips.insert(r.ip).second) {
    return LineError(source, line, absl::StrCat("host ", r.ip, " repeated"));
  }
  auto [tp, fresh_tor] = out->tor_pod.emplace(r.asw, r.psw);
  if (!fresh_tor && tp->second != r.psw) {
    return LineError(
        source, line,
        absl::StrCat("ASW ", r.asw, " is in PSW group ", tp->second,
                     " on line ", out->tor_line[r.asw], ", here in ", r.psw));
  }
  out->tor_line.emplace(r.asw, line);
  auto [pc, fresh_pod] = out->pod_core.emplace(r.psw, r.dsw);
  if (!fresh_pod && pc->second != r.dsw) {
    return LineError(source, line,
                     absl::StrCat("PSW group ", r.psw, " is under DSW ",
                                  pc->second, " on line ", out->pod_line[r.psw],
                                  ", here under ", r.dsw));
  }
  out->pod_line.emplace(r.psw, line);
  out->rows.push_back(std::move(r));
  return absl::OkStatus();
}

absl::StatusOr<ClosRows> ReadClosRows(const std::string& text,
                                      const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  std::vector<std::string> head = absl::StrSplit(lines[0], ',');
  const ClosColumns col = FindColumns(head);
  if (col.ip < 0 || col.dsw < 0 || col.psw < 0 || col.asw < 0) {
    return LineError(source, 1,
                     "expected a header naming the columns ip,DSW,PSW,ASW");
  }
  ClosRows out;
  for (size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view raw = absl::StripAsciiWhitespace(lines[i]);
    if (raw.empty() || raw[0] == '#') continue;
    const int line = static_cast<int>(i) + 1;
    if (absl::Status s = AddClosRow(source, line, raw, head.size(), col, &out);
        !s.ok()) {
      return s;
    }
  }
  if (out.rows.empty()) return LineError(source, 1, "no hosts");
  return out;
}

// Aggregation switches: aggs_per_pod per PSW group. Core: one plane per
// agg index, cores_per_agg cores in it, shared by every pod (the DSW groups
// are kept as names only; see assumptions). Returns the ToRs by name.
std::map<std::string, int> AddClosSwitches(const ClosRows& in,
                                           const ClosCsvOptions& o,
                                           Fabric* fab) {
  std::map<std::string, std::vector<int>> pod_aggs;
  std::vector<std::vector<int>> planes(o.aggs_per_pod);
  for (int p = 0; p < o.aggs_per_pod; ++p) {
    for (int c = 0; c < o.cores_per_agg; ++c) {
      planes[p].push_back(
          fab->AddSwitch(NodeKind::kCore, absl::StrCat("core", p, ".", c)));
    }
  }
  for (const auto& [pod, core] : in.pod_core) {
    for (int a = 0; a < o.aggs_per_pod; ++a) {
      const int agg =
          fab->AddSwitch(NodeKind::kAgg, absl::StrCat(pod, "/agg", a));
      pod_aggs[pod].push_back(agg);
      for (int c : planes[a]) {
        fab->AddCable(agg, c, LinkKind::kFabric, o.agg_uplink_gbps,
                      in.pod_line.at(pod));
      }
    }
  }
  std::map<std::string, int> tors;
  for (const auto& [asw, pod] : in.tor_pod) {
    const int t = fab->AddSwitch(NodeKind::kTor, asw);
    tors[asw] = t;
    for (int agg : pod_aggs[pod]) {
      fab->AddCable(t, agg, LinkKind::kFabric, o.tor_uplink_gbps,
                    in.tor_line.at(asw));
    }
  }
  return tors;
}

// What the CSV does not say and the model assumes.
void AddClosAssumptions(const ClosRows& in, const ClosCsvOptions& o,
                        Fabric* fab) {
  auto& a = fab->assumptions();
  a.push_back(absl::StrCat("each host has ", o.gpus_per_host, " GPUs, one ",
                           o.nic_gbps,
                           " Gbps NIC each, all on the host's ASW "
                           "(--gpus-per-host, --nic-gbps)"));
  a.push_back(absl::StrCat("each PSW group is ", o.aggs_per_pod,
                           " aggregation switches; every ASW has one ",
                           o.tor_uplink_gbps,
                           " Gbps uplink to each (--aggs-per-pod, "
                           "--tor-uplink-gbps)"));
  a.push_back(absl::StrCat("aggregation switch k of every pod has one ",
                           o.agg_uplink_gbps, " Gbps uplink to each of ",
                           o.cores_per_agg,
                           " cores of core plane k (--cores-per-agg, "
                           "--agg-uplink-gbps)"));
  std::set<std::string> dsw;
  for (const auto& [p, c] : in.pod_core) dsw.insert(c);
  if (dsw.size() > 1) {
    a.push_back(
        "several DSW groups: modelled as one shared core layer (the file "
        "does not say how DSW groups interconnect)");
  }
}

}  // namespace

absl::StatusOr<Fabric> ParseClosCsv(const std::string& text,
                                    const std::string& source,
                                    const ClosCsvOptions& o) {
  if (o.gpus_per_host <= 0 || o.aggs_per_pod <= 0 || o.cores_per_agg <= 0) {
    return absl::InvalidArgumentError(
        "gpus per host, aggs per pod and cores per agg must be positive");
  }
  absl::StatusOr<ClosRows> in = ReadClosRows(text, source);
  if (!in.ok()) return in.status();
  Fabric fab;
  std::map<std::string, int> tors = AddClosSwitches(*in, o, &fab);
  for (const ClosRows::Row& r : in->rows) {
    const int h = fab.AddHost(r.ip);
    const int nvs = fab.AddNvSwitch(h, absl::StrCat(r.ip, "/nvswitch"));
    for (int g = 0; g < o.gpus_per_host; ++g) {
      const int gpu = fab.AddGpu(h);
      fab.AddCable(gpu, nvs, LinkKind::kNvLink, o.nvlink_gbps, r.line);
      fab.AddCable(gpu, tors[r.asw], LinkKind::kNic, o.nic_gbps, r.line);
    }
  }
  fab.description = absl::StrCat(
      "three-tier CSV ", source, ": ", in->rows.size(), " hosts x ",
      o.gpus_per_host, " GPUs, ", tors.size(), " ToRs (ASW), ",
      in->pod_core.size(), " pods (PSW groups) of ", o.aggs_per_pod, " aggs, ",
      o.aggs_per_pod * o.cores_per_agg, " cores");
  AddClosAssumptions(*in, o, &fab);
  absl::Status s = fab.Finalize();
  if (!s.ok()) return s;
  return fab;
}

absl::StatusOr<Fabric> LoadFabric(const std::string& what,
                                  const ClosCsvOptions& csv_options) {
  if (absl::StartsWith(what, "gen:")) {
    absl::StatusOr<GeneratorOptions> g = ParseGeneratorSpec(what);
    if (!g.ok()) return g.status();
    return GenerateFabric(*g);
  }
  absl::StatusOr<std::string> text =
      ReadRegularFile(what, "fabric", kMaxFabricFileBytes);
  if (!text.ok()) return text.status();
  const std::string first = text->substr(0, text->find('\n'));
  if (absl::EndsWith(what, ".csv") ||
      absl::StartsWithIgnoreCase(absl::StripAsciiWhitespace(first), "ip,")) {
    return ParseClosCsv(*text, what, csv_options);
  }
  absl::StatusOr<SimAiFile> f = ParseSimAi(*text, what);
  if (!f.ok()) return f.status();
  return FabricFromSimAi(*f, what);
}

}  // namespace pitstop::c4p
