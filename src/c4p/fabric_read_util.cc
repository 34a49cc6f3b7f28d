#include "src/c4p/fabric_read_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pitstop::c4p {

absl::Status LineError(const std::string& source, int line,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", line, ": ", what));
}

absl::Status CheckBuildSize(const std::string& what, int64_t cables,
                            int64_t routes, const std::string& advice) {
  if (cables <= kMaxCables && routes <= kMaxRouteEntries) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " make ", cables, " cables and a routing table of ",
                   routes, " entries; at most ", kMaxCables, " and ",
                   kMaxRouteEntries, " (", advice, ")"));
}

absl::StatusOr<std::string> ReadStream(int fd, const std::string& name,
                                       uint64_t max) {
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("fabric: ", name, ": ", std::strerror(errno)));
    }
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("fabric: ", name, ": larger than ", max, " bytes"));
    }
  }
}

absl::StatusOr<std::string> ReadStdin(uint64_t max) {
  return ReadStream(STDIN_FILENO, "standard input", max);
}

absl::StatusOr<std::string> ReadFifo(const std::string& path, uint64_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric: ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::string> text = ReadStream(fd, path, max);
  ::close(fd);
  return text;
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

namespace {

// Reads the quoted field that starts at line[*at] (a quote) into *out and
// moves *at past its closing quote. False when the line ends first.
bool ReadQuoted(absl::string_view line, size_t* at, std::string* out) {
  for (size_t i = *at + 1; i < line.size(); ++i) {
    if (line[i] != '"') {
      out->push_back(line[i]);
    } else if (i + 1 < line.size() && line[i + 1] == '"') {
      out->push_back('"');
      ++i;
    } else {
      *at = i + 1;
      return true;
    }
  }
  return false;
}

}  // namespace

bool SplitCsvRecord(absl::string_view line, std::vector<std::string>* fields,
                    std::string* why) {
  fields->clear();
  size_t at = 0;
  while (true) {
    while (at < line.size() && absl::ascii_isspace(line[at])) ++at;
    std::string field;
    if (at < line.size() && line[at] == '"') {
      const size_t open = at;
      if (!ReadQuoted(line, &at, &field)) {
        *why = absl::StrCat("with a quote at column ", open + 1,
                            " not closed on its line");
        return false;
      }
      while (at < line.size() && absl::ascii_isspace(line[at])) ++at;
      if (at < line.size() && line[at] != ',') {
        *why =
            absl::StrCat("with text after a closing quote at column ", at + 1);
        return false;
      }
    } else {
      const size_t comma = std::min(line.find(',', at), line.size());
      // RFC 4180: a quote only encloses a field. Inside an unquoted one it
      // is a typo (`S1"`), which would otherwise name a switch of its own.
      const size_t quote = line.substr(at, comma - at).find('"');
      if (quote != absl::string_view::npos) {
        *why = absl::StrCat("with a quote inside an unquoted field at column ",
                            at + quote + 1);
        return false;
      }
      field = std::string(
          absl::StripTrailingAsciiWhitespace(line.substr(at, comma - at)));
      at = comma;
    }
    fields->push_back(std::move(field));
    if (at >= line.size()) return true;
    ++at;  // the comma
  }
}

namespace {

// Whether `line` leaves a quote open after `open` (whether one was open
// before it): each quote toggles, a doubled quote inside quotes twice.
bool QuoteOpenAfter(absl::string_view line, bool open) {
  for (char c : line) open ^= c == '"';
  return open;
}

}  // namespace

bool SplitCsvRecordAt(const std::vector<std::string>& lines, size_t first,
                      std::vector<std::string>* fields, std::string* why,
                      size_t* span) {
  *span = 1;
  if (SplitCsvRecord(lines[first], fields, why)) return true;
  bool open = QuoteOpenAfter(lines[first], false);
  std::string record = lines[first];
  for (size_t j = first + 1; open && j < lines.size(); ++j) {
    absl::StrAppend(&record, "\n", lines[j]);
    open = QuoteOpenAfter(lines[j], open);
    if (open) continue;
    std::string ignored;
    if (!SplitCsvRecord(record, fields, &ignored)) break;
    *span = j - first + 1;
    return true;
  }
  return SplitCsvRecord(lines[first], fields, why);
}

}  // namespace pitstop::c4p
