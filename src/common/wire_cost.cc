#include "pitstop/wire_cost.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"

namespace pitstop {
namespace {

namespace pb = google::protobuf;
using WireFormat = pb::internal::WireFormatLite;
using Result = WireCostResult;

// Per string, bytes field or unknown field beside its bytes (a heap
// header and the field's slot), and per repeated message its slot.
constexpr uint64_t kFieldHeader = 32;
constexpr uint64_t kRepeatedSlot = 2 * sizeof(void*);

// Bytes of one fixed-size element on the wire; 0 for varints.
int WireSize(const pb::FieldDescriptor* f) {
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
uint64_t ElementSize(const pb::FieldDescriptor* f) {
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

class Walker {
 public:
  Walker(pb::io::CodedInputStream* in, const WireCostOptions& options,
         WireCost* cost)
      : in_(in), options_(options), cost_(cost) {}

  // Walks one message of `d` up to the current limit.
  Result Walk(const pb::Descriptor* d, int depth) {
    if (depth > options_.max_depth) return Result::kMalformed;
    if (options_.estimate_bytes) cost_->bytes += ObjectSize(d);
    for (;;) {
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) {
        // The end of the input or the current limit, or a bad tag.
        return in_->ConsumedEntireMessage() ? Result::kWithin
                                            : Result::kMalformed;
      }
      const pb::FieldDescriptor* f = d->FindFieldByNumber(
          static_cast<int>(WireFormat::GetTagFieldNumber(tag)));
      const bool repeated = f != nullptr && f->is_repeated();
      if (f == nullptr) Add(kFieldHeader);
      bool ok = true;
      switch (WireFormat::GetTagWireType(tag)) {
        case WireFormat::WIRETYPE_VARINT: {
          uint64_t v;
          ok = in_->ReadVarint64(&v);
          break;
        }
        case WireFormat::WIRETYPE_FIXED64:
          ok = in_->Skip(8);
          break;
        case WireFormat::WIRETYPE_FIXED32:
          ok = in_->Skip(4);
          break;
        case WireFormat::WIRETYPE_LENGTH_DELIMITED: {
          const Result r = LengthDelimited(f, repeated, depth);
          if (r != Result::kWithin) return r;
          continue;
        }
        default:  // groups: none in pitstop's protos
          return Result::kMalformed;
      }
      if (!ok) return Result::kMalformed;
      if (repeated) Add(8);  // an unpacked repeated scalar
    }
  }

 private:
  void Add(uint64_t bytes) {
    if (options_.estimate_bytes) cost_->bytes += bytes;
  }

  Result LengthDelimited(const pb::FieldDescriptor* f, bool repeated,
                         int depth) {
    uint32_t len;
    if (!in_->ReadVarint32(&len)) return Result::kMalformed;
    if (f != nullptr && f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (++cost_->objects > options_.max_objects) return Result::kTooMany;
      if (repeated) Add(kRepeatedSlot);
      const pb::io::CodedInputStream::Limit limit =
          in_->PushLimit(static_cast<int>(len));
      const Result inner = Walk(f->message_type(), depth + 1);
      if (inner != Result::kWithin) return inner;
      in_->PopLimit(limit);
      return Result::kWithin;
    }
    if (options_.estimate_bytes && f != nullptr && f->is_packable()) {
      return Packed(f, len) ? Result::kWithin : Result::kMalformed;
    }
    Add(len + kFieldHeader);  // a string, bytes or unknown field
    return in_->Skip(static_cast<int>(len)) ? Result::kWithin
                                            : Result::kMalformed;
  }

  // Packed scalars: their element count times the element's size, twice
  // (a RepeatedField grows by doubling; a varint's count is the number of
  // its last bytes, high bit clear).
  bool Packed(const pb::FieldDescriptor* f, uint32_t len) {
    const int wire = WireSize(f);
    const uint64_t element = ElementSize(f);
    if (wire > 0) {  // fixed32 / fixed64 / float / double
      Add(uint64_t{len} / wire * element * 2 + kFieldHeader);
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
    Add(count * element * 2 + kFieldHeader);
    return true;
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
  const WireCostOptions& options_;
  WireCost* const cost_;
  absl::flat_hash_map<const pb::Descriptor*, uint64_t> sizes_;
};

}  // namespace

WireCostResult MeasureWireCost(pb::io::CodedInputStream* in,
                               const pb::Descriptor* type,
                               const WireCostOptions& options, WireCost* cost) {
  *cost = WireCost{};
  return Walker(in, options, cost).Walk(type, 0);
}

}  // namespace pitstop
