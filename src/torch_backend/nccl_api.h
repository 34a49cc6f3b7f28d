// The part of NCCL's C API the torch backend calls (facts:
// ../shared/docs/nccl-plugin-abi.md §16; the same signatures since NCCL 2.7,
// ncclAvg since 2.10).
//
// The backend calls these names through ordinary dynamic binding: the
// extension has a DT_NEEDED on libnccl.so.2 and no RPATH, so each ncclX
// resolves to the first definition in the process's global scope. That is
// the pitstop interposer when libnccl-profiler-pitstop.so is LD_PRELOADed
// (it forwards to NCCL's pncclX), else libnccl.so.2 itself: whatever the
// loader found (the CPU NCCL backend of src/nccl/cpu on machines without a
// GPU, NVIDIA's NCCL elsewhere).
#ifndef PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_
#define PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_

// The declarations are the project's own, shared with the CPU backend and
// its direct callers (src/nccl/cpu/nccl_functions.h: the same signatures,
// C++17-clean, static_asserted there); this header only adds why the
// backend binds them dynamically.
#include "src/nccl/cpu/nccl_functions.h"

static_assert(sizeof(ncclComm_t) == sizeof(void*));

#endif  // PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_
