// The collectives on lists of tensors: all-gather and reduce-scatter (one
// NCCL call on a flat buffer, packed or unpacked around it), gather,
// scatter and all-to-all (an NCCL group of ncclSend/ncclRecv, as
// ProcessGroupNCCL does them; NCCL's own ncclGather/ncclScatter/
// ncclAlltoAll are 2.28+ and the CPU backend has none).
#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/torch_backend/process_group_pitstop_nccl.h"
#include "src/torch_backend/tensor_args.h"

namespace pitstop::torch_backend {
namespace {

// `parts` laid end to end into `flat` (checked: same dtype, sizes add up).
void Pack(const std::vector<at::Tensor>& parts, const at::Tensor& flat) {
  auto* out = static_cast<char*>(flat.data_ptr());
  for (const at::Tensor& p : parts) {
    std::memcpy(out, p.data_ptr(), Bytes(p));
    out += Bytes(p);
  }
}

void Unpack(const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  const auto* in = static_cast<const char*>(flat.data_ptr());
  for (const at::Tensor& p : parts) {
    std::memcpy(p.data_ptr(), in, Bytes(p));
    in += Bytes(p);
  }
}

void Copy(const at::Tensor& from, const at::Tensor& to) {
  std::memcpy(to.data_ptr(), from.data_ptr(), Bytes(from));
}

// Element offsets and counts of an all-to-all split along dim 0.
struct Splits {
  std::vector<size_t> offset;
  std::vector<size_t> count;
};

Splits SplitsOf(const char* arg, const at::Tensor& t,
                const std::vector<int64_t>& sizes, int n) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> rows_of = sizes;
  if (rows_of.empty()) {
    TORCH_CHECK(rows % n == 0, "pitstop_nccl alltoall_base: ", arg, " has ",
                rows,
                " rows in dim 0, not divisible by the group "
                "size ",
                n, " (pass split sizes)");
    rows_of.assign(n, rows / n);
  }
  TORCH_CHECK(rows_of.size() == static_cast<size_t>(n),
              "pitstop_nccl alltoall_base: ", arg, " split sizes have ",
              rows_of.size(), " entries, expected one per rank (", n, ")");
  Splits s;
  int64_t at_row = 0;
  for (int64_t r : rows_of) {
    TORCH_CHECK(r >= 0, "pitstop_nccl alltoall_base: ", arg,
                " has a negative split size ", r);
    s.offset.push_back(static_cast<size_t>(at_row * row_elems));
    s.count.push_back(static_cast<size_t>(r * row_elems));
    at_row += r;
  }
  TORCH_CHECK(at_row == rows, "pitstop_nccl alltoall_base: ", arg,
              " split sizes add up to ", at_row, " rows, the tensor has ",
              rows);
  return s;
}

char* At(const at::Tensor& t, size_t elems) {
  return static_cast<char*>(t.data_ptr()) + elems * t.element_size();
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::allgather(
    std::vector<std::vector<at::Tensor>>& output_tensors,
    std::vector<at::Tensor>& input_tensors,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  const at::Tensor& in = CheckSingle(op, "input_tensors", input_tensors);
  const ncclDataType_t type =
      NcclType(op, "input_tensors[0]", in.scalar_type());
  TORCH_CHECK(output_tensors.size() == 1,
              "pitstop_nccl allgather: "
              "output_tensors must hold one list (one device per process), "
              "got ",
              output_tensors.size());
  CheckPerRank(op, "output_tensors[0]", output_tensors[0], size_,
               "input_tensors[0]", in);
  const std::vector<at::Tensor> outs = output_tensors[0];
  const at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  QueuedOp q;
  q.issue = [in, flat, type](NcclComm& c) {
    return c.AllGather(in.data_ptr(), flat.data_ptr(), in.numel(), type);
  };
  q.post = [flat, outs] { Unpack(flat, outs); };
  return Enqueue(c10d::OpType::ALLGATHER, PITSTOP_NCCL_TITLE("allgather"),
                 std::move(q), input_tensors, outs, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  const ncclDataType_t type = CheckTensor(op, "input", input);
  CheckTensor(op, "output", output);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "pitstop_nccl ", op,
              ": output has dtype ", output.scalar_type(), ", input ",
              input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "pitstop_nccl ", op,
              ": output has ", output.numel(), " elements, expected ", size_,
              " x ", input.numel(), " (group size x input)");
  QueuedOp q;
  q.issue = [input, output, type](NcclComm& c) {
    return c.AllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                       type);
  };
  return Enqueue(c10d::OpType::_ALLGATHER_BASE,
                 PITSTOP_NCCL_TITLE("_allgather_base"), std::move(q), {input},
                 {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists,
    std::vector<at::Tensor>& input_tensors,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK(output_lists.size() == input_tensors.size(), "pitstop_nccl ", op,
              ": ", output_lists.size(), " output lists for ",
              input_tensors.size(), " input tensors");
  std::vector<ncclDataType_t> types;
  std::vector<at::Tensor> flats;
  std::vector<at::Tensor> all_outs;
  for (size_t i = 0; i < input_tensors.size(); ++i) {
    const std::string in_name = absl::StrCat("input_tensors[", i, "]");
    const at::Tensor& in = input_tensors[i];
    types.push_back(CheckTensor(op, in_name, in));
    CheckPerRank(op, absl::StrCat("output_lists[", i, "]"), output_lists[i],
                 size_, in_name, in);
    flats.push_back(at::empty({size_ * in.numel()}, in.options()));
    all_outs.insert(all_outs.end(), output_lists[i].begin(),
                    output_lists[i].end());
  }
  QueuedOp q;
  q.issue = [ins = input_tensors, flats, types](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      for (size_t i = 0; i < ins.size(); ++i) {
        if (absl::Status s = c.AllGather(ins[i].data_ptr(), flats[i].data_ptr(),
                                         ins[i].numel(), types[i]);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  };
  q.post = [flats, lists = output_lists] {
    for (size_t i = 0; i < flats.size(); ++i) Unpack(flats[i], lists[i]);
  };
  return Enqueue(c10d::OpType::ALLGATHER_COALESCED,
                 PITSTOP_NCCL_TITLE("allgather_coalesced"), std::move(q),
                 input_tensors, all_outs, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::gather(
    std::vector<std::vector<at::Tensor>>& output_tensors,
    std::vector<at::Tensor>& input_tensors, const c10d::GatherOptions& opts) {
  const char* op = "gather";
  const at::Tensor& in = CheckSingle(op, "input_tensors", input_tensors);
  const ncclDataType_t type =
      NcclType(op, "input_tensors[0]", in.scalar_type());
  CheckRank(op, "root rank", opts.rootRank, size_);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(output_tensors.size() == 1,
                "pitstop_nccl gather: "
                "output_tensors must hold one list on the root, got ",
                output_tensors.size());
    CheckPerRank(op, "output_tensors[0]", output_tensors[0], size_,
                 "input_tensors[0]", in);
    outs = output_tensors[0];
  } else {
    TORCH_CHECK(output_tensors.empty(),
                "pitstop_nccl gather: "
                "output_tensors must be empty on a rank that is not the root");
  }
  QueuedOp q;
  const int rank = rank_;
  const int n = size_;
  if (rank == root) q.pre = [in, outs, root] { Copy(in, outs[root]); };
  q.issue = [in, outs, type, root, rank, n](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      if (rank != root) return c.Send(in.data_ptr(), in.numel(), type, root);
      for (int r = 0; r < n; ++r) {
        if (r == root) continue;
        const at::Tensor& o = outs[r];
        if (absl::Status s = c.Recv(o.data_ptr(), o.numel(), type, r);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  };
  return Enqueue(c10d::OpType::GATHER, PITSTOP_NCCL_TITLE("gather"),
                 std::move(q), input_tensors, outs, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::scatter(
    std::vector<at::Tensor>& output_tensors,
    std::vector<std::vector<at::Tensor>>& input_tensors,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  const at::Tensor& out = CheckSingle(op, "output_tensors", output_tensors);
  const ncclDataType_t type =
      NcclType(op, "output_tensors[0]", out.scalar_type());
  CheckRank(op, "root rank", opts.rootRank, size_);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(input_tensors.size() == 1,
                "pitstop_nccl scatter: "
                "input_tensors must hold one list on the root, got ",
                input_tensors.size());
    CheckPerRank(op, "input_tensors[0]", input_tensors[0], size_,
                 "output_tensors[0]", out);
    ins = input_tensors[0];
  } else {
    TORCH_CHECK(input_tensors.empty(),
                "pitstop_nccl scatter: "
                "input_tensors must be empty on a rank that is not the root");
  }
  QueuedOp q;
  const int rank = rank_;
  const int n = size_;
  if (rank == root) q.pre = [ins, out, root] { Copy(ins[root], out); };
  q.issue = [ins, out, type, root, rank, n](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      if (rank != root) return c.Recv(out.data_ptr(), out.numel(), type, root);
      for (int r = 0; r < n; ++r) {
        if (r == root) continue;
        const at::Tensor& i = ins[r];
        if (absl::Status s = c.Send(i.data_ptr(), i.numel(), type, r);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  };
  return Enqueue(c10d::OpType::SCATTER, PITSTOP_NCCL_TITLE("scatter"),
                 std::move(q), ins, output_tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::reduce_scatter(
    std::vector<at::Tensor>& output_tensors,
    std::vector<std::vector<at::Tensor>>& input_tensors,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out = CheckSingle(op, "output_tensors", output_tensors);
  const ncclDataType_t type =
      NcclType(op, "output_tensors[0]", out.scalar_type());
  const ncclRedOp_t red = NcclRedOp(op, opts.reduceOp, nccl_version_);
  TORCH_CHECK(input_tensors.size() == 1,
              "pitstop_nccl reduce_scatter: "
              "input_tensors must hold one list (one device per process), "
              "got ",
              input_tensors.size());
  CheckPerRank(op, "input_tensors[0]", input_tensors[0], size_,
               "output_tensors[0]", out);
  const std::vector<at::Tensor> ins = input_tensors[0];
  const at::Tensor flat = at::empty({size_ * out.numel()}, out.options());
  QueuedOp q;
  q.pre = [ins, flat] { Pack(ins, flat); };
  q.issue = [flat, out, type, red](NcclComm& c) {
    return c.ReduceScatter(flat.data_ptr(), out.data_ptr(), out.numel(), type,
                           red);
  };
  return Enqueue(c10d::OpType::REDUCE_SCATTER,
                 PITSTOP_NCCL_TITLE("reduce_scatter"), std::move(q), ins,
                 output_tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "_reduce_scatter_base";
  const ncclDataType_t type = CheckTensor(op, "input", input);
  CheckTensor(op, "output", output);
  const ncclRedOp_t red = NcclRedOp(op, opts.reduceOp, nccl_version_);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "pitstop_nccl ", op,
              ": output has dtype ", output.scalar_type(), ", input ",
              input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "pitstop_nccl ", op,
              ": input has ", input.numel(), " elements, expected ", size_,
              " x ", output.numel(), " (group size x output)");
  QueuedOp q;
  q.issue = [input, output, type, red](NcclComm& c) {
    return c.ReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                           type, red);
  };
  return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE,
                 PITSTOP_NCCL_TITLE("_reduce_scatter_base"), std::move(q),
                 {input}, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  const ncclDataType_t type = CheckTensor(op, "input", input);
  CheckTensor(op, "output", output);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "pitstop_nccl ", op,
              ": output has dtype ", output.scalar_type(), ", input ",
              input.scalar_type());
  TORCH_CHECK(input.numel() == 0 || output.data_ptr() != input.data_ptr(),
              "pitstop_nccl alltoall_base: input and output must not be the "
              "same memory");
  const Splits in = SplitsOf("input", input, input_split_sizes, size_);
  const Splits out = SplitsOf("output", output, output_split_sizes, size_);
  TORCH_CHECK(in.count[rank_] == out.count[rank_], "pitstop_nccl ", op,
              ": this rank sends itself ", in.count[rank_],
              " elements but expects ", out.count[rank_]);
  const int rank = rank_;
  const int n = size_;
  QueuedOp q;
  q.pre = [input, output, in, out, rank] {
    std::memcpy(At(output, out.offset[rank]), At(input, in.offset[rank]),
                in.count[rank] * input.element_size());
  };
  q.issue = [input, output, in, out, type, rank, n](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      for (int r = 0; r < n; ++r) {
        if (r == rank) continue;
        if (in.count[r] > 0) {
          absl::Status s =
              c.Send(At(input, in.offset[r]), in.count[r], type, r);
          if (!s.ok()) return s;
        }
        if (out.count[r] > 0) {
          absl::Status s =
              c.Recv(At(output, out.offset[r]), out.count[r], type, r);
          if (!s.ok()) return s;
        }
      }
      return absl::OkStatus();
    });
  };
  return Enqueue(c10d::OpType::ALLTOALL_BASE,
                 PITSTOP_NCCL_TITLE("alltoall_base"), std::move(q), {input},
                 {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::alltoall(
    std::vector<at::Tensor>& output_tensors,
    std::vector<at::Tensor>& input_tensors, const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  TORCH_CHECK(input_tensors.size() == static_cast<size_t>(size_) &&
                  output_tensors.size() == static_cast<size_t>(size_),
              "pitstop_nccl alltoall: input_tensors and output_tensors must "
              "hold one tensor per rank (",
              size_, "), got ", input_tensors.size(), " and ",
              output_tensors.size());
  const ncclDataType_t type =
      CheckTensor(op, "input_tensors[0]", input_tensors[0]);
  const at::Tensor& ref = input_tensors[0];
  for (int r = 0; r < size_; ++r) {
    for (const auto& [list, name] :
         {std::pair{&input_tensors, "input_tensors"},
          std::pair{&output_tensors, "output_tensors"}}) {
      const at::Tensor& t = (*list)[r];
      const std::string arg = absl::StrCat(name, "[", r, "]");
      CheckTensor(op, arg, t);
      TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "pitstop_nccl ", op,
                  ": ", arg, " has dtype ", t.scalar_type(), ", expected ",
                  ref.scalar_type(), " (input_tensors[0]'s)");
    }
  }
  CheckLike(op, absl::StrCat("output_tensors[", rank_, "]"),
            output_tensors[rank_], absl::StrCat("input_tensors[", rank_, "]"),
            input_tensors[rank_]);
  const int rank = rank_;
  const int n = size_;
  QueuedOp q;
  q.pre = [ins = input_tensors, outs = output_tensors, rank] {
    Copy(ins[rank], outs[rank]);
  };
  q.issue = [ins = input_tensors, outs = output_tensors, type, rank,
             n](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      for (int r = 0; r < n; ++r) {
        if (r == rank) continue;
        // Zero-sized parts are skipped on both sides (the peer's count
        // for this pair is the same number).
        absl::Status s;
        if (ins[r].numel() > 0) {
          s = c.Send(ins[r].data_ptr(), ins[r].numel(), type, r);
        }
        if (s.ok() && outs[r].numel() > 0) {
          s = c.Recv(outs[r].data_ptr(), outs[r].numel(), type, r);
        }
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    });
  };
  return Enqueue(c10d::OpType::ALLTOALL, PITSTOP_NCCL_TITLE("alltoall"),
                 std::move(q), input_tensors, output_tensors, opts.timeout);
}

}  // namespace pitstop::torch_backend
