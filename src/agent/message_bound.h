// How much parsing a rank's message would cost, found before parsing it
// (issue #33 F7: an empty OpRecord is 2 bytes on the wire and ~300 in
// memory, so a 4 MiB gRPC message of them parsed into ~643 MB and a 16 MiB
// shared-memory ring message into 2.5 GB, before any record cap applied).
//
// CountMessageObjects counts the message objects a parse would allocate
// (every field of message type, at any depth) with the wire walk the
// controller's batch bound uses too (pitstop/wire_cost.h), stopping as soon
// as the count passes the limit: its own work is bounded by the bytes and
// the limit, and it allocates nothing.
//
// Thread-compatible (no state).
#ifndef PITSTOP_AGENT_MESSAGE_BOUND_H_
#define PITSTOP_AGENT_MESSAGE_BOUND_H_

#include <cstdint>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "pitstop/wire_cost.h"

namespace pitstop::agent {

// Message objects (records, communicator events, their nested messages) a
// StreamTelemetryRequest may make the agent allocate. The library's batch
// is at most 4096 records plus the communicator events of a batch (two
// objects each); 32768 leaves room for both and caps an adversarial
// message at ~10 MB parsed.
inline constexpr uint64_t kMaxMessageObjects = 32768;

// kWithin (count <= max), kTooMany (refuse without parsing), kMalformed:
// the shared wire walk's outcome.
using MessageBound = WireCostResult;

// Counts the message objects parsing `in` (to its end or current limit) as
// `type` would allocate. `*count` is what was counted (past `max` by one
// when kTooMany).
MessageBound CountMessageObjects(google::protobuf::io::CodedInputStream* in,
                                 const google::protobuf::Descriptor* type,
                                 uint64_t max, uint64_t* count);
// The same over `size` bytes at `data`.
MessageBound CountMessageObjects(const void* data, size_t size,
                                 const google::protobuf::Descriptor* type,
                                 uint64_t max, uint64_t* count);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_MESSAGE_BOUND_H_
