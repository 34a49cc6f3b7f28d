#include "src/torch_backend/tensor_args.h"

#include <c10/util/Exception.h>

#include "src/torch_backend/nccl_comm.h"

namespace pitstop::torch_backend {

ncclDataType_t NcclType(const char* op, const std::string& arg,
                        at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    default:
      break;
  }
  TORCH_CHECK(false, "pitstop_nccl ", op, ": ", arg, " has dtype ", type,
              ", which NCCL does not carry (supported: float32, float64, "
              "float16, bfloat16, int8, uint8, int32, int64)");
}

ncclRedOp_t NcclRedOp(const char* op, const c10d::ReduceOp& reduce_op,
                      int nccl_version) {
  switch (reduce_op.op_) {
    case c10d::ReduceOp::SUM:
      return ncclSum;
    case c10d::ReduceOp::PRODUCT:
      return ncclProd;
    case c10d::ReduceOp::MIN:
      return ncclMin;
    case c10d::ReduceOp::MAX:
      return ncclMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(nccl_version >= kNcclAvgVersion, "pitstop_nccl ", op,
                  ": ReduceOp.AVG needs NCCL >= 2.10 (ncclAvg); the loaded "
                  "libnccl.so.2 reports version ",
                  nccl_version);
      return ncclAvg;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(false, "pitstop_nccl ", op,
                  ": bitwise ReduceOp (BAND, BOR, BXOR) is not supported: "
                  "NCCL has no bitwise reductions");
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(false, "pitstop_nccl ", op,
                  ": ReduceOp.PREMUL_SUM is not supported by this backend");
    default:
      break;
  }
  TORCH_CHECK(false, "pitstop_nccl ", op, ": unknown ReduceOp ",
              static_cast<int>(reduce_op.op_));
}

ncclDataType_t CheckTensor(const char* op, const std::string& arg,
                           const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "pitstop_nccl ", op, ": ", arg, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), "pitstop_nccl ", op, ": ", arg, " is on ",
              t.device(),
              "; this backend runs on CPU tensors (with GPUs, use torch's "
              "own 'nccl' backend)");
  TORCH_CHECK(t.layout() == at::kStrided, "pitstop_nccl ", op, ": ", arg,
              " has layout ", t.layout(), "; only dense tensors are supported");
  TORCH_CHECK(t.is_contiguous(), "pitstop_nccl ", op, ": ", arg,
              " is not contiguous (call .contiguous() first)");
  return NcclType(op, arg, t.scalar_type());
}

void CheckLike(const char* op, const std::string& arg, const at::Tensor& t,
               const std::string& ref_name, const at::Tensor& ref) {
  CheckTensor(op, arg, t);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "pitstop_nccl ", op, ": ",
              arg, " has dtype ", t.scalar_type(), ", expected ",
              ref.scalar_type(), " (", ref_name, "'s)");
  TORCH_CHECK(t.numel() == ref.numel(), "pitstop_nccl ", op, ": ", arg, " has ",
              t.numel(), " elements, expected ", ref.numel(), " (", ref_name,
              "'s)");
}

const at::Tensor& CheckSingle(const char* op, const std::string& arg,
                              const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "pitstop_nccl ", op, ": ", arg,
              " must hold exactly 1 tensor (one device per process), got ",
              tensors.size());
  CheckTensor(op, arg + "[0]", tensors[0]);
  return tensors[0];
}

void CheckPerRank(const char* op, const std::string& arg,
                  const std::vector<at::Tensor>& tensors, int n,
                  const std::string& ref_name, const at::Tensor& ref) {
  TORCH_CHECK(tensors.size() == static_cast<size_t>(n), "pitstop_nccl ", op,
              ": ", arg, " must hold one tensor per rank (", n, "), got ",
              tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckLike(op, arg + "[" + std::to_string(i) + "]", tensors[i], ref_name,
              ref);
  }
}

void CheckRank(const char* op, const char* arg, int64_t rank, int size) {
  TORCH_CHECK(rank >= 0 && rank < size, "pitstop_nccl ", op, ": ", arg, " ",
              rank, " is not a rank of this group (size ", size, ")");
}

}  // namespace pitstop::torch_backend
