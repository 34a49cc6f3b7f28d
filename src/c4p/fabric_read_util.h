// Helpers shared by the fabric readers (fabric_io.cc, fabric_csv.cc,
// ibnetdiscover.cc): errors naming file and line and summarising the lines
// a reader left out.
#ifndef PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_
#define PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pitstop::c4p {

// InvalidArgument "source:line: what".
absl::Status LineError(const std::string& source, int line,
                       const std::string& what);

// InvalidArgument "source:1: UTF-16 text ..." when `text` starts with a
// UTF-16 byte order mark (Windows PowerShell's `>`, Excel's "Unicode
// text"); OK otherwise. The readers take UTF-8.
absl::Status RefuseUtf16(const std::string& text, const std::string& source);

// "source: 3 rows left out, <why>: lines 5, 9, 12" (at most 20 line
// numbers, then how many more).
std::string LeftOutWarning(const std::string& source, const std::string& why,
                           const std::vector<int>& lines);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_
