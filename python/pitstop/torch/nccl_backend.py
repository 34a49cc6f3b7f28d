"""pitstop_nccl: a torch.distributed backend whose collectives call the NCCL
C API (``ncclAllReduce``, ``ncclBroadcast``, ...) of whatever
``libnccl.so.2`` the loader finds.

A test and demo component for machines WITHOUT a GPU. There, with the CPU
NCCL backend of a pitstop build as ``libnccl.so.2``
(``build/src/nccl/cpu/lib``), real PyTorch jobs (DDP, ``send``/``recv``
pipelines) run their collectives through the same C calls that the pitstop
library (``libnccl-profiler-pitstop.so``, ``LD_PRELOAD``) sees under
torch's own ``nccl`` backend on GPUs. On GPU machines keep torch's ``nccl``
backend: this one takes CPU tensors only. See docs/pytorch.md.

Use::

    import pitstop.torch.nccl_backend          # registers "pitstop_nccl"
    torch.distributed.init_process_group("pitstop_nccl")

with ``LD_LIBRARY_PATH`` naming the directory of a ``libnccl.so.2``. The
import loads that library into the process's global scope first
(``RTLD_GLOBAL``), so an ``LD_PRELOAD``ed interposer can forward every
``ncclX`` it wraps to NCCL's ``pncclX``; the extension then binds its
``ncclX`` calls by ordinary dynamic linking (interposer first).

Module API:
    BACKEND                       "pitstop_nccl", the name to pass to
                                  init_process_group / new_group
    create_process_group(store, rank, world_size, timeout)
                                  the creator registered with
                                  torch.distributed.Backend.register_backend
    ProcessGroupPitstopNccl       the C++ class (a torch ProcessGroup);
                                  properties timeout, nccl_version,
                                  nccl_call_in_flight
    nccl_version() -> int         ncclGetVersion, e.g. 22809
    nccl_library() -> str         path of the loaded libnccl.so.2
    nccl_bindings() -> dict       NCCL function -> file its calls reach

Semantics (details in docs/pytorch.md): one communicator per process
group; collectives run in issue order on one worker thread per group
(``async_op=True`` and DDP's gradient all-reduce overlap the caller); a
failure or a timeout (the group's, ``timeout=`` of init_process_group)
raises RuntimeError naming the op, the rank and NCCL's reason, and every
later op of that group fails fast.
"""

import ctypes
import os
from datetime import timedelta

import torch.distributed as dist

BACKEND = "pitstop_nccl"
# The CPU NCCL backend's communicator timeout (src/nccl/cpu): the group's
# timeout is passed to it through this variable unless the user set it.
_CPU_NCCL_TIMEOUT_ENV = "PITSTOP_CPU_NCCL_TIMEOUT_MS"


def _load_nccl():
    try:
        return ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError as e:
        raise ImportError(
            "pitstop_nccl: no libnccl.so.2 on the loader path (%s). On a "
            "machine without a GPU, point LD_LIBRARY_PATH at the CPU NCCL "
            "backend of a pitstop build: "
            "LD_LIBRARY_PATH=<pitstop>/build/src/nccl/cpu/lib "
            "(docs/pytorch.md)" % e) from e


_libnccl = _load_nccl()
from pitstop.torch import _nccl_backend as _ext  # noqa: E402

ProcessGroupPitstopNccl = _ext.ProcessGroupPitstopNccl
nccl_version = _ext.nccl_version
nccl_library = _ext.nccl_library
nccl_bindings = _ext.nccl_bindings


def create_process_group(store, rank, world_size, timeout):
    """The creator torch.distributed calls for backend "pitstop_nccl".

    Blocks until all ``world_size`` ranks joined (rank 0's NCCL unique id
    travels through ``store``). ``timeout`` (a timedelta) bounds that wait
    and is each collective's default timeout.
    """
    if not isinstance(timeout, timedelta):
        raise TypeError("pitstop_nccl: timeout must be a datetime.timedelta, "
                        "got %r" % (timeout,))
    ms = max(1, int(timeout.total_seconds() * 1000))
    user_set = _CPU_NCCL_TIMEOUT_ENV in os.environ
    if not user_set:
        # Read by the CPU backend's ncclCommInitRank, on this thread.
        os.environ[_CPU_NCCL_TIMEOUT_ENV] = str(ms)
    try:
        return ProcessGroupPitstopNccl(store, rank, world_size, timeout)
    finally:
        if not user_set:
            del os.environ[_CPU_NCCL_TIMEOUT_ENV]


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, create_process_group)


_register()
