#include "plugin/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "plugin/record.h"

namespace pitstop::plugin {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

bool ParseNamedBit(absl::string_view name, uint32_t* bit) {
  static constexpr struct {
    const char* name;
    uint32_t bit;
  } kNames[] = {{"coll", abi::kColl},         {"p2p", abi::kP2p},
                {"proxyop", abi::kProxyOp},   {"proxystep", abi::kProxyStep},
                {"kernelch", abi::kKernelCh}, {"netplugin", abi::kNetPlugin}};
  const std::string lower =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (const auto& n : kNames) {
    if (lower == n.name) {
      *bit = n.bit;
      return true;
    }
  }
  return false;
}

void ReadUint(const char* name, uint32_t lo, uint32_t hi, bool power_of_two,
              uint32_t* value, std::vector<std::string>* warnings) {
  const char* v = Env(name);
  if (v == nullptr) return;
  uint32_t parsed = 0;
  if (!absl::SimpleAtoi(v, &parsed) || parsed < lo || parsed > hi ||
      (power_of_two && (parsed & (parsed - 1)) != 0)) {
    warnings->push_back(absl::StrCat(name, "='", v, "' is invalid (want ",
                                     power_of_two ? "a power of two " : "",
                                     "in [", lo, ", ", hi, "]); using ",
                                     *value));
    return;
  }
  *value = parsed;
}

}  // namespace

bool ParseEventMask(const char* text, uint32_t* mask) {
  if (text == nullptr) return false;
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return false;
  uint32_t value = 0;
  if (absl::ascii_isdigit(s[0])) {
    // Decimal, or hex with 0x; a leading zero is decimal, never octal.
    const bool hex =
        s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    errno = 0;
    char* end = nullptr;
    const std::string str(s);
    const unsigned long v = std::strtoul(str.c_str(), &end, hex ? 16 : 10);
    if (errno != 0 || end == str.c_str() || *end != '\0' || v > 0xffffffffUL) {
      return false;
    }
    value = static_cast<uint32_t>(v);
  } else {
    for (absl::string_view part : absl::StrSplit(s, absl::ByAnyChar("|,"))) {
      uint32_t bit = 0;
      if (!ParseNamedBit(part, &bit)) return false;
      value |= bit;
    }
  }
  if ((value & ~kSupportedEventMask) != 0) return false;
  *mask = value;
  return true;
}

bool ValidAgentSocketPath(absl::string_view path) {
  return !path.empty() && path[0] == '/' && path.size() <= kMaxSocketPathBytes;
}

PluginConfig ReadPluginConfig() {
  PluginConfig c;
  if (const char* v = Env("PITSTOP_AGENT_SOCKET")) {
    if (ValidAgentSocketPath(v)) {
      c.agent_socket = v;
    } else {
      c.warnings.push_back(
          absl::StrCat("PITSTOP_AGENT_SOCKET='", v,
                       "' is invalid (want an absolute path of at most ",
                       kMaxSocketPathBytes, " bytes); using ", c.agent_socket));
    }
  }
  if (const char* v = Env("PITSTOP_HOST")) {
    c.host = v;
  } else {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) == 0) c.host = buf;
  }
  for (const char* name :
       {"PITSTOP_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    if (const char* v = Env(name)) {
      c.job_id = v;
      break;
    }
  }
  if (c.job_id.empty()) c.job_id = "default";
  for (auto [name, field] : {std::pair{"RANK", &c.global_rank},
                             std::pair{"LOCAL_RANK", &c.local_rank}}) {
    const char* v = Env(name);
    if (v == nullptr) continue;
    int parsed = -1;
    if (!absl::SimpleAtoi(v, &parsed) || parsed < 0) {
      c.warnings.push_back(
          absl::StrCat(name, "='", v, "' is not a rank; ignored"));
      continue;
    }
    *field = parsed;
  }
  for (auto [name, field] :
       {std::pair{"PITSTOP_EVENT_MASK", &c.event_mask},
        std::pair{"PITSTOP_DEEP_EVENT_MASK", &c.deep_event_mask}}) {
    const char* v = Env(name);
    if (v == nullptr) continue;
    uint32_t mask = 0;
    if (!ParseEventMask(v, &mask)) {
      c.warnings.push_back(absl::StrCat(
          name, "='", v,
          "' is not a valid event mask (number or names like "
          "coll|p2p|proxyop|proxystep|kernelch|netplugin); using 0x",
          absl::Hex(*field)));
      continue;
    }
    if (mask == 0) {
      c.warnings.push_back(absl::StrCat(
          name, "='", v,
          "' selects no events; nothing of that kind is recorded"));
    }
    *field = mask;
  }
  ReadUint("PITSTOP_RING_CAPACITY", 16, 1u << 20, true, &c.ring_capacity,
           &c.warnings);
  ReadUint("PITSTOP_MAX_THREADS", 1, 1024, false, &c.max_rings, &c.warnings);
  const uint64_t ring_bytes =
      uint64_t{c.max_rings} * c.ring_capacity * sizeof(Record);
  if (ring_bytes > kMaxRingBytes) {
    const PluginConfig d;
    c.warnings.push_back(absl::StrCat(
        "PITSTOP_MAX_THREADS=", c.max_rings,
        " x PITSTOP_RING_CAPACITY=", c.ring_capacity, " needs ",
        ring_bytes >> 20, " MiB of rings (limit ", kMaxRingBytes >> 20,
        " MiB); using ", d.max_rings, " x ", d.ring_capacity));
    c.max_rings = d.max_rings;
    c.ring_capacity = d.ring_capacity;
  }
  ReadUint("PITSTOP_FLUSH_INTERVAL_MS", 1, 10, false, &c.flush_interval_ms,
           &c.warnings);
  ReadUint("PITSTOP_FINALIZE_TIMEOUT_MS", 0, 60000, false,
           &c.finalize_timeout_ms, &c.warnings);
  ReadUint("PITSTOP_RECONNECT_MAX_MS", 10, 60000, false, &c.reconnect_max_ms,
           &c.warnings);
  return c;
}

}  // namespace pitstop::plugin
