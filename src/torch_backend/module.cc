// The Python extension pitstop.torch._nccl_backend: the process group class
// (a subclass of torch.distributed.ProcessGroup) and what a user or a test
// asks about the NCCL under it. Imported by pitstop.torch.nccl_backend,
// which loads libnccl.so.2 first (docs/pytorch.md); not meant to be
// imported directly.
#include <dlfcn.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <string>

#include "src/torch_backend/nccl_api.h"
#include "src/torch_backend/nccl_comm.h"
#include "src/torch_backend/process_group_pitstop_nccl.h"

namespace pitstop::torch_backend {
namespace {

namespace py = pybind11;

// The file that defines the code at `address`, "" if none.
std::string ObjectOf(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  return info.dli_fname;
}

// Each NCCL function this module calls -> the object its call binds to:
// the interposer (libnccl-profiler-pitstop.so) for the names it wraps when
// it is LD_PRELOADed, else libnccl.so.2. Taking the address goes through
// the same GOT entry as the calls.
std::map<std::string, std::string> NcclBindings() {
  const std::map<std::string, const void*> functions = {
      {"ncclGetVersion", reinterpret_cast<const void*>(&ncclGetVersion)},
      {"ncclGetErrorString",
       reinterpret_cast<const void*>(&ncclGetErrorString)},
      {"ncclGetLastError", reinterpret_cast<const void*>(&ncclGetLastError)},
      {"ncclGetUniqueId", reinterpret_cast<const void*>(&ncclGetUniqueId)},
      {"ncclCommInitRank", reinterpret_cast<const void*>(&ncclCommInitRank)},
      {"ncclCommDestroy", reinterpret_cast<const void*>(&ncclCommDestroy)},
      {"ncclCommAbort", reinterpret_cast<const void*>(&ncclCommAbort)},
      {"ncclGroupStart", reinterpret_cast<const void*>(&ncclGroupStart)},
      {"ncclGroupEnd", reinterpret_cast<const void*>(&ncclGroupEnd)},
      {"ncclAllReduce", reinterpret_cast<const void*>(&ncclAllReduce)},
      {"ncclBroadcast", reinterpret_cast<const void*>(&ncclBroadcast)},
      {"ncclReduce", reinterpret_cast<const void*>(&ncclReduce)},
      {"ncclAllGather", reinterpret_cast<const void*>(&ncclAllGather)},
      {"ncclReduceScatter", reinterpret_cast<const void*>(&ncclReduceScatter)},
      {"ncclSend", reinterpret_cast<const void*>(&ncclSend)},
      {"ncclRecv", reinterpret_cast<const void*>(&ncclRecv)},
  };
  std::map<std::string, std::string> out;
  for (const auto& [name, address] : functions) out[name] = ObjectOf(address);
  return out;
}

// What the destructor waits in (process_group_pitstop_nccl.h): without
// the interpreter lock when this thread holds it.
void WithoutGil(const std::function<void()>& wait) {
  if (PyGILState_Check()) {
    py::gil_scoped_release release;
    wait();
  } else {
    wait();
  }
}

int Version() {
  absl::StatusOr<int> v = NcclVersion();
  TORCH_CHECK(v.ok(), "pitstop_nccl: ", v.status().message());
  return *v;
}

}  // namespace
}  // namespace pitstop::torch_backend

PYBIND11_MODULE(_nccl_backend, m) {
  namespace py = pybind11;
  namespace tb = pitstop::torch_backend;
  m.doc() =
      "pitstop_nccl: a c10d process group over the NCCL C API (test/demo "
      "component for machines without a GPU; see pitstop.torch.nccl_backend)";
  // Registers c10d::ProcessGroup with pybind11 before we derive from it.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<tb::ProcessGroupPitstopNccl, c10d::ProcessGroup,
             c10::intrusive_ptr<tb::ProcessGroupPitstopNccl>>(
      m, "ProcessGroupPitstopNccl")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                       int size, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<tb::ProcessGroupPitstopNccl>(
                 store, rank, size, timeout, &tb::WithoutGil);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
           "Exchanges rank 0's NCCL unique id through `store`, creates the "
           "communicator (blocks until every rank joined) and starts the "
           "worker thread. `timeout` (timedelta) bounds the id exchange and "
           "is every collective's default timeout.")
      .def_property_readonly("timeout", &tb::ProcessGroupPitstopNccl::timeout)
      .def_property_readonly("nccl_version",
                             &tb::ProcessGroupPitstopNccl::nccl_version)
      .def_property_readonly(
          "nccl_call_in_flight",
          &tb::ProcessGroupPitstopNccl::nccl_call_in_flight,
          "Whether the worker thread is inside an NCCL call (after a "
          "timeout: until the call under the failed op returns)");
  m.attr("BACKEND_NAME") = tb::kBackendName;
  m.def("nccl_version", &tb::Version,
        "ncclGetVersion of the loaded NCCL (e.g. 22809 for 2.28.9)");
  m.def("nccl_library", &tb::NcclLibraryPath,
        "Path of the loaded libnccl.so.2 ('' if none is loaded)");
  m.def("nccl_bindings", &tb::NcclBindings,
        "NCCL function -> the file its calls from this backend reach (the "
        "pitstop interposer when it is LD_PRELOADed, else libnccl.so.2)");
}
