// Element-wise reductions of the CPU NCCL backend: one function per
// (datatype, op), in the shape gloo's collectives take
// (out[i] = a[i] OP b[i]). Half and bfloat16 are widened to float, reduced
// and rounded back (round to nearest even), like a GPU kernel would.
//
// Pure functions; any thread.
#ifndef PITSTOP_SRC_NCCL_CPU_REDUCE_OPS_H_
#define PITSTOP_SRC_NCCL_CPU_REDUCE_OPS_H_

#include <cstddef>

#include "src/nccl/cpu/nccl_api.h"

namespace pitstop::cpunccl {

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// Bytes per element; 0 for an unknown datatype.
size_t DataTypeSize(ncclDataType_t type);
// NCCL's profiler string for a datatype ("ncclFloat32", ...).
const char* DataTypeName(ncclDataType_t type);
// The reduction for (type, op); nullptr if unsupported (fp8 types, ops
// outside Sum..Avg). ncclAvg reduces as a sum; divide with DivideInPlace.
ReduceFn ReduceFor(ncclDataType_t type, ncclRedOp_t op);
// buf[i] /= divisor, in the datatype (integers truncate, like NCCL's Avg).
void DivideInPlace(void* buf, size_t n, ncclDataType_t type, int divisor);

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_REDUCE_OPS_H_
