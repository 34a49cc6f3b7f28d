#include "plugin/config.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "plugin/record.h"

namespace pitstop::plugin {
namespace {

std::string_view Strip(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Whole-string decimal integer in [lo, hi] (surrounding blanks allowed).
bool ParseInt(std::string_view text, int64_t lo, int64_t hi, int64_t* out) {
  const std::string s(Strip(text));
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) {
    return false;
  }
  *out = v;
  return true;
}

// Concatenates the pieces (numbers in decimal).
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  auto add = [&out](const auto& a) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(a)>>) {
      out += std::to_string(a);
    } else {
      out += a;
    }
  };
  (add(args), ...);
  return out;
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%x", v);
  return buf;
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

bool ParseNamedBit(std::string_view name, uint32_t* bit) {
  static constexpr struct {
    const char* name;
    uint32_t bit;
  } kNames[] = {{"coll", abi::kColl},         {"p2p", abi::kP2p},
                {"proxyop", abi::kProxyOp},   {"proxystep", abi::kProxyStep},
                {"kernelch", abi::kKernelCh}, {"netplugin", abi::kNetPlugin}};
  const std::string lower = Lower(Strip(name));
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
  int64_t parsed = 0;
  if (!ParseInt(v, lo, hi, &parsed) ||
      (power_of_two && (parsed & (parsed - 1)) != 0)) {
    warnings->push_back(Cat(name, "='", v, "' is invalid (want ",
                            power_of_two ? "a power of two " : "", "in [", lo,
                            ", ", hi, "]); using ", *value));
    return;
  }
  *value = static_cast<uint32_t>(parsed);
}

}  // namespace

bool ParseEventMask(const char* text, uint32_t* mask) {
  if (text == nullptr) return false;
  const std::string_view s = Strip(text);
  if (s.empty()) return false;
  uint32_t value = 0;
  if (std::isdigit(static_cast<unsigned char>(s[0]))) {
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
    std::string_view rest = s;
    for (;;) {
      const size_t cut = rest.find_first_of("|,");
      uint32_t bit = 0;
      if (!ParseNamedBit(rest.substr(0, cut), &bit)) return false;
      value |= bit;
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
  }
  if ((value & ~kSupportedEventMask) != 0) return false;
  *mask = value;
  return true;
}

bool ValidAgentSocketPath(std::string_view path) {
  return !path.empty() && path[0] == '/' && path.size() <= kMaxSocketPathBytes;
}

PluginConfig ReadPluginConfig() {
  PluginConfig c;
  if (const char* v = Env("PITSTOP_AGENT_SOCKET")) {
    if (ValidAgentSocketPath(v)) {
      c.agent_socket = v;
    } else {
      c.warnings.push_back(
          Cat("PITSTOP_AGENT_SOCKET='", v,
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
    int64_t parsed = -1;
    if (!ParseInt(v, 0, 0x7fffffff, &parsed)) {
      c.warnings.push_back(Cat(name, "='", v, "' is not a rank; ignored"));
      continue;
    }
    *field = static_cast<int>(parsed);
  }
  for (auto [name, field] :
       {std::pair{"PITSTOP_EVENT_MASK", &c.event_mask},
        std::pair{"PITSTOP_DEEP_EVENT_MASK", &c.deep_event_mask}}) {
    const char* v = Env(name);
    if (v == nullptr) continue;
    uint32_t mask = 0;
    if (!ParseEventMask(v, &mask)) {
      c.warnings.push_back(
          Cat(name, "='", v,
              "' is not a valid event mask (number or names like "
              "coll|p2p|proxyop|proxystep|kernelch|netplugin); using 0x",
              Hex(*field)));
      continue;
    }
    if (mask == 0) {
      c.warnings.push_back(
          Cat(name, "='", v,
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
    c.warnings.push_back(
        Cat("PITSTOP_MAX_THREADS=", c.max_rings,
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
  if (const char* v = Env("PITSTOP_CLOCK")) {
    const std::string s = Lower(Strip(v));
    if (s == "monotonic") {
      c.use_tsc = false;
    } else if (s != "tsc") {
      c.warnings.push_back(Cat("PITSTOP_CLOCK='", v,
                               "' is invalid (want tsc or monotonic); using "
                               "tsc"));
    }
  }
  if (const char* v = Env("PITSTOP_CHAIN_PROFILER_PLUGIN")) c.chain_plugin = v;
  ReadUint("PITSTOP_SHM_RING_BYTES", 64 * 1024, 256u << 20, true,
           &c.shm_ring_bytes, &c.warnings);
  return c;
}

}  // namespace pitstop::plugin
