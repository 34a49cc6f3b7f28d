// Argument checks of the torch backend's collectives and the mapping of
// torch dtypes and reduce ops to NCCL's. Every failure is a c10::Error
// (RuntimeError in Python) that names the backend, the collective and the
// argument, e.g. "pitstop_nccl allgather: output_tensor_lists[0][2] has
// dtype Double, expected Float (the input's)".
//
// Threads: pure functions, any thread.
#ifndef PITSTOP_SRC_TORCH_BACKEND_TENSOR_ARGS_H_
#define PITSTOP_SRC_TORCH_BACKEND_TENSOR_ARGS_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "src/torch_backend/nccl_api.h"

namespace pitstop::torch_backend {

// float32/64/16, bfloat16, int8, uint8, int32, int64; anything else (bool,
// int16, complex, quantized) is refused naming the dtype.
ncclDataType_t NcclType(const char* op, const std::string& arg,
                        at::ScalarType type);
// SUM, PRODUCT, MIN, MAX, AVG (AVG needs NCCL >= 2.10: `nccl_version`).
// BAND/BOR/BXOR (NCCL has no bitwise reductions) and PREMUL_SUM are
// refused.
ncclRedOp_t NcclRedOp(const char* op, const c10d::ReduceOp& reduce_op,
                      int nccl_version);

// Defined, on the CPU, dense (strided) and contiguous; returns its NCCL
// datatype.
ncclDataType_t CheckTensor(const char* op, const std::string& arg,
                           const at::Tensor& t);
// Same dtype and number of elements as `ref` (named `ref_name`).
void CheckLike(const char* op, const std::string& arg, const at::Tensor& t,
               const std::string& ref_name, const at::Tensor& ref);
// Exactly one tensor (one device per process): returns it, checked.
const at::Tensor& CheckSingle(const char* op, const std::string& arg,
                              const std::vector<at::Tensor>& tensors);
// A list of exactly `n` tensors (one per rank), each like `ref`.
void CheckPerRank(const char* op, const std::string& arg,
                  const std::vector<at::Tensor>& tensors, int n,
                  const std::string& ref_name, const at::Tensor& ref);
// A rank of the group (root, peer).
void CheckRank(const char* op, const char* arg, int64_t rank, int size);

// Bytes of a checked tensor.
inline size_t Bytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

}  // namespace pitstop::torch_backend

#endif  // PITSTOP_SRC_TORCH_BACKEND_TENSOR_ARGS_H_
