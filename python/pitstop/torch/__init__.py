"""pitstop.torch: EDiT / A-EDiT local SGD with a runtime switch, the
multi-LoRA pipeline trainer with rescheduling (mLoRA), and (imported on its
own: ``import pitstop.torch.nccl_backend``) the "pitstop_nccl" process-group
backend over the NCCL C API for machines without a GPU."""

import os as _os


def _extend_path():
    # The backend's C++ extension (_nccl_backend) is built into
    # <build>/python/pitstop/torch, next to the generated stubs of
    # pitstop/__init__.py; an installed package has it here.
    here = _os.path.dirname(_os.path.abspath(__file__))
    if any(f.startswith("_nccl_backend.") for f in _os.listdir(here)):
        return
    candidates = []
    gen = _os.environ.get("PITSTOP_PY_GEN")
    if gen:
        candidates.append(_os.path.join(gen, "pitstop", "torch"))
    candidates.append(_os.path.join(here, "..", "..", "..", "build", "python",
                                    "pitstop", "torch"))
    for c in candidates:
        c = _os.path.normpath(c)
        if _os.path.isdir(c) and c not in __path__:
            __path__.append(c)


_extend_path()

# The package's classes, imported when first used (PEP 562), not when the
# package is: a process that only needs pitstop.torch.nccl_backend and
# pitstop.torch.migration (a torch job, a joiner started for a migration)
# would otherwise import grpc, the generated stubs and every trainer at
# start-up (docs/pytorch.md "Joiner start-up").
_LAZY = {
    "Directive": "pitstop.client",
    "TrainerClient": "pitstop.client",
    "EDiT": "pitstop.torch.edit",
    "PseudoGradientPenalty": "pitstop.torch.penalty",
    "SwitchAgreement": "pitstop.torch.switch",
    "MoveFailed": "pitstop.torch.multi_lora",
    "MultiLoraTrainer": "pitstop.torch.multi_lora",
    "PipelineFailed": "pitstop.torch.multi_lora",
    "Placement": "pitstop.torch.placement",
    "compute_placement": "pitstop.torch.placement",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" %
                             (__name__, name))
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
