#include "tools/pitstopctl/utf8_check.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace pitstop::ctl {
namespace {

using google::protobuf::FieldDescriptor;

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

std::string Bad(const std::string& field, absl::string_view s, size_t at) {
  return absl::StrCat(field, ": byte ",
                      static_cast<int>(static_cast<unsigned char>(s[at])),
                      " at offset ", at, " is not UTF-8");
}

std::string Walk(const google::protobuf::Message& m, const std::string& path) {
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = path.empty() ? f->name() : path + "." + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at =
          f->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      std::string bad;
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        const std::string v = f->is_repeated() ? r->GetRepeatedString(m, f, i)
                                               : r->GetString(m, f);
        const size_t off = FirstNonUtf8(v);
        if (off != absl::string_view::npos) bad = Bad(at, v, off);
      } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
        bad = Walk(f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                                    : r->GetMessage(m, f),
                   at);
      }
      if (!bad.empty()) return bad;
    }
  }
  return "";
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

std::string NonUtf8Field(const google::protobuf::Message& m) {
  return Walk(m, "");
}

}  // namespace pitstop::ctl
