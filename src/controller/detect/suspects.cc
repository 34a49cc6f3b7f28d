#include "src/controller/detect/suspects.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pitstop::controller {

v1::Suspect MemberSuspect(const CommState& comm, int32_t rank,
                          v1::SuspectLevel level, double confidence) {
  v1::Suspect s;
  s.set_level(level);
  s.set_comm_rank(rank);
  s.set_global_rank(-1);
  s.set_gpu_index(-1);
  s.set_peer_global_rank(-1);
  s.set_peer_comm_rank(-1);
  s.set_confidence(confidence);
  if (const Member* mp = comm.FindMember(rank); mp != nullptr) {
    const Member& m = *mp;
    s.set_global_rank(m.global_rank);
    s.set_host(m.host);
    s.set_gpu_index(m.cuda_device);
    s.set_nic(m.nic);
    s.set_pid(m.pid);
  }
  return s;
}

void AddVictims(const CommState& comm, const std::set<int32_t>& exclude,
                v1::Fault* fault) {
  // Bounded by the victims listed, not by n_ranks (which the wire sets).
  const int32_t n = comm.ExpectedRanks();
  int total = n;
  for (int32_t r : exclude) total -= r >= 0 && r < n;
  for (int32_t r = 0; r < n && fault->victims_size() < kMaxVictims; ++r) {
    if (exclude.count(r)) continue;
    *fault->add_victims() = MemberSuspect(comm, r, v1::SUSPECT_LEVEL_RANK, 0);
  }
  if (fault->evidence_size() == 0) fault->add_evidence();
  (*fault->mutable_evidence(0)->mutable_values())["victims_total"] = total;
}

void FillFaultHeader(const CommState& comm, v1::FaultClass fault_class,
                     const std::string& detector, v1::Fault* fault) {
  fault->set_fault_class(fault_class);
  fault->set_job_id(comm.job_id);
  fault->set_comm_hash(comm.comm_hash);
  fault->set_comm_name(comm.comm_name);
  fault->set_detector(detector);
}

std::string CommLabel(const CommState& comm) {
  return comm.comm_name.empty() ? absl::StrFormat("comm %x", comm.comm_hash)
                                : comm.comm_name;
}

std::string DescribeRank(const CommState& comm, int32_t rank) {
  std::string out = absl::StrCat("rank ", rank);
  const Member* mp = comm.FindMember(rank);
  if (mp == nullptr) return out;
  const Member& m = *mp;
  absl::StrAppend(&out, " (global ", m.global_rank);
  if (!m.host.empty()) absl::StrAppend(&out, ", host ", m.host);
  if (m.cuda_device >= 0) absl::StrAppend(&out, " GPU ", m.cuda_device);
  absl::StrAppend(&out, ")");
  return out;
}

std::string RankIdentity(const CommState& comm, int32_t rank) {
  if (const Member* m = comm.FindMember(rank);
      m != nullptr && m->global_rank >= 0) {
    return absl::StrCat("g", m->global_rank);
  }
  return absl::StrFormat("c%x:%d", comm.comm_hash, rank);
}

}  // namespace pitstop::controller
