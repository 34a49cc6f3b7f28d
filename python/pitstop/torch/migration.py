"""Standby migration of a PyTorch rank (docs/pytorch.md "Migrating a rank
of a torch job"): the job's migratable state, registered with the pitstop
library's trainer C API (include/pitstop/trainer.h), and the step hook that
hands it to a joiner.

The library (``libnccl-profiler-pitstop.so``, LD_PRELOADed, with
``PITSTOP_VIRTUALIZE_COMMS=1``) does the migration itself: it rebuilds the
communicators, and at the switch step the leaver's poll sends every
registered buffer to the joiner over a transfer communicator. This module
says what those buffers are for a torch job and keeps them current:

- ``state``: one fixed-size byte buffer (registered first) with the small
  state as JSON: the step, the RNG states (torch's CPU generator, Python's
  ``random``, NumPy's global generator when the job imported NumPy), the
  optimizer's hyper-parameters (a scheduler changes ``lr``), the optimizer's
  non-tensor state, and ``extra`` objects' ``state_dict()`` (a data
  sampler's position, an LR scheduler). Packed at every step boundary
  (tens of microseconds), so the leaver's poll sends the boundary's state.
- every parameter and buffer of the model and every tensor of the
  optimizer's state, registered in place (no copy): the library reads and
  writes the tensors' own memory. Each name carries dtype and shape
  (``model/blocks.0.qkv.weight:float32[192,64]``), so a joiner of another
  shape is refused by name before any byte moves.

Optimizer state is created lazily (Adam's ``exp_avg``, ``exp_avg_sq`` and
``step`` appear at the first ``optimizer.step()``): the hook notices new or
moved tensors at each boundary and registers them (new names go last, so
the order stays the joiner's). A joiner materialises its optimizer's state
before it registers (one step on zero gradients with the parameters put
back; the values are overwritten by the leaver's), so both sides register
the same buffers. A migration before the leaver's first optimizer step is
refused by the library (the buffer counts differ) and the job trains on.

Use (the training loop's only change)::

    mig = pitstop.torch.migration.Migration(model, optimizer)
    while step < steps:
        step = mig.step(step)       # at each step boundary
        ...one training step...

The buffers and the packing are TorchState's (pitstop.torch.migration_state,
re-exported here).

``mig.step(s)`` returns the step to run: ``s``, or on a joiner the step the
leaver stopped before. On a leaver whose state went to the joiner it
destroys the default process group and exits the process with status 0.

Threads: call from the training loop's thread only.
"""

import ctypes
import os
import sys
import time

import torch.distributed as dist

from pitstop.torch.migration_state import (  # noqa: F401  re-exported
    DEFAULT_STATE_BYTES, STATE_NAME, MigrationError, TorchState)

# pitstop_trainer_poll results (include/pitstop/trainer.h).
CONTINUE = 0
LEAVE = 1
ERROR = -1
UNAVAILABLE = -2

class LibraryNotLoaded(MigrationError):
    """The pitstop library is not in the process but migration was asked
    for (PITSTOP_VIRTUALIZE_COMMS=1 or PITSTOP_MIGRATION_ROLE=joiner)."""


# ------------------------------------------------------------ the C API

class TrainerApi:
    """ctypes over the trainer C API the preloaded library exports."""

    def __init__(self, lib):
        self._register = lib.pitstop_trainer_register_state
        self._register.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                   ctypes.c_uint64]
        self._register.restype = ctypes.c_int
        self._poll = lib.pitstop_trainer_poll
        self._poll.argtypes = [ctypes.c_uint64]
        self._poll.restype = ctypes.c_int
        self._join = lib.pitstop_trainer_join
        self._join.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                               ctypes.c_int64]
        self._join.restype = ctypes.c_int
        self._last_error = lib.pitstop_trainer_last_error
        self._last_error.argtypes = []
        self._last_error.restype = ctypes.c_char_p

    @staticmethod
    def find():
        """The API of the library in this process, or None. The library is
        LD_PRELOADed, so its symbols are in the global scope."""
        lib = ctypes.CDLL(None)
        try:
            lib.pitstop_trainer_register_state
        except AttributeError:
            return None
        return TrainerApi(lib)

    def last_error(self):
        return (self._last_error() or b"").decode("utf-8", "replace")

    def register_state(self, name, address, nbytes):
        r = self._register(name.encode(), address, nbytes)
        if r != 0:
            raise MigrationError("pitstop_trainer_register_state(%s): %s" %
                                 (name, self.last_error()))

    def poll(self, next_step):
        return self._poll(next_step)

    def join(self, timeout_ms):
        """The first step to run, once the leaver's state is in the
        registered buffers."""
        first = ctypes.c_uint64(0)
        r = self._join(ctypes.byref(first), int(timeout_ms))
        if r != 0:
            raise MigrationError("pitstop_trainer_join: %s" % self.last_error())
        return first.value


def role():
    """``joiner`` for a process started to take a moved rank, else ``""``."""
    return os.environ.get("PITSTOP_MIGRATION_ROLE", "")


def migration_requested():
    return (os.environ.get("PITSTOP_VIRTUALIZE_COMMS") == "1" or
            role() == "joiner")


def library():
    """The trainer API when a migration was asked for
    (PITSTOP_VIRTUALIZE_COMMS=1, PITSTOP_MIGRATION_ROLE=joiner), else None;
    LibraryNotLoaded when it was asked for and the library is not loaded."""
    if not migration_requested():
        return None  # the library would accept and ignore every call
    api = TrainerApi.find()
    if api is None:
        raise LibraryNotLoaded(
            "pitstop.torch.migration: PITSTOP_VIRTUALIZE_COMMS=1 or "
            "PITSTOP_MIGRATION_ROLE=joiner is set but the pitstop library "
            "is not loaded in this process (no pitstop_trainer_* symbols): "
            "start the job with LD_PRELOAD=<build>/plugin/"
            "libnccl-profiler-pitstop.so (docs/pytorch.md)")
    return api


# ------------------------------------------------------------ the hook

class Migration:
    """The step hook of a training loop (module docstring).

    ``model``: the module or its DDP wrapper; ``optimizer``: a torch
    optimizer or None; ``extra``: name -> object with state_dict() /
    load_state_dict() (a sampler, an LR scheduler); ``shadow_steps``: a
    joiner first runs this many steps in the sandbox (its collectives
    answered from records, docs/migration.md "Shadow iterations"), default
    $PITSTOP_SHADOW_STEPS or 0; ``join_timeout_s``: how long a joiner waits
    for the leaver's state, default $PITSTOP_JOIN_TIMEOUT_S or 300.
    """

    def __init__(self, model, optimizer=None, extra=None, shadow_steps=None,
                 join_timeout_s=None, state_bytes=DEFAULT_STATE_BYTES,
                 api=None):
        self.api = api if api is not None else library()
        self.model = model
        self.state = TorchState(model, optimizer, extra, state_bytes)
        self.joiner = role() == "joiner"
        if self.joiner and self.api is None:
            raise LibraryNotLoaded("PITSTOP_MIGRATION_ROLE=joiner needs the "
                                   "pitstop library loaded")
        if shadow_steps is None:
            shadow_steps = int(os.environ.get("PITSTOP_SHADOW_STEPS", "0"))
        self.shadow_steps = shadow_steps
        if join_timeout_s is None:
            join_timeout_s = float(
                os.environ.get("PITSTOP_JOIN_TIMEOUT_S", "300"))
        self.join_timeout_s = join_timeout_s
        self.joined_at = None  # the step a joiner continued at
        self.last_error = ""

    @property
    def sandbox(self):
        """True while a joiner warms up on shadow steps: their results are
        not the job's (they are replaced by the leaver's state)."""
        return self.joiner and self.joined_at is None and self.api is not None

    def _register(self):
        for name, ptr, size in self.state.changed():
            self.api.register_state(name, ptr, size)

    def step(self, step):
        """At the boundary before `step`: the step to run."""
        if self.api is None:
            return step
        if self.joiner and self.joined_at is None:
            if step < self.shadow_steps:
                return step  # warming up in the sandbox
            return self._join()
        self._register()
        self.state.capture(step)
        t0 = time.monotonic()
        r = self.api.poll(step)
        if r == LEAVE:
            self._leave(step, (time.monotonic() - t0) * 1e3)
        if r < 0:
            # The migration failed here; the communicators are the old ones
            # and training goes on.
            self.last_error = self.api.last_error()
            print("pitstop.torch.migration: rank %s: migration failed before "
                  "step %d, training on: %s" %
                  (os.environ.get("RANK", "?"), step, self.last_error),
                  file=sys.stderr, flush=True)
        return step

    def _join(self):
        if ddp_rebuild_pending(self.model):
            # After the join the stayers all-reduce gradients where this
            # DDP would broadcast its bucket order: the job would hang.
            raise MigrationError(
                "rank %s: DDP has not rebuilt its buckets yet (it does so "
                "once, with a broadcast from rank 0, at the forward after its "
                "first backward): a joiner must run at least 2 shadow steps "
                "before joining (PITSTOP_SHADOW_STEPS, now %d; "
                "docs/pytorch.md \"The process group across the swap\")" %
                (os.environ.get("RANK", "?"), self.shadow_steps))
        self.state.materialise_optimizer_state()
        self._register()
        t0 = time.monotonic()
        first = self.api.join(self.join_timeout_s * 1000)
        t1 = time.monotonic()
        packed = self.state.apply()
        t2 = time.monotonic()
        if packed != first:
            raise MigrationError(
                "the leaver packed its state before step %d, the library "
                "says the joiner continues at step %d" % (packed, first))
        self.joined_at = first
        print("pitstop.torch.migration: rank %s: joined before step %d "
              "(waited %.1f ms in the join, restored the small state in "
              "%.1f ms)" % (os.environ.get("RANK", "?"), first,
                             (t1 - t0) * 1e3, (t2 - t1) * 1e3),
              file=sys.stderr, flush=True)
        return first

    def _leave(self, step, poll_ms):
        print("pitstop.torch.migration: rank %s: left before step %d (state "
              "sent to the joiner; the poll took %.1f ms)" %
              (os.environ.get("RANK", "?"), step, poll_ms),
              file=sys.stderr, flush=True)
        if dist.is_initialized():
            dist.destroy_process_group()
        sys.exit(0)


def ddp_rebuild_pending(model):
    """True when `model` is a DistributedDataParallel that will still
    rebuild its buckets (torch 1.13: at the forward after the first
    backward, unless find_unused_parameters without static_graph), which
    issues broadcasts the job's other ranks issued long ago."""
    from torch.nn.parallel import DistributedDataParallel
    if not isinstance(model, DistributedDataParallel):
        return False
    rebuilds = model.static_graph or not model.find_unused_parameters
    return rebuilds and not getattr(model, "_has_rebuilt_buckets", False)


def init_process_group(backend, **kwargs):
    """torch.distributed.init_process_group, for a joiner too.

    init_process_group ends in a store-based barrier that waits until the
    group's key counts world_size arrivals. The job's ranks arrived when the
    job started; a joiner, started later for a moved rank, is one arrival
    more and would wait until the timeout. The joiner's rendezvous is the
    join (Migration.step), so a joiner skips that barrier; every other
    process calls torch's function unchanged.
    """
    if role() != "joiner":
        return dist.init_process_group(backend, **kwargs)
    from torch.distributed import distributed_c10d as c10d
    barrier = c10d._store_based_barrier
    c10d._store_based_barrier = lambda rank, store, timeout: None
    try:
        return dist.init_process_group(backend, **kwargs)
    finally:
        c10d._store_based_barrier = barrier
