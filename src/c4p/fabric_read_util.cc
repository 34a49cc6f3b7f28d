#include "src/c4p/fabric_read_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pitstop::c4p {

absl::Status LineError(const std::string& source, int line,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", line, ": ", what));
}

std::string LeftOutWarning(const std::string& source, const std::string& why,
                           const std::vector<int>& lines) {
  constexpr size_t kShown = 20;
  std::vector<int> shown(lines.begin(),
                         lines.begin() + std::min(lines.size(), kShown));
  return absl::StrCat(
      source, ": ", lines.size(), lines.size() == 1 ? " row" : " rows",
      " left out, ", why, ": line", lines.size() == 1 ? " " : "s ",
      absl::StrJoin(shown, ", "),
      lines.size() > kShown
          ? absl::StrCat(" and ", lines.size() - kShown, " more")
          : "");
}

}  // namespace pitstop::c4p
