#include "src/agent/message_bound.h"

#include "google/protobuf/wire_format_lite.h"

namespace pitstop::agent {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using WireType = google::protobuf::internal::WireFormatLite::WireType;

// Deeper nesting than any of our messages has is malformed (and bounds the
// recursion).
constexpr int kMaxDepth = 32;

MessageBound Walk(CodedInputStream* in, const Descriptor* type, uint64_t max,
                  uint64_t* count, int depth) {
  if (depth > kMaxDepth) return MessageBound::kMalformed;
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      // End of input (or of the current limit), or a bad tag.
      return in->ConsumedEntireMessage() ? MessageBound::kWithin
                                         : MessageBound::kMalformed;
    }
    const auto wire = static_cast<WireType>(tag & 7);
    bool ok = true;
    switch (wire) {
      case WireType::WIRETYPE_VARINT: {
        uint64_t v;
        ok = in->ReadVarint64(&v);
        break;
      }
      case WireType::WIRETYPE_FIXED64:
        ok = in->Skip(8);
        break;
      case WireType::WIRETYPE_FIXED32:
        ok = in->Skip(4);
        break;
      case WireType::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t len;
        if (!in->ReadVarint32(&len)) return MessageBound::kMalformed;
        const FieldDescriptor* f =
            type == nullptr
                ? nullptr
                : type->FindFieldByNumber(static_cast<int>(tag >> 3));
        if (f == nullptr || f->type() != FieldDescriptor::TYPE_MESSAGE) {
          ok = in->Skip(static_cast<int>(len));
          break;
        }
        if (++*count > max) return MessageBound::kTooMany;
        const CodedInputStream::Limit limit =
            in->PushLimit(static_cast<int>(len));
        const MessageBound inner =
            Walk(in, f->message_type(), max, count, depth + 1);
        if (inner != MessageBound::kWithin) return inner;
        in->PopLimit(limit);
        break;
      }
      default:  // groups: none of our messages has them
        return MessageBound::kMalformed;
    }
    if (!ok) return MessageBound::kMalformed;
  }
}

}  // namespace

MessageBound CountMessageObjects(CodedInputStream* in, const Descriptor* type,
                                 uint64_t max, uint64_t* count) {
  *count = 0;
  return Walk(in, type, max, count, 0);
}

MessageBound CountMessageObjects(const void* data, size_t size,
                                 const Descriptor* type, uint64_t max,
                                 uint64_t* count) {
  if (size > static_cast<size_t>(INT32_MAX)) return MessageBound::kMalformed;
  CodedInputStream in(static_cast<const uint8_t*>(data),
                      static_cast<int>(size));
  return CountMessageObjects(&in, type, max, count);
}

}  // namespace pitstop::agent
