#include "src/controller/nodes/agent_limits.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pitstop::controller {
namespace {

absl::Status CheckString(const std::string& value, absl::string_view field,
                         size_t max_bytes) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value.size(), " bytes, at most ", max_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckHost(const std::string& host) {
  if (host.empty()) {
    return absl::InvalidArgumentError("registration.host: empty");
  }
  if (absl::Status s = CheckString(host, "registration.host", kMaxHostBytes);
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < host.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(host[i]);
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("registration.host: byte ", static_cast<int>(c),
                       " at offset ", i, " (printable ASCII only)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRegistration(v1::NodeRegistration* reg, int* nics_dropped) {
  *nics_dropped = 0;
  if (absl::Status s = CheckHost(reg->host()); !s.ok()) return s;
  const std::pair<const std::string*, const char*> strings[] = {
      {&reg->agent_id(), "registration.agent_id"},
      {&reg->agent_version(), "registration.agent_version"}};
  for (const auto& [v, field] : strings) {
    if (absl::Status s = CheckString(*v, field, kMaxIdBytes); !s.ok()) {
      return s;
    }
  }
  if (reg->gpus_size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("registration.gpus: ", reg->gpus_size(), " GPUs, at most ",
                     kMaxGpusPerNode));
  }
  for (int i = 0; i < reg->gpus_size(); ++i) {
    const v1::GpuInfo& g = reg->gpus(i);
    for (const std::string* v : {&g.uuid(), &g.pci_bus_id(), &g.name()}) {
      if (absl::Status s = CheckString(
              *v, absl::StrCat("registration.gpus[", i, "]"), kMaxIdBytes);
          !s.ok()) {
        return s;
      }
    }
  }
  if (reg->nics_size() > kMaxNicsPerNode) {
    *nics_dropped = reg->nics_size() - kMaxNicsPerNode;
    reg->mutable_nics()->DeleteSubrange(kMaxNicsPerNode, *nics_dropped);
  }
  for (int i = 0; i < reg->nics_size(); ++i) {
    const v1::NicInfo& n = reg->nics(i);
    for (const std::string* v : {&n.name(), &n.state(), &n.netdev()}) {
      if (absl::Status s = CheckString(
              *v, absl::StrCat("registration.nics[", i, "]"), kMaxIdBytes);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCounters(const v1::AgentCounters& c) {
  const std::pair<uint64_t, const char*> counters[] = {
      {c.plugin_dropped(), "counters.plugin_dropped"},
      {c.summaries_aggregated(), "counters.summaries_aggregated"},
      {c.summaries_dropped(), "counters.summaries_dropped"},
      {c.records_ingested(), "counters.records_ingested"},
      {c.undelivered(), "counters.undelivered"},
      {c.rank_records_sent(), "counters.rank_records_sent"}};
  for (const auto& [v, field] : counters) {
    if (v > kMaxCounter) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", v, " is above 2^50 (not believed)"));
    }
  }
  if (c.connected_ranks() > kMaxConnectedRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("counters.connected_ranks: ", c.connected_ranks(),
                     " is above ", kMaxConnectedRanks));
  }
  return absl::OkStatus();
}

bool NewClaimWins(const v1::NodeRegistration& current,
                  const v1::NodeRegistration& claimant) {
  if (claimant.agent_id() == current.agent_id()) return true;
  if (claimant.boot_unix_ns() != current.boot_unix_ns()) {
    return claimant.boot_unix_ns() > current.boot_unix_ns();
  }
  return claimant.agent_id() > current.agent_id();
}

}  // namespace pitstop::controller
