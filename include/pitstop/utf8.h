// Well-formed UTF-8, as JSON and protobuf string fields require. Names from
// fabric files (pitstop plan) and pitstopctl's arguments are checked with it
// before they are written or sent. Any thread; no state.
#ifndef PITSTOP_UTF8_H_
#define PITSTOP_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace pitstop {

// The offset of the first byte of `s` that is not part of well-formed UTF-8
// (RFC 3629, Unicode's table 3-7: no overlong forms, no surrogates, nothing
// above U+10FFFF), or absl::string_view::npos when all of it is.
size_t FirstNonUtf8(absl::string_view s);

inline bool IsUtf8(absl::string_view s) {
  return FirstNonUtf8(s) == absl::string_view::npos;
}

}  // namespace pitstop

#endif  // PITSTOP_UTF8_H_
