// Parsing of ibnetdiscover output (ibnetdiscover.h); the fabric is built in
// ibnetdiscover_fabric.cc.
#include "src/c4p/ibnetdiscover.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/c4p/fabric_read_util.h"

namespace pitstop::c4p {
namespace {

void SkipSpace(absl::string_view* s) {
  *s = absl::StripLeadingAsciiWhitespace(*s);
}

// `"text"` at the front of *s (after blanks).
bool TakeQuoted(absl::string_view* s, std::string* out) {
  SkipSpace(s);
  if (!absl::ConsumePrefix(s, "\"")) return false;
  const size_t end = s->find('"');
  if (end == absl::string_view::npos) return false;
  *out = std::string(s->substr(0, end));
  s->remove_prefix(end + 1);
  return true;
}

// `[N]` at the front of *s.
bool TakePort(absl::string_view* s, int* port) {
  if (!absl::ConsumePrefix(s, "[")) return false;
  const size_t end = s->find(']');
  if (end == absl::string_view::npos) return false;
  const bool ok = absl::SimpleAtoi(s->substr(0, end), port) && *port >= 0;
  s->remove_prefix(end + 1);
  return ok;
}

bool ParseGuid(absl::string_view text, uint64_t* out) {
  if (!absl::ConsumePrefix(&text, "0x")) absl::ConsumePrefix(&text, "0X");
  return !text.empty() && text.size() <= 16 && absl::SimpleHexAtoi(text, out);
}

// `(hexguid)` at the front of *s, if there is one.
bool TakeOptionalGuid(absl::string_view* s, uint64_t* guid) {
  if (!absl::ConsumePrefix(s, "(")) return true;
  const size_t end = s->find(')');
  if (end == absl::string_view::npos) return false;
  const bool ok = ParseGuid(s->substr(0, end), guid);
  s->remove_prefix(end + 1);
  return ok;
}

// "# "desc" lid 21 4xEDR": the last word is the link's width and speed.
std::string RateOf(absl::string_view comment) {
  std::vector<absl::string_view> words =
      absl::StrSplit(comment, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  return words.empty() ? "" : std::string(words.back());
}

absl::Status ParsePortLine(absl::string_view s, const std::string& source,
                           int line, IbNode* node) {
  IbPort p;
  p.line = line;
  const std::string expected =
      "expected '[port](guid) \"peer\"[port](guid) # ... <width><speed>'";
  if (!TakePort(&s, &p.port) || !TakeOptionalGuid(&s, &p.guid) ||
      !TakeQuoted(&s, &p.peer) || !TakePort(&s, &p.peer_port) ||
      !TakeOptionalGuid(&s, &p.peer_guid)) {
    return LineError(source, line, expected);
  }
  SkipSpace(&s);
  if (!absl::ConsumePrefix(&s, "#")) return LineError(source, line, expected);
  p.rate = RateOf(s);
  p.gbps = IbRateGbps(p.rate);
  if (p.gbps <= 0) {
    return LineError(source, line,
                     absl::StrCat("no link width and speed at the end (like "
                                  "4xEDR), got '",
                                  p.rate, "'"));
  }
  if (p.peer.size() < 3 || p.peer[1] != '-') {
    return LineError(
        source, line,
        absl::StrCat("peer '", p.peer, "' is not an S-, H- or R- id"));
  }
  node->links.push_back(std::move(p));
  return absl::OkStatus();
}

// `Switch 36 "S-<guid>" # "desc" ...`, `Ca 1 "H-<guid>" # "desc"`.
absl::StatusOr<IbNode> ParseNodeLine(absl::string_view s,
                                     const std::string& source, int line) {
  IbNode n;
  n.line = line;
  absl::string_view kind = s.substr(0, s.find_first_of(" \t"));
  s.remove_prefix(kind.size());
  n.type = kind == "Switch" ? 'S' : kind == "Ca" ? 'H' : 'R';
  SkipSpace(&s);
  const size_t num_end = std::min(s.size(), s.find_first_of(" \t\""));
  const bool ports_ok = absl::SimpleAtoi(s.substr(0, num_end), &n.ports);
  s.remove_prefix(num_end);
  if (!ports_ok || !TakeQuoted(&s, &n.id) || n.id.size() < 3) {
    return LineError(source, line,
                     absl::StrCat("expected '", kind,
                                  " <ports> \"<id>\" # \"<description>\"'"));
  }
  SkipSpace(&s);
  if (absl::ConsumePrefix(&s, "#")) TakeQuoted(&s, &n.description);
  if (!ParseGuid(absl::string_view(n.id).substr(2), &n.guid)) n.guid = 0;
  return n;
}

bool IsNodeLine(absl::string_view s) {
  for (absl::string_view k : {"Switch", "Ca", "Rt"}) {
    if (absl::StartsWith(s, k) && s.size() > k.size() &&
        absl::ascii_isspace(s[k.size()])) {
      return true;
    }
  }
  return false;
}

// `key=value` lines of a block; the node GUID lines are kept.
bool IsBlockKeyLine(absl::string_view s, uint64_t* node_guid) {
  const size_t eq = s.find('=');
  if (eq == absl::string_view::npos || eq == 0) return false;
  const absl::string_view key = s.substr(0, eq);
  for (char c : key) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  if (key == "switchguid" || key == "caguid" || key == "routerguid") {
    absl::string_view v = s.substr(eq + 1);
    v = v.substr(0, v.find('('));
    ParseGuid(v, node_guid);
  }
  return true;
}

}  // namespace

double IbRateGbps(const std::string& rate) {
  const size_t x = rate.find('x');
  int width = 0;
  if (x == std::string::npos || !absl::SimpleAtoi(rate.substr(0, x), &width)) {
    return 0;
  }
  if (width != 1 && width != 2 && width != 4 && width != 8 && width != 12) {
    return 0;
  }
  static const std::map<std::string, double> kLane = {
      {"SDR", 2},  {"DDR", 4},  {"QDR", 8},   {"FDR10", 10}, {"FDR", 13.64},
      {"EDR", 25}, {"HDR", 50}, {"NDR", 100}, {"XDR", 200}};
  auto it = kLane.find(rate.substr(x + 1));
  return it == kLane.end() ? 0 : width * it->second;
}

absl::StatusOr<IbFile> ParseIbnetdiscover(const std::string& text,
                                          const std::string& source) {
  IbFile f;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  uint64_t block_guid = 0;
  int current = -1;  // the node whose port lines follow
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line = static_cast<int>(i) + 1;
    const absl::string_view s = absl::StripAsciiWhitespace(lines[i]);
    if (s.empty()) {
      block_guid = 0;
      continue;
    }
    if (s[0] == '#' || IsBlockKeyLine(s, &block_guid)) continue;
    if (IsNodeLine(s)) {
      absl::StatusOr<IbNode> n = ParseNodeLine(s, source, line);
      if (!n.ok()) return n.status();
      if (block_guid != 0) n->guid = block_guid;
      auto [it, fresh] =
          f.by_id.emplace(n->id, static_cast<int>(f.nodes.size()));
      if (!fresh) {
        // Outputs of several subnets (planes) concatenated: a multi-port
        // HCA appears once per subnet, each block with the ports cabled
        // there; they merge. A switch is in one subnet only.
        const IbNode& first = f.nodes[it->second];
        if (n->type != 'H' || first.type != 'H') {
          return LineError(
              source, line,
              absl::StrCat(n->id, " listed twice (first on line ", first.line,
                           "): a switch is in one subnet only; "
                           "the same subnet's output given "
                           "twice?"));
        }
        current = it->second;
        f.nodes[current].ports = std::max(f.nodes[current].ports, n->ports);
        continue;
      }
      current = static_cast<int>(f.nodes.size());
      f.nodes.push_back(std::move(*n));
      continue;
    }
    if (s[0] != '[') {
      return LineError(source, line,
                       "neither a node block line (vendid=, Switch, Ca, Rt) "
                       "nor a port line ([port] \"peer\"[port])");
    }
    if (current < 0) {
      return LineError(source, line, "a port line before any Switch or Ca");
    }
    IbNode& node = f.nodes[current];
    absl::Status st = ParsePortLine(s, source, line, &node);
    if (!st.ok()) return st;
    for (size_t k = 0; k + 1 < node.links.size(); ++k) {
      if (node.links[k].port != node.links.back().port) continue;
      // Within one block a port is listed once; across subnets' blocks of
      // one HCA a port listed twice means the same subnet given twice.
      return LineError(
          source, line,
          absl::StrCat(node.id, " port ", node.links.back().port,
                       " listed twice (first on line ", node.links[k].line,
                       "): the same subnet's output given twice?"));
    }
  }
  for (const IbNode& n : f.nodes) {
    for (const IbPort& p : n.links) {
      if (!f.by_id.count(p.peer)) {
        return LineError(source, p.line,
                         absl::StrCat("peer ", p.peer,
                                      " has no block of its own (a truncated "
                                      "output?)"));
      }
    }
  }
  if (f.nodes.empty()) return LineError(source, 1, "no Switch or Ca block");
  return f;
}

namespace {

// One host-map line split into its words: `<guid> <host>` (or
// `<guid>,<host>`), or infiniband-diags' node-name-map `<guid> "<name>"`,
// the name in quotes holding spaces or '#'; a '#' outside quotes starts a
// comment. False when a quote is not closed or text follows it.
bool SplitHostMapLine(absl::string_view s, std::vector<absl::string_view>* w) {
  const size_t quote = s.find('"');
  if (quote == absl::string_view::npos || s.find('#') < quote) {
    *w = absl::StrSplit(s.substr(0, s.find('#')), absl::ByAnyChar(" \t,\r"),
                        absl::SkipEmpty());
    return true;
  }
  const size_t close = s.find('"', quote + 1);
  if (close == absl::string_view::npos) return false;
  *w = absl::StrSplit(s.substr(0, quote), absl::ByAnyChar(" \t,\r"),
                      absl::SkipEmpty());
  w->push_back(s.substr(quote + 1, close - quote - 1));
  const absl::string_view rest =
      absl::StripLeadingAsciiWhitespace(s.substr(close + 1));
  return rest.empty() || rest[0] == '#';
}

}  // namespace

absl::StatusOr<IbHostMap> ParseIbHostMap(const std::string& text,
                                         const std::string& source) {
  if (absl::Status s = RefuseUtf16(text, source); !s.ok()) return s;
  IbHostMap out;
  absl::string_view all(text);
  absl::ConsumePrefix(&all, "\xef\xbb\xbf");  // a UTF-8 byte order mark
  std::vector<absl::string_view> lines = absl::StrSplit(all, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line = static_cast<int>(i) + 1;
    std::vector<absl::string_view> w;
    if (!SplitHostMapLine(lines[i], &w)) {
      return LineError(source, line,
                       "expected '<guid> <host>' or '<guid> \"<host>\"'");
    }
    if (w.empty()) continue;
    uint64_t guid = 0;
    if (w.size() != 2 || w[1].empty() || !ParseGuid(w[0], &guid)) {
      return LineError(source, line,
                       "expected '<guid> <host>' or '<guid> \"<host>\"'");
    }
    // Checked here, naming this file: before, the fabric check blamed the
    // fabric file's line of the HCA.
    if (const std::string why = NameProblem(w[1]); !why.empty()) {
      return LineError(source, line,
                       absl::StrCat("host name ", QuotedName(w[1]), " ", why));
    }
    IbHostEntry e{std::string(w[1]), absl::StrCat(source, ":", line), line};
    auto [it, fresh] = out.emplace(guid, e);
    if (!fresh && it->second.host != e.host) {
      return LineError(
          source, line,
          absl::StrCat("GUID ", w[0], " is host ", e.host, " here but ",
                       it->second.host, " on line ", it->second.line));
    }
  }
  return out;
}

bool LooksLikeIbnetdiscover(const std::string& text) {
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    l = absl::StripAsciiWhitespace(l);
    if (l.empty() || l[0] == '#') continue;
    uint64_t unused = 0;
    return IsNodeLine(l) ||
           (IsBlockKeyLine(l, &unused) && (absl::StartsWith(l, "vendid=") ||
                                           absl::StartsWith(l, "sysimgguid=")));
  }
  return false;
}

}  // namespace pitstop::c4p
