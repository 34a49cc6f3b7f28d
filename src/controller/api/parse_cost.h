// What a serialized protobuf message costs once parsed, found before
// parsing it (issue #33, F6): an empty CollectiveSummary is 2 bytes on the
// wire and ~110 times that once parsed (a heap object and a pointer slot),
// so an 8 MiB AgentLink batch of them took the controller to 916 MB. The
// record caps of the engine apply only after parsing; this bound applies
// before: AgentLink batches whose estimate passes kMaxParsedBatchBytes are
// refused unparsed.
//
// The estimate is the shared wire walk's (pitstop/wire_cost.h): each
// nested message its prototype's SpaceUsedLong() plus its slot, strings
// their length plus a header, packed scalars their elements. It is an upper
// estimate for the messages pitstop sends (a busy agent's batch:
// docs/reliability.md, "Parse cost").
//
// Thread-safe (no state).
#ifndef PITSTOP_CONTROLLER_API_PARSE_COST_H_
#define PITSTOP_CONTROLLER_API_PARSE_COST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace pitstop::controller {

// The parse cost bound of one AgentLink batch. A busy agent's largest
// batch (8192 summaries with 32 connections each, progress of 64 ranks)
// costs ~20 MiB parsed (docs/reliability.md).
inline constexpr uint64_t kMaxParsedBatchBytes = uint64_t{128} << 20;

// Estimated bytes a message of `type` read from `in` takes once parsed.
// InvalidArgument naming the byte offset when the wire format is malformed
// or nested deeper than 64 messages (the parse would fail too).
absl::StatusOr<uint64_t> ParsedBytes(
    const google::protobuf::Descriptor* type,
    google::protobuf::io::ZeroCopyInputStream* in);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_PARSE_COST_H_
