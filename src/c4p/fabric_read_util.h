// Helpers shared by the fabric readers (fabric_io.cc, fabric_csv.cc,
// ibnetdiscover.cc): errors naming file and line and summarising the lines
// a reader left out.
#ifndef PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_
#define PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop::c4p {

// The most cables a fabric may be built with (~2.7 GB of links), and the
// most entries of its routing table (ToRs x nodes, two bytes each: 4 GiB).
inline constexpr int64_t kMaxCables = int64_t{1} << 25;
inline constexpr int64_t kMaxRouteEntries = int64_t{1} << 31;

// InvalidArgument "<what> make <cables> cables and a routing table of
// <routes> entries; at most ... (<advice>)" when a fabric about to be built
// would pass kMaxCables or kMaxRouteEntries: counts each in range can
// multiply into a fabric no run can hold (before, minutes of silence).
absl::Status CheckBuildSize(const std::string& what, int64_t cables,
                            int64_t routes, const std::string& advice);

// Standard input to its end, at most `max` bytes (a pipe too:
// `--topology -`); InvalidArgument naming standard input beyond or on a
// read error.
absl::StatusOr<std::string> ReadStdin(uint64_t max);

// The same from an open descriptor (`name` in the errors) and from a named
// pipe: process substitution (`--topology <(zcat f.gz)`, a /dev/fd/N pipe)
// and mkfifo pipes are streams as standard input is, read to their end.
absl::StatusOr<std::string> ReadStream(int fd, const std::string& name,
                                       uint64_t max);
absl::StatusOr<std::string> ReadFifo(const std::string& path, uint64_t max);

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

// One CSV record as RFC 4180 writes it: fields separated by commas; a field
// in double quotes may hold commas, and "" inside it is one quote (what a
// spreadsheet or Python's csv module writes around a name). Whitespace
// around a field, outside its quotes, is dropped. False, with *why, when a
// quote is not closed on the line or text follows a closing quote.
bool SplitCsvRecord(absl::string_view line, std::vector<std::string>* fields,
                    std::string* why);

// The CSV record that starts on lines[first], split as SplitCsvRecord
// does. RFC 4180 lets a quoted field hold a line break: when a quote opened
// on lines[first] closes on a later line and the lines up to it make one
// well-formed record, that is the record (its fields keep the "\n"), and
// *span is the lines it takes. Otherwise the record is lines[first] alone
// (*span 1), so a quote left open by mistake does not swallow the rows after
// it.
bool SplitCsvRecordAt(const std::vector<std::string>& lines, size_t first,
                      std::vector<std::string>* fields, std::string* why,
                      size_t* span);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_C4P_FABRIC_READ_UTIL_H_
