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

absl::Status RefuseUtf16(const std::string& text, const std::string& source) {
  if (text.size() < 2) return absl::OkStatus();
  const bool le = text[0] == '\xFF' && text[1] == '\xFE';
  const bool be = text[0] == '\xFE' && text[1] == '\xFF';
  if (!le && !be) return absl::OkStatus();
  return LineError(
      source, 1,
      absl::StrCat("UTF-16 text (a byte order mark ", le ? "FF FE" : "FE FF",
                   ", as Windows PowerShell's '>' and Excel's "
                   "'Unicode text' write): save it as UTF-8"));
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
