// What parsing a serialized protobuf message would cost, found from its
// bytes before parsing it (issue #33 F6, F7): a message field costs a heap
// object however few bytes it has on the wire (an empty record is 2 bytes
// and ~100 times that parsed), so record caps applied after parsing bound
// nothing. The agent bounds rank messages by the objects they would make,
// the controller AgentLink batches by their estimated parsed bytes; both
// read the same walk.
//
// MeasureWireCost walks the wire format with the message's descriptor and
// allocates nothing but, with estimate_bytes, a small cache of prototype
// sizes: each nested message is one object and, estimated, its
// prototype's SpaceUsedLong() plus two pointer slots when repeated (a
// RepeatedPtrField grows by doubling); strings and unknown fields their
// length plus a header; packed scalars twice their element count times the
// element's size; unpacked repeated scalars 8 bytes each. It stops as soon
// as the objects pass max_objects, so its own work is bounded by the bytes
// and the limit.
//
// Thread-compatible (no state).
#ifndef PITSTOP_WIRE_COST_H_
#define PITSTOP_WIRE_COST_H_

#include <cstdint>
#include <limits>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"

namespace pitstop {

struct WireCostOptions {
  // kTooMany once more message objects than this would be made.
  uint64_t max_objects = std::numeric_limits<uint64_t>::max();
  // Also estimate the parsed bytes (WireCost::bytes).
  bool estimate_bytes = false;
  // Deeper nesting is malformed (and bounds the recursion).
  int max_depth = 64;
};

struct WireCost {
  uint64_t objects = 0;  // nested messages (past max_objects by one)
  uint64_t bytes = 0;    // estimated parsed bytes, with estimate_bytes
};

enum class WireCostResult {
  kWithin,     // objects <= max_objects
  kTooMany,    // more objects than max_objects: refuse without parsing
  kMalformed,  // not this message's wire format (a parse would fail too)
};

// Walks one message of `type` from `in` to its end (or current limit).
WireCostResult MeasureWireCost(google::protobuf::io::CodedInputStream* in,
                               const google::protobuf::Descriptor* type,
                               const WireCostOptions& options, WireCost* cost);

}  // namespace pitstop

#endif  // PITSTOP_WIRE_COST_H_
