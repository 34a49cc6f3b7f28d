// The CPU NCCL backend's all-reduce: gloo's ring (gloo::allreduce with
// Algorithm::RING, Debian's libgloo 0.0~git20220518) element for element,
// over RingTransport instead of gloo's pairs (ring_transport.h says why).
//
// Same results, bit for bit: every element is reduced by the same ranks in
// the same order with the same operands as in gloo's ring, because the
// buffer is cut into the same n chunks (gloo's segment layout, RingLayout)
// and each chunk travels the same way round. Reductions are element-wise,
// so how the bytes of a chunk are split into messages does not matter:
//   reduce-scatter, step k = 0..n-2: send chunk (r+1+k) to rank r-1, receive
//     chunk (r+2+k) from rank r+1 and reduce it in as out = fn(out, received);
//     afterwards rank r holds chunk r fully reduced;
//   all-gather, step k = 0..n-2: send chunk (r+k), receive chunk (r+1+k).
// ring_allreduce_test checks this against libgloo itself on random data
// (NaNs and signed zeros included) for 2..5 ranks.
//
// Thread safety: one thread per communicator (NCCL's rule).
#ifndef PITSTOP_SRC_NCCL_CPU_RING_ALLREDUCE_H_
#define PITSTOP_SRC_NCCL_CPU_RING_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "src/nccl/cpu/reduce_ops.h"
#include "src/nccl/cpu/ring_transport.h"

namespace pitstop::cpunccl {

// gloo's ring cuts `total_bytes` into n * segments_per_rank segments of
// segment_bytes (a whole number of elements, at most max_segment_bytes
// unless one element is larger, and at least 2 segments per rank); chunk c
// is segments [c * segments_per_rank, (c + 1) * segments_per_rank), clipped
// to the buffer (the last chunks may be short or empty).
struct RingLayout {
  RingLayout(size_t total_bytes, size_t element_bytes, int n_ranks,
             size_t max_segment_bytes = kGlooMaxSegmentBytes);
  size_t Offset(int chunk) const;
  size_t Length(int chunk) const;

  // gloo::AllreduceOptions' default maxSegmentSize.
  static constexpr size_t kGlooMaxSegmentBytes = 1 << 20;

  size_t total_bytes;
  size_t chunk_bytes;  // segments_per_rank * segment_bytes
};

// What each step's message starts with: a mismatched call (other count,
// datatype or op, or a rank one collective behind) fails with
// InvalidArgument instead of mixing up data.
struct RingStepHeader {
  uint32_t magic;
  uint32_t step;
  uint64_t seq;  // the communicator's all-reduce count
  uint64_t total_bytes;
  uint32_t datatype;
  uint32_t op;
};
static_assert(sizeof(RingStepHeader) == 32, "32 bytes on the wire");

inline constexpr size_t kRingWindowBytes = 4 << 20;

struct RingAllReduceArgs {
  void* buf = nullptr;  // in place: input and output
  size_t count = 0;
  size_t element_bytes = 0;
  ReduceFn fn = nullptr;
  uint32_t datatype = 0;  // for the header only
  uint32_t op = 0;        // for the header only
  uint64_t seq = 0;
  int rank = 0;
  int n_ranks = 1;
  // A reduce-scatter step moves a chunk in messages of at most this many
  // bytes (a multiple of every element size), so `scratch` stays small.
  size_t window_bytes = kRingWindowBytes;
};

// Reduces args.buf in place across the ring. `scratch` holds one received
// window (at most args.window_bytes) and is kept for the next call.
// Transport errors as RingTransport::Exchange; InvalidArgument for a
// mismatched call (the connections are then out of step: close them).
absl::Status RingAllReduce(RingTransport& transport,
                           const RingAllReduceArgs& args,
                           std::vector<char>* scratch);

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_RING_ALLREDUCE_H_
