// A SimAI topology file small enough to read in a test: two servers of two
// GPUs (0-3), NVSwitches 4 and 5, rail ToRs 6 and 7, spines 8 and 9. The
// fabric, fabric check and `pitstop plan` tests share it.
#ifndef PITSTOP_TESTS_C4P_TINY_SIMAI_H_
#define PITSTOP_TESTS_C4P_TINY_SIMAI_H_

#include <string>
#include <vector>

namespace pitstop::c4p {

// Its link lines; line i of the file is element i - 3.
inline const std::vector<std::string>& TinySimAiLinks() {
  static const std::vector<std::string> links = {
      "0 4 900Gbps 0.000025ms 0",  // 3
      "1 4 900Gbps 0.000025ms 0",  // 4
      "2 5 900Gbps 0.000025ms 0",  // 5
      "3 5 900Gbps 0.000025ms 0",  // 6
      "0 6 200Gbps 0.001ms 0",     // 7
      "1 7 200Gbps 0.001ms 0",     // 8
      "2 6 200Gbps 0.001ms 0",     // 9
      "3 7 200Gbps 0.001ms 0",     // 10
      "6 8 400Gbps 0.001ms 0",     // 11
      "6 9 400Gbps 0.001ms 0",     // 12
      "7 8 400Gbps 0.001ms 0",     // 13
      "7 9 400Gbps 0.001ms 0",     // 14
  };
  return links;
}

// The file's text with these link lines (TinySimAiLinks(), edited).
inline std::string TinySimAiText(const std::vector<std::string>& links) {
  std::string text =
      "10 2 2 4 " + std::to_string(links.size()) + " H20\n4 5 6 7 8 9\n";
  for (const std::string& l : links) text += l + "\n";
  return text;
}

}  // namespace pitstop::c4p

#endif  // PITSTOP_TESTS_C4P_TINY_SIMAI_H_
