#include "src/controller/detect/frozen_members.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {

std::set<int32_t> FrozenMembers(const FuncProgress& fp,
                                const std::set<int32_t>& judged) {
  std::set<int32_t> frozen;
  for (int32_t r : judged) {
    if (fp.RankAt(r).process_silent_ns >= kFrozenProcessNs) frozen.insert(r);
  }
  if (frozen.size() == judged.size()) frozen.clear();
  return frozen;
}

void BuildFrozenMemberHang(const CommState& comm, const FuncProgress& fp,
                           const std::set<int32_t>& frozen, int64_t stuck_ns,
                           v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_NON_COMM_HANG, "hang", f);
  auto& values = *f->mutable_evidence(0)->mutable_values();
  std::string who;
  uint64_t silent_max = 0;
  for (int32_t r : frozen) {
    *f->add_suspects() = MemberSuspect(comm, r, v1::SUSPECT_LEVEL_PROCESS, 0.8);
    const uint64_t s = fp.RankAt(r).process_silent_ns;
    silent_max = std::max(silent_max, s);
    values[absl::StrCat("process_silent_ns/rank", r)] = static_cast<double>(s);
    if (f->suspects_size() <= 8) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", DescribeRank(comm, r));
    }
  }
  values["members_frozen"] = static_cast<double>(frozen.size());
  AddVictims(comm, frozen, f);
  f->set_summary(absl::StrFormat(
      "non-comm-hang: the process of %zu of %d ranks of %s went silent "
      "(nothing from it, not even its heartbeat, for up to %.1f s) while the "
      "others wait in seq %d for %.1f s and their processes report: stopped "
      "or frozen, not the network: %s",
      frozen.size(), comm.ExpectedRanks(), CommLabel(comm), silent_max / 1e9,
      f->seq_number(), stuck_ns / 1e9, who));
}

}  // namespace pitstop::controller
