#include "tools/pitstopctl/ctl_format.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace pitstop::ctl {

Table::Table(std::vector<std::string> header) {
  rows_.push_back(std::move(header));
}

void Table::AddRow(std::vector<std::string> row) {
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  // Zeros too (rank 0, GPU 0, state counters at 0): scripts must not have to
  // know proto3's defaults to read a field.
  opts.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

std::string ShortEnum(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

std::string Age(uint64_t unix_ns) {
  if (unix_ns == 0) return "-";
  const absl::Duration d =
      absl::Now() - absl::FromUnixNanos(static_cast<int64_t>(unix_ns));
  if (d < absl::ZeroDuration()) return "now";
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s ago");
  if (s < 3600) return absl::StrCat(s / 60, "m", s % 60, "s ago");
  return absl::StrCat(s / 3600, "h", (s % 3600) / 60, "m ago");
}

std::string DescribeSuspect(const v1::Suspect& s) {
  const std::string level =
      ShortEnum(v1::SuspectLevel_Name(s.level()), "SUSPECT_LEVEL_");
  std::string out = absl::AsciiStrToLower(level);
  if (s.level() == v1::SUSPECT_LEVEL_LINK) {
    absl::StrAppend(&out, " ", s.host().empty() ? "?" : s.host(), " (rank ",
                    s.global_rank(), ") -> ",
                    s.peer_host().empty() ? "?" : s.peer_host(), " (rank ",
                    s.peer_global_rank(), ")");
    return out;
  }
  if (s.global_rank() >= 0) absl::StrAppend(&out, " rank ", s.global_rank());
  if (!s.host().empty()) absl::StrAppend(&out, " ", s.host());
  if (s.gpu_index() >= 0) absl::StrAppend(&out, " GPU", s.gpu_index());
  if (!s.nic().empty()) absl::StrAppend(&out, " ", s.nic());
  if (s.pid() != 0) absl::StrAppend(&out, " pid ", s.pid());
  return out;
}

std::string SuspectList(const v1::Fault& f) {
  if (f.suspects_size() == 0) return "(none yet)";
  std::vector<std::string> parts;
  for (const v1::Suspect& s : f.suspects()) parts.push_back(DescribeSuspect(s));
  return absl::StrJoin(parts, "; ");
}

void PrintFaultTable(const std::vector<v1::Fault>& faults, std::ostream& out) {
  Table t({"ID", "CLASS", "STATE", "JOB", "SUSPECTS", "FIRST SEEN"});
  for (const v1::Fault& f : faults) {
    t.AddRow({f.fault_id(),
              ShortEnum(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_"),
              ShortEnum(v1::FaultState_Name(f.state()), "FAULT_STATE_"),
              f.job_id(), SuspectList(f), Age(f.first_seen_unix_ns())});
  }
  t.Print(out);
}

void PrintFaultDetails(const v1::Fault& f, std::ostream& out) {
  out << "Fault " << f.fault_id() << "  "
      << ShortEnum(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_") << "  "
      << ShortEnum(v1::FaultState_Name(f.state()), "FAULT_STATE_") << "\n";
  out << "  summary:   " << f.summary() << "\n";
  out << "  job:       " << f.job_id()
      << "   comm: " << absl::StrFormat("%x", f.comm_hash()) << " "
      << f.comm_name() << "\n";
  if (f.seq_number() != 0) {
    out << "  op:        "
        << ShortEnum(v1::CollFunc_Name(f.func()), "COLL_FUNC_") << " seq "
        << f.seq_number() << "\n";
  }
  out << "  detector:  " << f.detector();
  // Level-triggered faults (hangs, deaths) are raised while their condition
  // holds and count no detection windows.
  if (f.windows_total() > 0) {
    out << "  windows " << f.windows_hit() << "/" << f.windows_total();
  }
  out << "\n";
  out << "  first seen " << Age(f.first_seen_unix_ns()) << ", updated "
      << Age(f.updated_unix_ns());
  if (f.confirmed_unix_ns())
    out << ", confirmed " << Age(f.confirmed_unix_ns());
  if (f.resolved_unix_ns()) out << ", resolved " << Age(f.resolved_unix_ns());
  out << "\n";
  if (!f.acknowledged_by().empty()) {
    out << "  acknowledged by " << f.acknowledged_by() << "\n";
  }
  if (!f.resolution_note().empty()) {
    out << "  note:      " << f.resolution_note() << "\n";
  }
  out << "  suspects:\n";
  for (const v1::Suspect& s : f.suspects()) {
    out << "    - " << DescribeSuspect(s)
        << absl::StrFormat("  (confidence %.2f)", s.confidence()) << "\n";
  }
  if (f.suspects_size() == 0) out << "    (none yet)\n";
  out << "  victims (" << f.victims_size() << " listed):";
  for (int i = 0; i < f.victims_size() && i < 16; ++i) {
    out << " " << f.victims(i).global_rank();
  }
  out << (f.victims_size() > 16 ? " ..." : "") << "\n";
  out << "  evidence:\n";
  for (const v1::Evidence& e : f.evidence()) {
    out << "    - " << e.text() << "\n";
    std::map<std::string, double> sorted(e.values().begin(), e.values().end());
    for (const auto& [k, v] : sorted) {
      out << "        " << k << " = " << absl::StrFormat("%.6g", v) << "\n";
    }
  }
  if (f.has_trainer_profile()) PrintTrainerProfile(f.trainer_profile(), out);
}

void PrintTrainerProfile(const v1::TrainerProfile& p, std::ostream& out) {
  out << "    - " << p.text() << "\n"
      << "        ("
      << ShortEnum(v1::TrainerProfileState_Name(p.state()),
                   "TRAINER_PROFILE_STATE_")
      << "; asked " << Age(p.requested_unix_ns());
  if (p.finished_unix_ns()) out << ", finished " << Age(p.finished_unix_ns());
  out << ")\n";
  auto table = [&out](const char* who,
                      const google::protobuf::RepeatedPtrField<
                          v1::TrainerProfileOp>& ops,
                      int32_t a, int32_t b, bool suspect_first) {
    if (ops.empty()) return;
    out << absl::StrFormat("        %s (ms per step, rank %d vs rank %d):\n",
                           who, a, b);
    for (const v1::TrainerProfileOp& op : ops) {
      const double sa =
          suspect_first ? op.suspect_self_ms() : op.peer_self_ms();
      const double sb =
          suspect_first ? op.peer_self_ms() : op.suspect_self_ms();
      const double ta =
          suspect_first ? op.suspect_total_ms() : op.peer_total_ms();
      const double tb =
          suspect_first ? op.peer_total_ms() : op.suspect_total_ms();
      const double ca = suspect_first ? op.suspect_calls() : op.peer_calls();
      const double cb = suspect_first ? op.peer_calls() : op.suspect_calls();
      out << absl::StrFormat(
          "          %-40s self %8.2f vs %8.2f  total %8.2f vs %8.2f  calls "
          "%.1f vs %.1f\n",
          op.name(), sa, sb, ta, tb, ca, cb);
    }
  };
  table("suspect spends more", p.ops(), p.suspect_rank(), p.peer_rank(), true);
  table("peer spends more", p.peer_ops(), p.peer_rank(), p.suspect_rank(),
        false);
}

}  // namespace pitstop::ctl
