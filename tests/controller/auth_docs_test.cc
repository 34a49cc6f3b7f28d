// Issue #33: docs/reliability.md's tables of who may call what drifted from
// the proto (18 Controller RPCs documented, 28 served). This test holds the
// "Roles" table to MethodRoles() and the "Every RPC" table's RPC counts to
// the proto descriptors, so a new RPC fails here until it is documented.
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/api/authorizer.h"

namespace pitstop::controller {
namespace {

// The services served on the controller's port.
std::vector<const google::protobuf::ServiceDescriptor*> ControllerServices() {
  std::vector<const google::protobuf::ServiceDescriptor*> out;
  for (const google::protobuf::FileDescriptor* f :
       {v1::GetStatusRequest::descriptor()->file(),
        v1::ConnectRequest::descriptor()->file()}) {
    for (int s = 0; s < f->service_count(); ++s) out.push_back(f->service(s));
  }
  return out;
}

std::string ReliabilityDoc() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  const std::string path =
      absl::StrCat(src != nullptr ? src : "..", "/docs/reliability.md");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The table rows ("| a | b |" split into trimmed cells) of the section whose
// heading starts with `heading`, up to the next heading.
std::vector<std::vector<std::string>> TableRows(const std::string& doc,
                                                absl::string_view heading) {
  std::vector<std::vector<std::string>> rows;
  bool in_section = false;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    if (absl::StartsWith(line, "#")) {
      in_section = absl::StartsWith(line, heading);
      continue;
    }
    if (!in_section || !absl::StartsWith(line, "|")) continue;
    std::vector<std::string> cells;
    for (absl::string_view c : absl::StrSplit(line, '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(c));
    }
    // Leading and trailing '|' leave empty first and last cells.
    if (cells.size() < 3) continue;
    rows.emplace_back(cells.begin() + 1, cells.end() - 1);
  }
  EXPECT_FALSE(rows.empty()) << "no table under '" << heading << "'";
  return rows;
}

// The `...` spans of a cell, without a "Service." prefix.
std::vector<std::string> CodeSpans(const std::string& cell) {
  std::vector<std::string> out;
  std::vector<std::string> parts = absl::StrSplit(cell, '`');
  for (size_t i = 1; i < parts.size(); i += 2) {
    const std::string& p = parts[i];
    out.push_back(
        p.substr(p.rfind('.') == std::string::npos ? 0 : p.rfind('.') + 1));
  }
  return out;
}

TEST(AuthDocsTest, RolesTableNamesEveryRpcWithItsRole) {
  const std::string doc = ReliabilityDoc();
  // Method name -> the role its row names ("viewer", "operator", "agent").
  std::map<std::string, std::string> documented;
  for (const auto& row : TableRows(doc, "### Roles")) {
    if (row.size() < 2 || row[0] == "RPCs" || absl::StartsWith(row[0], "--")) {
      continue;
    }
    const std::string role(absl::StripAsciiWhitespace(
        row[1].substr(0, row[1].find_first_of(",:; "))));
    for (const std::string& m : CodeSpans(row[0])) {
      EXPECT_TRUE(documented.emplace(m, role).second)
          << m << " is listed twice in the Roles table";
    }
  }
  for (const google::protobuf::ServiceDescriptor* sd : ControllerServices()) {
    for (int i = 0; i < sd->method_count(); ++i) {
      const std::string name = sd->method(i)->name();
      const std::string full = absl::StrCat("/", sd->full_name(), "/", name);
      auto policy = MethodRoles().find(full);
      ASSERT_NE(policy, MethodRoles().end()) << full << " has no role";
      auto doc_role = documented.find(name);
      ASSERT_NE(doc_role, documented.end())
          << full << " is missing from docs/reliability.md's Roles table";
      EXPECT_EQ(doc_role->second, RoleName(policy->second))
          << full << ": the docs say one role, MethodRoles() another";
      documented.erase(doc_role);
    }
  }
  for (const auto& [name, role] : documented) {
    ADD_FAILURE() << name << " (" << role << ") is documented but not served";
  }
}

TEST(AuthDocsTest, EveryRpcTableCountsTheProtoRpcs) {
  const std::string doc = ReliabilityDoc();
  std::map<std::string, int> counted;
  for (const auto& row : TableRows(doc, "### Every RPC, every identity")) {
    int n = 0;
    if (row.size() < 2 || !absl::SimpleAtoi(row[1], &n)) continue;
    counted[std::string(
        absl::StripPrefix(absl::StripSuffix(row[0], "`"), "`"))] = n;
  }
  for (const google::protobuf::ServiceDescriptor* sd : ControllerServices()) {
    auto it = counted.find(sd->full_name());
    ASSERT_NE(it, counted.end()) << sd->full_name() << " has no row";
    EXPECT_EQ(it->second, sd->method_count())
        << sd->full_name() << ": the table counts " << it->second
        << " RPCs, the proto has " << sd->method_count();
  }
}

}  // namespace
}  // namespace pitstop::controller
