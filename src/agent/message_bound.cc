#include "src/agent/message_bound.h"

#include "pitstop/wire_cost.h"

namespace pitstop::agent {
namespace {

// Deeper nesting than any of our messages has is malformed.
constexpr int kMaxDepth = 32;

}  // namespace

MessageBound CountMessageObjects(google::protobuf::io::CodedInputStream* in,
                                 const google::protobuf::Descriptor* type,
                                 uint64_t max, uint64_t* count) {
  WireCostOptions options;
  options.max_objects = max;
  options.max_depth = kMaxDepth;
  WireCost cost;
  const MessageBound r = MeasureWireCost(in, type, options, &cost);
  *count = cost.objects;
  return r;
}

MessageBound CountMessageObjects(const void* data, size_t size,
                                 const google::protobuf::Descriptor* type,
                                 uint64_t max, uint64_t* count) {
  if (size > static_cast<size_t>(INT32_MAX)) return MessageBound::kMalformed;
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data),
                                            static_cast<int>(size));
  return CountMessageObjects(&in, type, max, count);
}

}  // namespace pitstop::agent
