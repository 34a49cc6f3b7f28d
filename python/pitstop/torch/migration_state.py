"""The state a migrated torch rank takes along (pitstop.torch.migration's
TorchState): which buffers, in which order, and the small state packed as
JSON. Imported by pitstop.torch.migration; see its docstring.

Threads: call from the training loop's thread only.
"""

import array
import base64
import ctypes
import json
import random
import struct
import sys

import torch

STATE_NAME = "pitstop.torch/state"
_HEADER = struct.Struct("<8sQ")  # magic, JSON length
_MAGIC = b"PSTORCH1"
DEFAULT_STATE_BYTES = 256 << 10


class MigrationError(RuntimeError):
    """The migration cannot go on here (bad state, library refused)."""


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
