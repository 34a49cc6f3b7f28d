#include "pitstop/nic_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "pitstop/tuner_table.h"

namespace pitstop::nicplan {
namespace {

constexpr char kMagic[] = "pitstop-nic-plan 1";

bool ParseNics(const std::string& s, std::vector<int>* out) {
  out->clear();
  if (s == "-") return true;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string part = s.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || errno != 0 || v < 0 || v > 4095) {
      return false;
    }
    out->push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return true;
}

bool ParseLine(const std::string& line, NicPlanEntry* e, std::string* why) {
  std::istringstream in(line);
  std::string key, value;
  bool have_comm = false, have_nics = false;
  while (in >> key) {
    if (!(in >> value)) {
      *why = "key '" + key + "' has no value";
      return false;
    }
    char* end = nullptr;
    errno = 0;
    if (key == "comm") {
      e->comm_id = std::strtoull(value.c_str(), &end, 16);
      have_comm = true;
    } else if (key == "job") {
      e->job = value == "-" ? "" : value;
      continue;
    } else if (key == "epoch") {
      e->epoch = std::strtoull(value.c_str(), &end, 10);
    } else if (key == "ranks") {
      e->n_ranks = static_cast<int>(std::strtol(value.c_str(), &end, 10));
    } else if (key == "nodes") {
      e->n_nodes = static_cast<int>(std::strtol(value.c_str(), &end, 10));
    } else if (key == "unique") {
      e->unique_shape = std::strtol(value.c_str(), &end, 10) != 0;
    } else if (key == "nics") {
      if (!ParseNics(value, &e->nics)) {
        *why = "nics '" + value + "' is not a list of NIC indices";
        return false;
      }
      have_nics = true;
      continue;
    } else {
      continue;  // a newer writer's key: ignored
    }
    if (end == value.c_str() || *end != '\0' || errno != 0) {
      *why = key + " '" + value + "' is not a number";
      return false;
    }
  }
  if (!have_comm || !have_nics) {
    *why = "needs comm and nics";
    return false;
  }
  return true;
}

// Value of attribute `name` in the tag text [begin, end); npos if absent.
// Sets *vbegin / *vend to the value's range (inside the quotes).
bool FindAttr(const std::string& xml, size_t begin, size_t end,
              const char* name, size_t* vbegin, size_t* vend) {
  const size_t n = std::strlen(name);
  size_t pos = begin;
  while (pos < end) {
    pos = xml.find(name, pos);
    if (pos == std::string::npos || pos + n >= end) return false;
    const bool word_start =
        pos > begin &&
        (xml[pos - 1] == ' ' || xml[pos - 1] == '\t' || xml[pos - 1] == '\n');
    size_t q = pos + n;
    while (q < end && xml[q] == ' ') ++q;
    if (word_start && q < end && xml[q] == '=') {
      ++q;
      while (q < end && xml[q] == ' ') ++q;
      if (q < end && (xml[q] == '"' || xml[q] == '\'')) {
        const char quote = xml[q];
        const size_t close = xml.find(quote, q + 1);
        if (close == std::string::npos || close >= end) return false;
        *vbegin = q + 1;
        *vend = close;
        return true;
      }
    }
    pos += n;
  }
  return false;
}

}  // namespace

std::string ResolveNicPlanPath(const std::string& configured,
                               const std::string& tuner_table) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv(kNicPlanEnv);
  if (env != nullptr && env[0] != '\0') return env;
  return tuner::ResolveTablePath(tuner_table) + kNicPlanSuffix;
}

std::string FormatNicPlan(const std::vector<NicPlanEntry>& entries) {
  std::string out = std::string(kMagic) + "\n";
  char buf[160];
  for (const NicPlanEntry& e : entries) {
    std::snprintf(buf, sizeof(buf), "comm 0x%016llx job ",
                  static_cast<unsigned long long>(e.comm_id));
    out += buf;
    out += e.job.empty() ? "-" : e.job;
    std::snprintf(buf, sizeof(buf), " epoch %llu ranks %d nodes %d unique %d",
                  static_cast<unsigned long long>(e.epoch), e.n_ranks,
                  e.n_nodes, e.unique_shape ? 1 : 0);
    out += buf;
    out += " nics ";
    if (e.nics.empty()) out += "-";
    for (size_t i = 0; i < e.nics.size(); ++i) {
      if (i > 0) out += ",";
      out += std::to_string(e.nics[i]);
    }
    out += "\n";
  }
  return out;
}

bool ParseNicPlan(const std::string& text, std::vector<NicPlanEntry>* out,
                  std::string* error) {
  out->clear();
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) {
      if (line != kMagic) {
        *error = "line 1: not a pitstop NIC plan (want '" +
                 std::string(kMagic) + "')";
        return false;
      }
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    NicPlanEntry e;
    std::string why;
    if (!ParseLine(line, &e, &why)) {
      *error = "line " + std::to_string(n) + ": " + why;
      return false;
    }
    out->push_back(std::move(e));
  }
  if (n == 0) {
    *error = "line 1: empty file";
    return false;
  }
  return true;
}

bool WriteNicPlan(const std::string& path,
                  const std::vector<NicPlanEntry>& entries,
                  std::string* error) {
  const std::string text = FormatNicPlan(entries);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = tmp + ": " + std::strerror(errno);
    return false;
  }
  fchmod(fd, 0644);  // whatever the umask: every user's process reads it
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *error = tmp + ": " + std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(w);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = path + ": " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool ReadNicPlan(const std::string& path, std::vector<NicPlanEntry>* out,
                 std::string* error) {
  // Read inside every communicator creation of every process on the node:
  // a FIFO must not block it, a file must not grow it without bound, and
  // another user's file must not steer it (round 21, R21-2).
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  if (std::string why = tuner::CheckTrustedFile(fd, path); !why.empty()) {
    close(fd);
    *error = why;
    return false;
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n < 0) continue;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxNicPlanBytes) {
      close(fd);
      *error =
          path + ": larger than " + std::to_string(kMaxNicPlanBytes) + " bytes";
      return false;
    }
  }
  const int read_errno = errno;
  close(fd);
  if (n < 0) {
    *error = path + ": " + std::strerror(read_errno);
    return false;
  }
  if (!ParseNicPlan(text, out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

const NicPlanEntry* MatchNicPlan(const std::vector<NicPlanEntry>& entries,
                                 const std::string& job, uint64_t comm_id,
                                 int n_ranks) {
  if (comm_id != 0) {
    for (const NicPlanEntry& e : entries) {
      if (e.comm_id == comm_id) return &e;
    }
  }
  const NicPlanEntry* found = nullptr;
  for (const NicPlanEntry& e : entries) {
    if (!job.empty() && e.job != job) continue;
    if (e.n_ranks != n_ranks) continue;
    if (!e.unique_shape || found != nullptr) return nullptr;  // ambiguous
    found = &e;
  }
  return found;
}

uint64_t CommHashOfUniqueId(const char* id, int bytes) {
  uint64_t h = 5381;
  for (int i = 0; i < bytes; ++i) {
    // As NCCL: `char` promoted (signed on x86-64, unsigned on aarch64).
    h = ((h << 5) + h) ^ static_cast<uint64_t>(static_cast<int64_t>(id[i]));
  }
  return h;
}

bool FilterTopologyXml(const std::string& xml, const std::vector<int>& keep,
                       std::string* out, std::vector<std::string>* kept_names,
                       std::string* error) {
  struct Net {
    size_t begin, end;  // the tag "<net ... >"
    int index;
    std::string name;
  };
  std::vector<Net> nets;
  size_t pos = 0;
  int ordinal = 0;
  while ((pos = xml.find("<net", pos)) != std::string::npos) {
    const size_t after = pos + 4;
    if (after >= xml.size() ||
        !(xml[after] == ' ' || xml[after] == '>' || xml[after] == '/' ||
          xml[after] == '\n' || xml[after] == '\t')) {
      pos = after;
      continue;
    }
    const size_t end = xml.find('>', after);
    if (end == std::string::npos) {
      *error = "unterminated <net> tag at byte " + std::to_string(pos);
      return false;
    }
    Net n{pos, end, ordinal++, ""};
    size_t vb, ve;
    if (FindAttr(xml, pos, end, "dev", &vb, &ve)) {
      n.index = std::atoi(xml.substr(vb, ve - vb).c_str());
    }
    if (FindAttr(xml, pos, end, "name", &vb, &ve)) {
      n.name = xml.substr(vb, ve - vb);
    }
    nets.push_back(std::move(n));
    pos = end;
  }
  if (nets.empty()) {
    *error = "no <net> element in the topology";
    return false;
  }
  auto kept = [&](int index) {
    return std::find(keep.begin(), keep.end(), index) != keep.end();
  };
  kept_names->clear();
  for (const Net& n : nets) {
    if (kept(n.index)) kept_names->push_back(n.name);
  }
  if (kept_names->empty()) {
    *error = "none of the planned NICs is a <net> of the topology";
    return false;
  }
  std::string o;
  o.reserve(xml.size() + nets.size() * 16);
  size_t copied = 0;
  const std::string demoted = std::to_string(kDemotedSpeedMbps);
  for (const Net& n : nets) {
    if (kept(n.index)) continue;
    size_t vb, ve;
    if (FindAttr(xml, n.begin, n.end, "speed", &vb, &ve)) {
      o.append(xml, copied, vb - copied);
      o += demoted;
      copied = ve;
    } else {
      const size_t at = n.begin + 4;  // after "<net"
      o.append(xml, copied, at - copied);
      o += " speed=\"" + demoted + "\"";
      copied = at;
    }
  }
  o.append(xml, copied, std::string::npos);
  *out = std::move(o);
  return true;
}

}  // namespace pitstop::nicplan
