#include "tools/pitstopctl/utf8_check.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "pitstop/utf8.h"

namespace pitstop::ctl {
namespace {

using google::protobuf::FieldDescriptor;

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

std::string NonUtf8Field(const google::protobuf::Message& m) {
  return Walk(m, "");
}

}  // namespace pitstop::ctl
