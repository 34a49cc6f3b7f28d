// Several controllers (docs/ha.md): a follower refuses agent streams and
// API writes with UNAVAILABLE whose message ends in "leader=HOST:PORT".
// Agents and pitstopctl read it to go to the leader. Header only.
#ifndef PITSTOP_LEADER_HINT_H_
#define PITSTOP_LEADER_HINT_H_

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace pitstop {

inline constexpr absl::string_view kLeaderHintKey = "leader=";

// The address after "leader=" in a status message ("" when none).
inline std::string LeaderFromMessage(absl::string_view message) {
  const size_t at = message.rfind(kLeaderHintKey);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = message.substr(at + kLeaderHintKey.size());
  const size_t end = rest.find_first_of(" ;,)\t\n");
  return std::string(rest.substr(0, end));
}

// "a:1, b:2" -> {"a:1", "b:2"}: the controller list of agents and
// pitstopctl (one address is a list of one).
inline std::vector<std::string> SplitControllerList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view a :
       absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(a));
  }
  return out;
}

}  // namespace pitstop

#endif  // PITSTOP_LEADER_HINT_H_
