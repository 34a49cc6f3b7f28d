#include "src/c4p/fabric_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
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
#include "src/c4p/fabric_read_util.h"

namespace pitstop::c4p {
namespace {

// A number ending in `suffix` ("400Gbps"; checked by the caller).
bool ParseWithSuffix(absl::string_view text, absl::string_view suffix,
                     double* out) {
  if (!absl::ConsumeSuffix(&text, suffix)) return false;
  return absl::SimpleAtod(text, out);
}

// One link line, split into words: ends in [0, total_nodes).
absl::StatusOr<SimAiLink> ParseSimAiLink(const std::vector<std::string>& w,
                                         int line, int total_nodes,
                                         const std::string& source) {
  SimAiLink l;
  l.line = line;
  if (w.size() < 4 || !absl::SimpleAtoi(w[0], &l.src) ||
      !absl::SimpleAtoi(w[1], &l.dst) ||
      !ParseWithSuffix(w[2], "Gbps", &l.gbps) ||
      !ParseWithSuffix(w[3], "ms", &l.latency_ms)) {
    return LineError(source, line,
                     "expected '<src> <dst> <N>Gbps <N>ms <error_rate>'");
  }
  if (!(l.latency_ms >= 0) || !std::isfinite(l.latency_ms)) {
    // Before: the generic "expected '<src> <dst> ...'" for -1ms.
    return LineError(source, line,
                     absl::StrCat("latency '", w[3],
                                  "': a latency is a finite number of "
                                  "ms, 0 or more"));
  }
  if (w.size() > 5) {
    // Before, words after the error rate were ignored.
    return LineError(source, line,
                     absl::StrCat("'", w[5],
                                  "' after the error rate: expected '<src> "
                                  "<dst> <N>Gbps <N>ms <error_rate>'"));
  }
  if (w.size() > 4 && (!absl::SimpleAtod(w[4], &l.error_rate) ||
                       !(l.error_rate >= 0 && l.error_rate <= 1))) {
    // Before, nan was taken.
    return LineError(
        source, line,
        absl::StrCat("error rate '", w[4], "': a rate is a number in [0, 1]"));
  }
  for (int end : {l.src, l.dst}) {
    if (end < 0 || end >= total_nodes) {
      return LineError(
          source, line,
          absl::StrCat("node id ", end, " is not in [0, ", total_nodes, ")"));
    }
  }
  return l;
}

// The header's counts, each 0..INT_MAX (named when not: before, a count
// that overflowed an int was an "unrecognised fabric format" and a
// negative one "-5 GPUs do not fill servers"), and the GPUs they leave
// (at most kMaxFabricGpus).
absl::Status ParseSimAiHeader(const std::string& line,
                              const std::string& source, SimAiFile* f) {
  std::vector<std::string> head =
      absl::StrSplit(line, ' ', absl::SkipWhitespace());
  if (head.size() < 5) {
    return LineError(source, 1,
                     "expected '<nodes> <gpus_per_server> <nvswitches> "
                     "<switches> <links> <gpu_type>'");
  }
  const std::pair<const char*, int*> counts[] = {
      {"nodes", &f->total_nodes},
      {"gpus_per_server", &f->gpus_per_server},
      {"nvswitches", &f->nvswitches},
      {"switches", &f->switches},
      {"links", &f->declared_links}};
  for (size_t i = 0; i < 5; ++i) {
    if (!absl::SimpleAtoi(head[i], counts[i].second) || *counts[i].second < 0) {
      return LineError(source, 1,
                       absl::StrCat("<", counts[i].first, "> '", head[i],
                                    "' is not a count (0..2147483647)"));
    }
  }
  if (head.size() > 5) f->gpu_type = head[5];
  f->gpus = f->total_nodes - f->nvswitches - f->switches;
  if (f->gpus > kMaxFabricGpus) {
    return LineError(
        source, 1,
        absl::StrCat(f->gpus, " GPUs: the planner takes at most ",
                     kMaxFabricGpus,
                     " (2^17; more takes minutes and gigabytes to plan)"));
  }
  return absl::OkStatus();
}

// The switch line (line 2): ids in [gpus, total_nodes), each once.
absl::Status ParseSimAiSwitches(const std::string& line,
                                const std::string& source, SimAiFile* fp) {
  SimAiFile& f = *fp;
  std::set<int> listed;
  for (absl::string_view id :
       absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    int v = 0;
    if (!absl::SimpleAtoi(id, &v) || v < f.gpus || v >= f.total_nodes) {
      return LineError(source, 2,
                       absl::StrCat("switch id '", id, "' is not in [", f.gpus,
                                    ", ", f.total_nodes, ")"));
    }
    // Before, an id listed twice was taken: the NVSwitches are the first
    // <nvswitches> ids, so a repeat pushed an NVSwitch among the ToRs.
    if (!listed.insert(v).second) {
      return LineError(source, 2,
                       absl::StrCat("switch id ", v,
                                    " is listed twice (each switch once, "
                                    "the NVSwitches first)"));
    }
    f.switch_ids.push_back(v);
  }
  // Before, a short line was taken: the NVSwitches are the first
  // <nvswitches> ids, so the ones left off became ToRs.
  const int64_t declared = int64_t{f.nvswitches} + f.switches;
  if (static_cast<int64_t>(f.switch_ids.size()) != declared) {
    return LineError(
        source, 2,
        absl::StrCat("header declares ", declared, " switch ids, line has ",
                     f.switch_ids.size()));
  }
  return absl::OkStatus();
}

// A SimAI file of 100k GPUs is ~10 MB; 256 MiB is far beyond any fabric
// the planner can evaluate.
constexpr uint64_t kMaxFabricFileBytes = uint64_t{256} << 20;

// Adds the servers as hosts ("host<N>"), each with the first line naming
// one of its GPUs; returns the first line naming each id (what errors about
// it point at).
std::vector<int> AddSimAiHosts(const SimAiFile& f, Fabric* fab) {
  std::vector<int> first_line(f.total_nodes, 0);
  for (const SimAiLink& l : f.links) {
    for (int end : {l.src, l.dst}) {
      if (first_line[end] == 0) first_line[end] = l.line;
    }
  }
  for (int h = 0; h < f.gpus / f.gpus_per_server; ++h) {
    int line = 0;
    for (int g = h * f.gpus_per_server; g < (h + 1) * f.gpus_per_server; ++g) {
      if (first_line[g] > 0 && (line == 0 || first_line[g] < line)) {
        line = first_line[g];
      }
    }
    fab->AddHost(absl::StrCat("host", h), line);
  }
  return first_line;
}

}  // namespace

absl::StatusOr<SimAiFile> ParseSimAi(const std::string& text,
                                     const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 2) {
    return LineError(source, 1, "too short for a SimAI topology file");
  }
  SimAiFile f;
  if (absl::Status s = ParseSimAiHeader(lines[0], source, &f); !s.ok()) {
    return s;
  }
  if (f.gpus <= 0) {
    return LineError(
        source, 1,
        absl::StrCat(f.total_nodes, " nodes leave no GPUs after ", f.nvswitches,
                     " NVSwitches and ", f.switches, " switches"));
  }
  if (f.gpus_per_server <= 0 || f.gpus % f.gpus_per_server != 0) {
    return LineError(source, 1,
                     absl::StrCat(f.gpus, " GPUs do not fill servers of ",
                                  f.gpus_per_server));
  }
  if (absl::Status s = ParseSimAiSwitches(lines[1], source, &f); !s.ok()) {
    return s;
  }
  std::map<std::pair<int, int>, int> cable_line;  // ends -> first line
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> w =
        absl::StrSplit(lines[i], ' ', absl::SkipWhitespace());
    if (w.empty()) continue;
    const int line = static_cast<int>(i) + 1;
    absl::StatusOr<SimAiLink> parsed =
        ParseSimAiLink(w, line, f.total_nodes, source);
    if (!parsed.ok()) return parsed.status();
    const SimAiLink& l = *parsed;
    if (l.src == l.dst) return LineError(source, line, "a link to itself");
    // A cable is named by its two ends (LinkName, --degrade): a second one
    // between the same two nodes would share the name. Before, it became a
    // second cable silently.
    const auto [first, fresh] = cable_line.emplace(
        std::pair{std::min(l.src, l.dst), std::max(l.src, l.dst)}, line);
    if (!fresh) {
      return LineError(
          source, line,
          absl::StrCat("a second link between ", l.src, " and ", l.dst,
                       " (the first is line ", first->second,
                       "): both would be one cable's name; give the pair "
                       "once, with the bandwidth of both"));
    }
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
                                       const std::string& source,
                                       const BuildProgress& progress) {
  Fabric fab;
  fab.source = source;
  const int hosts = f.gpus / f.gpus_per_server;
  const std::vector<int> first_line = AddSimAiHosts(f, &fab);
  std::vector<int> node_of(f.total_nodes, -1);
  for (int g = 0; g < f.gpus; ++g) {
    node_of[g] = fab.AddGpu(g / f.gpus_per_server, first_line[g]);
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
  std::vector<int> unreached;
  for (int id = f.gpus; id < f.total_nodes; ++id) {
    if (nvswitch_ids.count(id)) {
      auto h = nvswitch_host.find(id);
      node_of[id] = fab.AddNvSwitch(h == nvswitch_host.end() ? 0 : h->second,
                                    absl::StrCat("nvsw", id));
      continue;
    }
    auto t = tier.find(id);
    if (t == tier.end()) {  // no path to a GPU: left out, said
      unreached.push_back(id);
      continue;
    }
    const NodeKind kind = t->second == 1   ? NodeKind::kTor
                          : t->second == 2 ? NodeKind::kAgg
                                           : NodeKind::kCore;
    const char* prefix = t->second == 1   ? "tor"
                         : t->second == 2 ? "spine"
                                          : "core";
    node_of[id] = fab.AddSwitch(kind, absl::StrCat(prefix, id), first_line[id]);
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
  if (!unreached.empty()) {
    fab.warnings().push_back(absl::StrCat(
        source, ":2: ", unreached.size(),
        " switch id(s) without a cable, left out (first: ", unreached[0], ")"));
  }
  absl::Status s = fab.Finalize(progress);
  if (!s.ok()) return s;
  return fab;
}

namespace {

// A header line naming the columns ip, DSW, PSW and ASW (any order, any
// case).
bool LooksLikeClosCsvHeader(const std::string& line) {
  std::vector<std::string> columns;
  std::string why;
  if (!SplitCsvRecord(line, &columns, &why)) return false;
  std::set<std::string> names;
  for (const std::string& c : columns) names.insert(absl::AsciiStrToLower(c));
  for (const char* need : {"ip", "dsw", "psw", "asw"}) {
    if (names.count(need) == 0) return false;
  }
  return true;
}

// A first line that starts with a node count, as SimAI's does (a truncated
// or malformed one then gets the SimAI reader's error naming what is
// expected).
bool LooksLikeSimAiHeader(const std::string& line) {
  std::vector<std::string> head =
      absl::StrSplit(line, ' ', absl::SkipWhitespace());
  // Digits, with a sign: a count too large for an int, or negative, is
  // still SimAI's header (and its reader says what is wrong with it).
  absl::string_view first;
  if (!head.empty()) first = head[0];
  absl::ConsumePrefix(&first, "-");
  return !first.empty() &&
         std::all_of(first.begin(), first.end(), absl::ascii_isdigit);
}

// A fabric of another format than ibnetdiscover output, and a host map
// that therefore names nothing: said, not dropped silently.
absl::StatusOr<Fabric> WithUnusedHostMap(absl::StatusOr<Fabric> fab,
                                         const std::string& what,
                                         const IbOptions& ib_options) {
  if (fab.ok() && !ib_options.host_map.empty()) {
    fab->warnings().push_back(
        absl::StrCat("--ib-host-map ", ib_options.host_map, " ignored: ", what,
                     " is not ibnetdiscover output"));
  }
  return fab;
}

constexpr char kFormatsRead[] =
    "(read: a SimAI topology file, '<nodes> <gpus_per_server> <nvswitches> "
    "<switches> <links> <gpu_type>'; a three-tier CSV whose header names "
    "ip,DSW,PSW,ASW; ibnetdiscover output; or a gen:leafspine,... / "
    "gen:3tier,... spec)";

// A file no reader could read whatever its name: empty (or blank), or
// compressed. Refused saying so (before, an empty or a gzip-compressed
// file named .csv got the CSV reader's "expected a header", and one named
// otherwise a bare "unrecognised fabric format").
absl::Status RefuseEmptyOrCompressed(const std::string& text,
                                     const std::string& what) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unrecognised fabric format: the file is ",
                     text.empty() ? "empty " : "blank ", kFormatsRead));
  }
  struct Magic {
    absl::string_view bytes;
    const char* tool;
  };
  for (const Magic& m :
       {Magic{"\x1F\x8B", "gzip"}, Magic{"\x28\xB5\x2F\xFD", "zstd"},
        Magic{"\xFD"
              "7zXZ",
              "xz"}}) {
    if (!absl::StartsWith(text, m.bytes)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": unrecognised fabric format: ", m.tool,
        "-compressed data (decompress it first with ", m.tool, " -d)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fabric> LoadFabricFile(const std::string& path,
                                      const ClosCsvOptions& csv_options,
                                      const IbOptions& ib_options,
                                      const BuildProgress& progress) {
  // "-" and /dev/stdin read standard input, a pipe too (ReadRegularFile
  // takes regular files only: before, `cat f | pitstop plan --topology
  // /dev/stdin` was refused as a FIFO).
  // A named pipe (process substitution, mkfifo) is read the same way.
  const bool in = path == "-" || path == "/dev/stdin";
  const std::string what = in ? "<stdin>" : path;
  struct stat st;
  const bool fifo =
      !in && ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  absl::StatusOr<std::string> text =
      in     ? ReadStdin(kMaxFabricFileBytes)
      : fifo ? ReadFifo(path, kMaxFabricFileBytes)
             : ReadRegularFile(path, "fabric", kMaxFabricFileBytes);
  if (!text.ok()) return text.status();
  if (absl::Status s = RefuseUtf16(*text, what); !s.ok()) return s;
  // A UTF-8 byte order mark (spreadsheet exports write one) is not text.
  if (absl::StartsWith(*text, "\xEF\xBB\xBF")) text->erase(0, 3);
  if (absl::Status s = RefuseEmptyOrCompressed(*text, what); !s.ok()) {
    return s;
  }
  const std::string first = text->substr(0, text->find('\n'));
  // By content: the header names the columns in any order, whatever the
  // file is called; a .csv without it gets the CSV reader's error.
  if (absl::EndsWith(what, ".csv") || LooksLikeClosCsvHeader(first)) {
    return WithUnusedHostMap(ParseClosCsv(*text, what, csv_options, progress),
                             what, ib_options);
  }
  if (LooksLikeIbnetdiscover(*text)) {
    IbHostMap hosts;
    if (!ib_options.host_map.empty()) {
      absl::StatusOr<std::string> m =
          ReadRegularFile(ib_options.host_map, "--ib-host-map");
      if (!m.ok()) return m.status();
      absl::StatusOr<IbHostMap> parsed =
          ParseIbHostMap(*m, ib_options.host_map);
      if (!parsed.ok()) return parsed.status();
      hosts = std::move(*parsed);
    }
    absl::StatusOr<IbFile> ib = ParseIbnetdiscover(*text, what);
    if (!ib.ok()) return ib.status();
    return FabricFromIbnetdiscover(*ib, what, hosts, ib_options, progress);
  }
  if (!LooksLikeSimAiHeader(first)) {
    return LineError(what, 1,
                     absl::StrCat("unrecognised fabric format ", kFormatsRead));
  }
  absl::StatusOr<SimAiFile> f = ParseSimAi(*text, what);
  if (!f.ok()) return f.status();
  return WithUnusedHostMap(FabricFromSimAi(*f, what, progress), what,
                           ib_options);
}

}  // namespace

absl::StatusOr<Fabric> LoadFabric(const std::string& what,
                                  const ClosCsvOptions& csv_options,
                                  const IbOptions& ib_options,
                                  const BuildProgress& progress) {
  if (absl::StartsWith(what, "gen:")) {
    absl::StatusOr<GeneratorOptions> g = ParseGeneratorSpec(what);
    if (!g.ok()) return g.status();
    return WithUnusedHostMap(GenerateFabric(*g, progress), what, ib_options);
  }
  return LoadFabricFile(what, csv_options, ib_options, progress);
}

}  // namespace pitstop::c4p
