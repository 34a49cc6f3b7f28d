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

from pitstop.client import Directive, TrainerClient  # noqa: F401
from pitstop.torch.edit import EDiT  # noqa: F401
from pitstop.torch.penalty import PseudoGradientPenalty  # noqa: F401
from pitstop.torch.switch import SwitchAgreement  # noqa: F401
from pitstop.torch.multi_lora import (MoveFailed,  # noqa: F401
                                      MultiLoraTrainer, PipelineFailed)
from pitstop.torch.placement import Placement, compute_placement  # noqa: F401
