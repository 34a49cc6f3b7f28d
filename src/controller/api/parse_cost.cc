#include "src/controller/api/parse_cost.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"

namespace pitstop::controller {
namespace {

namespace pb = google::protobuf;

constexpr int kMaxDepth = 64;
// Per string, bytes field or unknown field beside its bytes (a heap
// header and the field's slot), and per repeated message its slot.
constexpr uint64_t kFieldHeader = 32;
constexpr uint64_t kRepeatedSlot = 2 * sizeof(void*);

class CostWalker {
 public:
  explicit CostWalker(pb::io::CodedInputStream* in) : in_(in) {}

  // Walks one message of `d` up to the current limit.
  bool Walk(const pb::Descriptor* d, int depth) {
    if (depth > kMaxDepth) return false;
    bytes_ += ObjectSize(d);
    for (;;) {
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) return in_->BytesUntilLimit() <= 0 || depth == 0;
      const pb::FieldDescriptor* f = d->FindFieldByNumber(static_cast<int>(
          pb::internal::WireFormatLite::GetTagFieldNumber(tag)));
      const bool repeated = f != nullptr && f->is_repeated();
      if (f == nullptr) bytes_ += kFieldHeader;
      switch (pb::internal::WireFormatLite::GetTagWireType(tag)) {
        case pb::internal::WireFormatLite::WIRETYPE_VARINT: {
          uint64_t v;
          if (!in_->ReadVarint64(&v)) return false;
          if (repeated) bytes_ += 8;
          break;
        }
        case pb::internal::WireFormatLite::WIRETYPE_FIXED64:
          if (!in_->Skip(8)) return false;
          if (repeated) bytes_ += 8;
          break;
        case pb::internal::WireFormatLite::WIRETYPE_FIXED32:
          if (!in_->Skip(4)) return false;
          if (repeated) bytes_ += 8;
          break;
        case pb::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
          if (!LengthDelimited(f, repeated, depth)) return false;
          break;
        default:  // groups: none in pitstop's protos
          return false;
      }
    }
  }

  uint64_t bytes() const { return bytes_; }

 private:
  bool LengthDelimited(const pb::FieldDescriptor* f, bool repeated, int depth) {
    uint32_t len;
    if (!in_->ReadVarint32(&len)) return false;
    if (f != nullptr && f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (repeated) bytes_ += kRepeatedSlot;
      const pb::io::CodedInputStream::Limit limit = in_->PushLimit(len);
      if (!Walk(f->message_type(), depth + 1)) return false;
      if (in_->BytesUntilLimit() != 0) return false;
      in_->PopLimit(limit);
      return true;
    }
    if (f != nullptr && f->is_packable()) return Packed(f, len);
    bytes_ += len + kFieldHeader;  // a string, bytes or unknown field
    return in_->Skip(static_cast<int>(len));
  }

  // Packed scalars: their element count times the element's size, twice
  // (a RepeatedField grows by doubling; a varint's count is the number of
  // its last bytes, high bit clear).
  bool Packed(const pb::FieldDescriptor* f, uint32_t len) {
    const int wire = WireSize(f);
    const uint64_t element = ElementSize(f);
    if (wire > 0) {  // fixed32 / fixed64 / float / double
      bytes_ += uint64_t{len} / wire * element * 2 + kFieldHeader;
      return in_->Skip(static_cast<int>(len));
    }
    uint64_t count = 0;
    char chunk[4096];
    while (len > 0) {
      const uint32_t n = std::min<uint32_t>(len, sizeof(chunk));
      if (!in_->ReadRaw(chunk, static_cast<int>(n))) return false;
      for (uint32_t i = 0; i < n; ++i) count += (chunk[i] & 0x80) == 0;
      len -= n;
    }
    bytes_ += count * element * 2 + kFieldHeader;
    return true;
  }

  // Bytes of one fixed-size element on the wire; 0 for varints.
  static int WireSize(const pb::FieldDescriptor* f) {
    switch (f->type()) {
      case pb::FieldDescriptor::TYPE_FIXED32:
      case pb::FieldDescriptor::TYPE_SFIXED32:
      case pb::FieldDescriptor::TYPE_FLOAT:
        return 4;
      case pb::FieldDescriptor::TYPE_FIXED64:
      case pb::FieldDescriptor::TYPE_SFIXED64:
      case pb::FieldDescriptor::TYPE_DOUBLE:
        return 8;
      default:
        return 0;
    }
  }

  // Bytes of one element parsed (RepeatedField<T>).
  static uint64_t ElementSize(const pb::FieldDescriptor* f) {
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        return 1;
      case pb::FieldDescriptor::CPPTYPE_INT64:
      case pb::FieldDescriptor::CPPTYPE_UINT64:
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        return 8;
      default:
        return 4;
    }
  }

  uint64_t ObjectSize(const pb::Descriptor* d) {
    auto [it, fresh] = sizes_.try_emplace(d, kFieldHeader);
    if (fresh && !d->options().map_entry()) {
      const pb::Message* proto =
          pb::MessageFactory::generated_factory()->GetPrototype(d);
      it->second = proto != nullptr ? proto->SpaceUsedLong() : kFieldHeader;
    }
    return it->second;
  }

  pb::io::CodedInputStream* const in_;
  uint64_t bytes_ = 0;
  absl::flat_hash_map<const pb::Descriptor*, uint64_t> sizes_;
};

}  // namespace

absl::StatusOr<uint64_t> ParsedBytes(const pb::Descriptor* type,
                                     pb::io::ZeroCopyInputStream* in) {
  pb::io::CodedInputStream coded(in);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  CostWalker walker(&coded);
  if (!walker.Walk(type, 0) || !coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        absl::StrCat(type->full_name(), ": malformed wire format near byte ",
                     coded.CurrentPosition()));
  }
  return walker.bytes();
}

}  // namespace pitstop::controller
