// Three-tier Clos CSV in the layout of Alibaba's published cluster topology
// (alibaba-lingjun-dataset-2023 data/topo.csv): header `ip,DSW,PSW,ASW` (any
// order), one row per host.
//
// Names are scoped by their parent: an ASW name is one switch only within its
// PSW group (S2 under P8 and S2 under P12 are two switches), and a PSW name
// within its DSW. ToRs are named "<pod>/<ASW>", pods "<PSW>", or "<DSW>/<PSW>"
// when the same PSW name appears under several DSWs; a part holding a '/' is
// quoted (NamePart), so two switches never share a name. Rows that cannot place
// a host (wrong column count, an empty field, a host placed twice at different
// switches) are left out and reported with their line numbers; a repeat of
// an identical row is left out too. Only a file without a header or without
// any complete row is refused.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/fabric_read_util.h"

namespace pitstop::c4p {
namespace {

struct ClosRow {
  std::string ip, dsw, psw, asw;
  int line = 0;
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

// Rows that place a host, and the lines left out by reason.
struct ClosRows {
  std::vector<ClosRow> rows;
  std::map<std::string, std::vector<int>> left_out;
};

// Why a record whose quoted ip, DSW, PSW or ASW runs past its line is left
// out (a quote opened by mistake, not a name: names hold no line break).
constexpr char kLineBreakInName[] =
    "with a line break inside a quoted ip, DSW, PSW or ASW (RFC 4180 allows "
    "one; a name cannot hold it)";

// Why a raw row cannot place a host ("" when it can).
std::string IncompleteWhy(const std::vector<std::string>& c, size_t columns,
                          const ClosColumns& col, ClosRow* r) {
  if (c.size() != columns) {
    return absl::StrCat("with ", c.size() < columns ? "fewer" : "more",
                        " than the header's ", columns, " columns");
  }
  r->ip = std::string(absl::StripAsciiWhitespace(c[col.ip]));
  r->dsw = std::string(absl::StripAsciiWhitespace(c[col.dsw]));
  r->psw = std::string(absl::StripAsciiWhitespace(c[col.psw]));
  r->asw = std::string(absl::StripAsciiWhitespace(c[col.asw]));
  if (r->ip.empty()) return "without an ip";
  if (r->dsw.empty() || r->psw.empty() || r->asw.empty()) {
    return "incomplete (an empty DSW, PSW or ASW)";
  }
  for (const std::string* name : {&r->ip, &r->dsw, &r->psw, &r->asw}) {
    if (name->find_first_of("\r\n") == std::string::npos) continue;
    return kLineBreakInName;
  }
  return "";
}

// Leaves out repeats: an identical row again, or a host placed at two
// different switches (both rows: the file does not say which is right).
void DropRepeatedHosts(ClosRows* in) {
  std::map<std::string, size_t> first;
  std::set<std::string> contradicted;
  std::vector<bool> keep(in->rows.size(), true);
  for (size_t i = 0; i < in->rows.size(); ++i) {
    const ClosRow& r = in->rows[i];
    auto [it, fresh] = first.emplace(r.ip, i);
    if (fresh) continue;
    const ClosRow& f = in->rows[it->second];
    keep[i] = false;
    if (std::tie(f.dsw, f.psw, f.asw) == std::tie(r.dsw, r.psw, r.asw)) {
      in->left_out["repeating an earlier row"].push_back(r.line);
    } else {
      contradicted.insert(r.ip);
      in->left_out["placing a host at two different switches"].push_back(
          r.line);
    }
  }
  std::vector<ClosRow> kept;
  for (size_t i = 0; i < in->rows.size(); ++i) {
    if (!keep[i]) continue;
    if (contradicted.count(in->rows[i].ip)) {
      in->left_out["placing a host at two different switches"].push_back(
          in->rows[i].line);
      continue;
    }
    kept.push_back(std::move(in->rows[i]));
  }
  in->rows = std::move(kept);
}

// Whether `fields` is the header again (exports concatenated with `cat`
// repeat it, each with its byte order mark: it is not a host). InvalidArgument
// naming `line` for a header in another column order: it would misread the rows
// after it.
absl::StatusOr<bool> RepeatsTheHeader(std::vector<std::string> fields,
                                      const std::vector<std::string>& head,
                                      const ClosColumns& col,
                                      const std::string& source, int line) {
  // Each exported file may start with a UTF-8 byte order mark: `cat a.csv
  // b.csv` puts one at the start of the second header.
  if (!fields.empty() && absl::StartsWith(fields[0], "\xEF\xBB\xBF")) {
    fields[0].erase(0, 3);
  }
  const ClosColumns again = FindColumns(fields);
  if (again.ip < 0 || again.dsw < 0 || again.psw < 0 || again.asw < 0) {
    return false;
  }
  if (std::tie(again.ip, again.dsw, again.psw, again.asw) !=
          std::tie(col.ip, col.dsw, col.psw, col.asw) ||
      fields.size() != head.size()) {
    return LineError(source, line,
                     "a header in another column order than line 1's "
                     "(files concatenated? give one header)");
  }
  return true;
}

absl::StatusOr<ClosRows> ReadClosRows(const std::string& text,
                                      const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  std::vector<std::string> head, fields;
  std::string why;
  if (!SplitCsvRecord(lines[0], &head, &why)) {
    return LineError(source, 1, absl::StrCat("the header is not CSV: ", why));
  }
  const ClosColumns col = FindColumns(head);
  if (col.ip < 0 || col.dsw < 0 || col.psw < 0 || col.asw < 0) {
    return LineError(source, 1,
                     "expected a header naming the columns ip,DSW,PSW,ASW");
  }
  ClosRows out;
  size_t span = 1;
  for (size_t i = 1; i < lines.size(); i += span) {
    span = 1;
    const absl::string_view raw = absl::StripAsciiWhitespace(lines[i]);
    if (raw.empty() || raw[0] == '#') continue;
    ClosRow r;
    r.line = static_cast<int>(i) + 1;
    why.clear();
    if (!SplitCsvRecordAt(lines, i, &fields, &why, &span)) {
      out.left_out[why].push_back(r.line);
      continue;
    }
    absl::StatusOr<bool> header =
        RepeatsTheHeader(fields, head, col, source, r.line);
    if (!header.ok()) return header.status();
    why = *header ? "repeating the header"
                  : IncompleteWhy(fields, head.size(), col, &r);
    if (!why.empty()) {
      // Only its first line: the lines a stray quote swallowed are read as
      // rows of their own (before, well-formed rows after it were lost
      // without being named).
      if (why == kLineBreakInName) span = 1;
      out.left_out[why].push_back(r.line);
      continue;
    }
    out.rows.push_back(std::move(r));
  }
  DropRepeatedHosts(&out);
  if (out.rows.empty()) {
    return LineError(source, 1, "no row places a host (every row left out)");
  }
  for (auto& [why, ls] : out.left_out) std::sort(ls.begin(), ls.end());
  return out;
}

// The switch hierarchy with names scoped by parent, and the line that first
// named each switch.
struct ClosTree {
  using Pod = std::pair<std::string, std::string>;  // DSW, PSW
  using Tor = std::tuple<std::string, std::string, std::string>;
  std::map<Pod, std::string> pod_name;
  std::map<Pod, int> pod_line;
  std::map<Tor, std::string> tor_name;
  std::map<Tor, int> tor_line;
  std::set<std::string> dsw;
};

// One part of a scoped name: as the file gives it, or in double quotes
// (a quote inside doubled) when it holds a '/' or starts with a quote.
// Joined with '/', the parts then read back one way only: ASW `A/B` under
// PSW `X` is `X/"A/B"`, ASW `B` under PSW `X/A` is `"X/A"/B` (before, both
// were `X/A/B`: two ToRs under one name).
std::string NamePart(const std::string& part) {
  if (part.find('/') == std::string::npos && part[0] != '"') return part;
  return absl::StrCat("\"", absl::StrReplaceAll(part, {{"\"", "\"\""}}), "\"");
}

ClosTree BuildTree(const ClosRows& in) {
  ClosTree t;
  std::map<std::string, std::set<std::string>> psw_dsws;
  for (const ClosRow& r : in.rows) {
    psw_dsws[r.psw].insert(r.dsw);
    t.dsw.insert(r.dsw);
  }
  for (const ClosRow& r : in.rows) {
    const ClosTree::Pod pod{r.dsw, r.psw};
    const std::string name =
        psw_dsws[r.psw].size() > 1
            ? absl::StrCat(NamePart(r.dsw), "/", NamePart(r.psw))
            : NamePart(r.psw);
    if (t.pod_name.emplace(pod, name).second) t.pod_line[pod] = r.line;
    const ClosTree::Tor tor{r.dsw, r.psw, r.asw};
    if (t.tor_name.emplace(tor, absl::StrCat(name, "/", NamePart(r.asw)))
            .second) {
      t.tor_line[tor] = r.line;
    }
  }
  return t;
}

// Aggregation switches: aggs_per_pod per pod. Core: one plane per agg index,
// cores_per_agg cores in it, shared by every pod (the DSW groups are kept as
// names only; see assumptions). Returns the ToRs' node ids.
std::map<ClosTree::Tor, int> AddClosSwitches(const ClosTree& in,
                                             const ClosCsvOptions& o,
                                             Fabric* fab) {
  std::map<ClosTree::Pod, std::vector<int>> pod_aggs;
  std::vector<std::vector<int>> planes(o.aggs_per_pod);
  for (int p = 0; p < o.aggs_per_pod; ++p) {
    for (int c = 0; c < o.cores_per_agg; ++c) {
      planes[p].push_back(
          fab->AddSwitch(NodeKind::kCore, absl::StrCat("core", p, ".", c)));
    }
  }
  for (const auto& [pod, name] : in.pod_name) {
    const int line = in.pod_line.at(pod);
    for (int a = 0; a < o.aggs_per_pod; ++a) {
      const int agg =
          fab->AddSwitch(NodeKind::kAgg, absl::StrCat(name, "/agg", a), line);
      pod_aggs[pod].push_back(agg);
      for (int c : planes[a]) {
        fab->AddCable(agg, c, LinkKind::kFabric, o.agg_uplink_gbps, line);
      }
    }
  }
  std::map<ClosTree::Tor, int> tors;
  for (const auto& [tor, name] : in.tor_name) {
    const int line = in.tor_line.at(tor);
    const int t = fab->AddSwitch(NodeKind::kTor, name, line);
    tors[tor] = t;
    for (int agg : pod_aggs[{std::get<0>(tor), std::get<1>(tor)}]) {
      fab->AddCable(t, agg, LinkKind::kFabric, o.tor_uplink_gbps, line);
    }
  }
  return tors;
}

// What the CSV does not say and the model assumes.
void AddClosAssumptions(const ClosTree& in, const ClosCsvOptions& o,
                        Fabric* fab) {
  auto& a = fab->assumptions();
  a.push_back(
      "switch names are scoped by their parent group: a ToR is named "
      "<PSW>/<ASW> (S2 under P8 is P8/S2, another switch than P12/S2)");
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
  if (in.dsw.size() > 1) {
    a.push_back(
        "several DSW groups: modelled as one shared core layer (the file "
        "does not say how DSW groups interconnect)");
  }
}

// InvalidArgument naming the flag (`pitstop plan`'s) of an assumption no
// fabric can have: a count below 1, more GPUs per host than
// kMaxGpusPerHost, a speed that is not a link speed (IsLinkSpeed; before,
// `--nic-gbps inf` and `--tor-uplink-gbps 1e-300` were accepted).
absl::Status CheckClosOptions(const ClosCsvOptions& o) {
  for (const auto& [flag, n] :
       {std::pair<const char*, int>{"--gpus-per-host", o.gpus_per_host},
        {"--aggs-per-pod", o.aggs_per_pod},
        {"--cores-per-agg", o.cores_per_agg}}) {
    if (n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", n, ": a count is at least 1"));
    }
  }
  if (o.gpus_per_host > kMaxGpusPerHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus-per-host ", o.gpus_per_host, ": a host has at most ",
        kMaxGpusPerHost, " GPUs (one NIC each; GB200 NVL72's NVLink domain)"));
  }
  // Before, 1000000 ran for minutes and 2147483647 aborted (bad_alloc).
  for (const auto& [flag, n, what] :
       {std::tuple<const char*, int, const char*>{
            "--aggs-per-pod", o.aggs_per_pod, "uplinks of a ToR"},
        {"--cores-per-agg", o.cores_per_agg,
         "uplinks of an aggregation switch"}}) {
    if (n > kMaxSwitchPorts) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", n, ": at most ", kMaxSwitchPorts, " (", what,
          "; the largest switches have ", kMaxSwitchPorts, " ports)"));
    }
  }
  if (int64_t{o.aggs_per_pod} * o.cores_per_agg > kMaxCoreSwitches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--aggs-per-pod ", o.aggs_per_pod, " x --cores-per-agg ",
        o.cores_per_agg, " = ", int64_t{o.aggs_per_pod} * o.cores_per_agg,
        " core switches: at most ", kMaxCoreSwitches,
        " (8x what a non-blocking fabric of ", kMaxFabricGpus,
        " GPUs needs with 64-port switches)"));
  }
  for (const auto& [flag, gbps] :
       {std::pair<const char*, double>{"--nic-gbps", o.nic_gbps},
        {"--tor-uplink-gbps", o.tor_uplink_gbps},
        {"--agg-uplink-gbps", o.agg_uplink_gbps},
        {"--nvlink-gbps", o.nvlink_gbps}}) {
    if (!IsLinkSpeed(gbps)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", gbps, ": ", kLinkSpeedRule));
    }
  }
  return absl::OkStatus();
}

// One term of a cable or node count, and what makes it smaller.
struct SizeTerm {
  int64_t n;
  const char* what;
  const char* advice;
};

// The largest of `terms`. Before, the advice was always "fewer
// --aggs-per-pod or --cores-per-agg", also when the file's ToRs made the
// routing table too large.
const SizeTerm& Largest(const std::vector<SizeTerm>& terms) {
  return *std::max_element(
      terms.begin(), terms.end(),
      [](const SizeTerm& a, const SizeTerm& b) { return a.n < b.n; });
}

// InvalidArgument naming the file for a fabric the planner cannot take:
// more than kMaxFabricGpus GPUs, or more cables or routes than
// CheckBuildSize allows. Before, 20,000 hosts ran a minute and more.
absl::Status CheckClosSize(const ClosRows& in, const ClosTree& tree,
                           const ClosCsvOptions& o, const std::string& source) {
  const int64_t hosts = static_cast<int64_t>(in.rows.size());
  const int64_t gpus = hosts * o.gpus_per_host;
  if (gpus > kMaxFabricGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", hosts, " hosts x ", o.gpus_per_host, " GPUs = ", gpus,
        " GPUs: the planner takes at most ", kMaxFabricGpus,
        " (2^17; more takes minutes and gigabytes to plan)"));
  }
  const int64_t tors = static_cast<int64_t>(tree.tor_name.size());
  const int64_t pods = static_cast<int64_t>(tree.pod_name.size());
  const int64_t aggs = int64_t{o.aggs_per_pod};
  const int64_t cores = aggs * o.cores_per_agg;
  const int64_t nodes = gpus + hosts + tors + pods * aggs + cores;
  const std::vector<SizeTerm> cable_terms = {
      {2 * gpus, "GPU and NIC cables", "fewer hosts or --gpus-per-host"},
      {tors * aggs, "ToR uplinks", "fewer --aggs-per-pod"},
      {pods * cores, "agg uplinks", "fewer --cores-per-agg or --aggs-per-pod"}};
  // Each ToR routes to every node: the ToRs multiply the hosts' nodes.
  const std::vector<SizeTerm> node_terms = {
      {gpus + hosts + tors, "GPUs, hosts and ToRs",
       "fewer ToRs (the hosts under fewer ASWs) or fewer hosts"},
      {pods * aggs, "aggs", "fewer --aggs-per-pod"},
      {cores, "cores", "fewer --cores-per-agg or --aggs-per-pod"}};
  int64_t cables = 0;
  for (const SizeTerm& t : cable_terms) cables += t.n;
  const SizeTerm& c = Largest(cable_terms);
  const SizeTerm& r = Largest(node_terms);
  return CheckBuildSize(
      absl::StrCat(source, ": ", hosts, " hosts, ", tors, " ToRs and ", pods,
                   " pods of ", aggs, " aggs with ", o.cores_per_agg,
                   " uplinks each"),
      cables, tors * nodes,
      cables > kMaxCables
          ? absl::StrCat(c.n, " of the cables are ", c.what, ": ", c.advice)
          : absl::StrCat("the routing table is ", tors, " ToRs x ", nodes,
                         " nodes, ", r.n, " of them ", r.what, ": ", r.advice));
}

}  // namespace

absl::StatusOr<Fabric> ParseClosCsv(const std::string& text,
                                    const std::string& source,
                                    const ClosCsvOptions& o,
                                    const BuildProgress& progress) {
  if (absl::Status s = CheckClosOptions(o); !s.ok()) return s;
  absl::StatusOr<ClosRows> in = ReadClosRows(text, source);
  if (!in.ok()) return in.status();
  const ClosTree tree = BuildTree(*in);
  if (absl::Status s = CheckClosSize(*in, tree, o, source); !s.ok()) return s;
  Fabric fab;
  fab.source = source;
  std::map<ClosTree::Tor, int> tors = AddClosSwitches(tree, o, &fab);
  for (const ClosRow& r : in->rows) {
    const int h = fab.AddHost(r.ip, r.line);
    const int nvs = fab.AddNvSwitch(h, absl::StrCat(r.ip, "/nvswitch"));
    const int tor = tors.at({r.dsw, r.psw, r.asw});
    for (int g = 0; g < o.gpus_per_host; ++g) {
      const int gpu = fab.AddGpu(h);
      fab.AddCable(gpu, nvs, LinkKind::kNvLink, o.nvlink_gbps, r.line);
      fab.AddCable(gpu, tor, LinkKind::kNic, o.nic_gbps, r.line);
    }
  }
  fab.description = absl::StrCat(
      "three-tier CSV ", source, ": ", in->rows.size(), " hosts x ",
      o.gpus_per_host, " GPUs, ", tors.size(), " ToRs (ASW), ",
      tree.pod_name.size(), " pods (PSW groups) of ", o.aggs_per_pod, " aggs, ",
      o.aggs_per_pod * o.cores_per_agg, " cores");
  AddClosAssumptions(tree, o, &fab);
  for (const auto& [why, lines] : in->left_out) {
    fab.warnings().push_back(LeftOutWarning(source, why, lines));
  }
  absl::Status s = fab.Finalize(progress);
  if (!s.ok()) return s;
  return fab;
}

}  // namespace pitstop::c4p
