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

// "source: 3 rows left out, <why>: lines 5, 9, 12" (at most 20 line
// numbers, then how many more).
std::string LeftOutWarning(const std::string& source, const std::string& why,
                           const std::vector<int>& lines);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_
