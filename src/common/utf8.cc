#include "pitstop/utf8.h"

namespace pitstop {
namespace {

// The bytes a lead byte `c` takes after it, and the range of the first of
// them; -1 for a byte no character starts with.
int Trailing(unsigned char c, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) return 1;
  if (c >= 0xe0 && c <= 0xef) {
    if (c == 0xe0) *lo = 0xa0;  // overlong
    if (c == 0xed) *hi = 0x9f;  // surrogates
    return 2;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (c == 0xf0) *lo = 0x90;  // overlong
    if (c == 0xf4) *hi = 0x8f;  // above U+10FFFF
    return 3;
  }
  return -1;
}

}  // namespace

size_t FirstNonUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    unsigned char lo = 0, hi = 0;
    const int n = Trailing(c, &lo, &hi);
    if (n < 0 || s.size() - i <= static_cast<size_t>(n)) return i;
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) return i;
    }
    i += n + 1;
  }
  return absl::string_view::npos;
}

}  // namespace pitstop
