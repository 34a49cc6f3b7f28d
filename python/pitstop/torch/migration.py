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

``mig.step(s)`` returns the step to run: ``s``, or on a joiner the step the
leaver stopped before. On a leaver whose state went to the joiner it
destroys the default process group and exits the process with status 0.

Threads: call from the training loop's thread only.
"""

import array
import base64
import ctypes
import json
import os
import random
import struct
import sys
import time

import torch
import torch.distributed as dist

# pitstop_trainer_poll results (include/pitstop/trainer.h).
CONTINUE = 0
LEAVE = 1
ERROR = -1
UNAVAILABLE = -2

STATE_NAME = "pitstop.torch/state"
_HEADER = struct.Struct("<8sQ")  # magic, JSON length
_MAGIC = b"PSTORCH1"
DEFAULT_STATE_BYTES = 256 << 10


class MigrationError(RuntimeError):
    """The migration cannot go on here (bad state, library refused)."""


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


# ------------------------------------------------------------ the state

def _describe(t):
    return "%s[%s]" % (str(t.dtype).replace("torch.", ""),
                       ",".join(str(d) for d in t.shape))


def _check_tensor(name, t):
    if t.device.type != "cpu":
        raise MigrationError(
            "%s: a %s tensor; the library transfers host memory and a "
            "host staging copy for device tensors is not built" %
            (name, t.device.type))
    if not t.is_contiguous():
        raise MigrationError("%s: not contiguous (%s, strides %s)" %
                             (name, _describe(t), tuple(t.stride())))


def _module_of(model):
    return model.module if hasattr(model, "module") else model


def _json_value(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)) and all(
            isinstance(x, (bool, int, float, str)) or x is None for x in v):
        return list(v)
    return None  # not carried (e.g. a tensor hyper-parameter)


class TorchState:
    """The migratable state of one rank, as named buffers in a fixed order.

    ``buffers()`` is what gets registered: (name, address, nbytes) with the
    small-state buffer first, then the model's parameters and buffers, then
    the optimizer's state tensors (by parameter, then key). ``capture(step)``
    packs the small state for the boundary before ``step``; after the
    joiner's buffers were written, ``apply()`` restores RNGs, hyper-
    parameters and extras and returns the step the leaver packed.
    """

    def __init__(self, model, optimizer=None, extra=None,
                 state_bytes=DEFAULT_STATE_BYTES):
        self.module = _module_of(model)
        self.optimizer = optimizer
        self.extra = dict(extra or {})
        for k, v in self.extra.items():
            if not (hasattr(v, "state_dict") and hasattr(v, "load_state_dict")):
                raise MigrationError("extra %r: needs state_dict() and "
                                     "load_state_dict()" % k)
        self.small = torch.zeros(state_bytes, dtype=torch.uint8)
        # [(name, holder, key, data_ptr)] after the small buffer
        self._tensors = []
        self._registered = False
        self._opt_entries = -1

    # --- the tensors

    def _collect(self):
        """[(name, tensor, holder, key)]: holder[key] is where the tensor
        lives (a module's _parameters/_buffers, an optimizer's state of a
        parameter), looked up again at each boundary."""
        out = []
        seen = set()
        for kind, items in (("_parameters", self.module.named_parameters()),
                            ("_buffers", self.module.named_buffers())):
            for n, t in items:
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                name = "model/%s:%s" % (n, _describe(t))
                _check_tensor(name, t)
                owner, _, leaf = n.rpartition(".")
                holder = getattr(self.module.get_submodule(owner), kind)
                out.append((name, t, holder, leaf))
        for gi, p, key, holder in self._optimizer_tensors():
            v = holder[key]
            name = "optim/%d.%d/%s:%s" % (gi, p, key, _describe(v))
            _check_tensor(name, v)
            out.append((name, v, holder, key))
        return out

    def _optimizer_tensors(self):
        if self.optimizer is None:
            return
        for gi, group in enumerate(self.optimizer.param_groups):
            for pi, p in enumerate(group["params"]):
                st = self.optimizer.state.get(p, {})
                for key in sorted(st):
                    if torch.is_tensor(st[key]):
                        yield gi, pi, key, st

    def _optimizer_entries(self):
        if self.optimizer is None:
            return 0
        return sum(len(s) for s in self.optimizer.state.values())

    def changed(self):
        """The (name, address, nbytes) to (re)register since the last call:
        all at first, then new optimizer state and tensors that moved (an
        optimizer or a module that replaced a tensor). At a boundary where
        nothing changed: one dict lookup and one data_ptr per tensor."""
        out = []
        if not self._registered:
            out.append((STATE_NAME, self.small.data_ptr(), self.small.numel()))
            self._registered = True
        entries = self._optimizer_entries()
        if self._tensors and entries == self._opt_entries and all(
                holder[key].data_ptr() == ptr
                for _, holder, key, ptr in self._tensors):
            return out
        self._opt_entries = entries
        tensors = self._collect()
        old = [name for name, _, _, _ in self._tensors]
        if [n for n, _, _, _ in tensors[:len(old)]] != old:
            gone = sorted(set(old) - {n for n, _, _, _ in tensors})
            raise MigrationError(
                "the registered state changed: %s; the library sends the "
                "buffers in registration order, so state may only be added "
                "after what exists" % (
                    "%d buffer(s) gone, e.g. %s" % (len(gone), gone[:3])
                    if gone else "a new buffer came before registered ones"))
        known = {name: ptr for name, _, _, ptr in self._tensors}
        self._tensors = [(n, h, k, t.data_ptr()) for n, t, h, k in tensors]
        for n, t, _, _ in tensors:
            if known.get(n) != t.data_ptr():
                out.append((n, t.data_ptr(), t.numel() * t.element_size()))
        return out

    def buffers(self):
        """Every buffer, in registration order."""
        self.changed()
        return [(STATE_NAME, self.small.data_ptr(), self.small.numel())] + [
            (n, h[k].data_ptr(), h[k].numel() * h[k].element_size())
            for n, h, k, _ in self._tensors]

    def names(self):
        return [b[0] for b in self.buffers()]

    # --- the small state

    def _small_state(self, step):
        s = {"step": int(step),
             "rng": {"torch": _b64(torch.get_rng_state().numpy().tobytes()),
                     "python": _python_rng_state()}}
        if "numpy" in sys.modules:
            s["rng"]["numpy"] = _numpy_rng_state()
        if self.optimizer is not None:
            s["param_groups"] = [
                {k: _json_value(v) for k, v in g.items() if k != "params"}
                for g in self.optimizer.param_groups]
            s["optim_scalars"] = {
                "%d.%d/%s" % (gi, pi, k): v
                for gi, g in enumerate(self.optimizer.param_groups)
                for pi, p in enumerate(g["params"])
                for k, v in self.optimizer.state.get(p, {}).items()
                if not torch.is_tensor(v)}
        s["extra"] = {k: v.state_dict() for k, v in self.extra.items()}
        return s

    def capture(self, step):
        body = json.dumps(self._small_state(step),
                          separators=(",", ":")).encode()
        n = self.small.numel()
        if _HEADER.size + len(body) > n:
            raise MigrationError(
                "%s: the small state is %d bytes, the buffer %d (raise "
                "state_bytes)" % (STATE_NAME, _HEADER.size + len(body), n))
        raw = _HEADER.pack(_MAGIC, len(body)) + body
        ctypes.memmove(self.small.data_ptr(), raw, len(raw))

    def apply(self):
        """Restores the small state the joiner received; returns its step."""
        view = ctypes.string_at(self.small.data_ptr(), self.small.numel())
        magic, size = _HEADER.unpack_from(view)
        if magic != _MAGIC or _HEADER.size + size > len(view):
            raise MigrationError(
                "%s: offset 0: not a packed torch state (magic %r, length "
                "%d of %d bytes)" % (STATE_NAME, magic, size, len(view)))
        try:
            s = json.loads(view[_HEADER.size:_HEADER.size + size])
        except ValueError as e:
            raise MigrationError("%s: offset %d: bad JSON: %s" %
                                 (STATE_NAME, _HEADER.size, e)) from e
        rng = s["rng"]
        torch.set_rng_state(torch.frombuffer(
            bytearray(base64.b64decode(rng["torch"])), dtype=torch.uint8))
        _set_python_rng_state(rng["python"])
        if "numpy" in rng:
            _set_numpy_rng_state(rng["numpy"])
        if self.optimizer is not None:
            for g, saved in zip(self.optimizer.param_groups,
                                s["param_groups"]):
                for k, v in saved.items():
                    if v is not None:
                        g[k] = tuple(v) if isinstance(g.get(k), tuple) else v
            for key, v in s["optim_scalars"].items():
                gp, k = key.split("/", 1)
                gi, pi = (int(x) for x in gp.split("."))
                p = self.optimizer.param_groups[gi]["params"][pi]
                self.optimizer.state[p][k] = v
        for k, v in self.extra.items():
            v.load_state_dict(s["extra"][k])
        return s["step"]

    # --- without the library (tests, a copy between two processes' views)

    def read(self):
        """[(name, bytes)] of every buffer, read from its memory."""
        return [(n, ctypes.string_at(ptr, size))
                for n, ptr, size in self.buffers()]

    def write(self, sent):
        """Writes [(name, bytes)] (another rank's read()) into this rank's
        buffers after the check the library makes: same names (so dtypes
        and shapes), same sizes, in order. Nothing is written on a
        mismatch."""
        mine = self.buffers()
        if len(sent) != len(mine):
            raise MigrationError(
                "the leaver sent %d state buffer(s), this process registered "
                "%d" % (len(sent), len(mine)))
        for i, ((n, data), (m, _, size)) in enumerate(zip(sent, mine)):
            if n != m:
                raise MigrationError("state buffer %d is '%s' here, '%s' on "
                                     "the leaver" % (i, m, n))
            if len(data) != size:
                raise MigrationError("state buffer '%s' is %d bytes here, %d "
                                     "on the leaver" % (m, size, len(data)))
        for (_, data), (_, ptr, _) in zip(sent, mine):
            ctypes.memmove(ptr, data, len(data))

    def materialise_optimizer_state(self):
        """Creates the optimizer's lazily created state (a joiner's
        optimizer that never stepped) with the shapes a step makes: one step
        on zero gradients, with the parameters and gradients put back. The
        values are the leaver's once the state arrives."""
        opt = self.optimizer
        if opt is None or self._optimizer_entries() > 0:
            return
        params = [p for g in opt.param_groups for p in g["params"]]
        saved = [(p.detach().clone(), p.grad) for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        with torch.no_grad():
            opt.step()
            for p, (value, grad) in zip(params, saved):
                p.copy_(value)
                p.grad = grad


def _b64(data):
    return base64.b64encode(data).decode()


def _python_rng_state():
    # Mersenne Twister: 624 32-bit words and the index (<= 624).
    version, internal, gauss = random.getstate()
    return [version, _b64(array.array("I", internal).tobytes()), gauss]


def _set_python_rng_state(s):
    internal = array.array("I")
    internal.frombytes(base64.b64decode(s[1]))
    random.setstate((s[0], tuple(internal), s[2]))


def _numpy_rng_state():
    import numpy as np
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, _b64(keys.astype(np.uint32).tobytes()), int(pos),
            int(has_gauss), float(cached)]


def _set_numpy_rng_state(s):
    import numpy as np
    keys = np.frombuffer(base64.b64decode(s[1]), dtype=np.uint32).copy()
    np.random.set_state((s[0], keys, s[2], s[3], s[4]))


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
