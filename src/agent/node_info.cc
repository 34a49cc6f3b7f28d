#include "src/agent/node_info.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pitstop/bounded_file.h"

namespace pitstop::agent {
namespace fs = std::filesystem;
namespace {

// A sysfs attribute under node.sysfs_root (a page; 64 KiB at most). "" when
// absent, unreadable or not a regular file (a FIFO planted there never blocks).
std::string ReadSmallFile(const fs::path& p) {
  absl::StatusOr<std::string> text =
      ReadRegularFile(p.string(), "node.sysfs_root", 64 << 10);
  if (!text.ok()) return "";
  return std::string(absl::StripAsciiWhitespace(*text));
}

std::vector<fs::path> Children(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// "4: ACTIVE" -> "ACTIVE"; "200 Gb/sec (4X HDR)" -> 200000 Mbit/s.
std::string IbState(const std::string& s) {
  const size_t colon = s.find(':');
  return colon == std::string::npos
             ? s
             : std::string(absl::StripAsciiWhitespace(s.substr(colon + 1)));
}

uint64_t IbRateMbps(const std::string& s) {
  double gbps = 0;
  std::vector<absl::string_view> parts = absl::StrSplit(s, ' ');
  if (parts.empty() || !absl::SimpleAtod(parts[0], &gbps)) return 0;
  return static_cast<uint64_t>(gbps * 1000);
}

}  // namespace

std::vector<v1::NicInfo> ReadNics(const std::string& sysfs_root) {
  std::vector<v1::NicInfo> nics;
  const fs::path root(sysfs_root);
  for (const fs::path& dev : Children(root / "class" / "infiniband")) {
    std::string netdev;
    for (const fs::path& nd : Children(dev / "device" / "net")) {
      netdev = nd.filename().string();
      break;
    }
    for (const fs::path& port : Children(dev / "ports")) {
      v1::NicInfo n;
      n.set_name(dev.filename().string());
      n.set_kind(v1::NicInfo::KIND_INFINIBAND);
      n.set_state(IbState(ReadSmallFile(port / "state")));
      n.set_speed_mbps(IbRateMbps(ReadSmallFile(port / "rate")));
      n.set_netdev(netdev);
      uint32_t p = 0;
      if (absl::SimpleAtoi(port.filename().string(), &p)) n.set_port(p);
      nics.push_back(std::move(n));
    }
  }
  for (const fs::path& dev : Children(root / "class" / "net")) {
    const std::string name = dev.filename().string();
    if (name == "lo") continue;
    v1::NicInfo n;
    n.set_name(name);
    n.set_kind(v1::NicInfo::KIND_ETHERNET);
    n.set_state(ReadSmallFile(dev / "operstate"));
    int64_t speed = 0;
    if (absl::SimpleAtoi(ReadSmallFile(dev / "speed"), &speed) && speed > 0) {
      n.set_speed_mbps(static_cast<uint64_t>(speed));
    }
    nics.push_back(std::move(n));
  }
  return nics;
}

std::vector<v1::GpuInfo> ReadGpus(const std::string& procfs_root) {
  std::vector<v1::GpuInfo> gpus;
  int index = 0;
  for (const fs::path& bus :
       Children(fs::path(procfs_root) / "driver" / "nvidia" / "gpus")) {
    v1::GpuInfo g;
    g.set_index(index++);
    g.set_pci_bus_id(bus.filename().string());
    const std::string info = ReadSmallFile(bus / "information");
    for (absl::string_view line : absl::StrSplit(info, '\n')) {
      absl::string_view v = line;
      if (absl::ConsumePrefix(&v, "Model:")) {
        g.set_name(std::string(absl::StripAsciiWhitespace(v)));
      } else if (absl::ConsumePrefix(&v, "GPU UUID:")) {
        g.set_uuid(std::string(absl::StripAsciiWhitespace(v)));
      }
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::string LocalHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "unknown";
  return buf;
}

}  // namespace pitstop::agent
