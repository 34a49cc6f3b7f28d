"""pitstop.torch: EDiT / A-EDiT local SGD with a runtime switch, and the
multi-LoRA pipeline trainer with rescheduling (mLoRA)."""

from pitstop.client import Directive, TrainerClient  # noqa: F401
from pitstop.torch.edit import EDiT  # noqa: F401
from pitstop.torch.penalty import PseudoGradientPenalty  # noqa: F401
from pitstop.torch.switch import SwitchAgreement  # noqa: F401
from pitstop.torch.multi_lora import (MoveFailed,  # noqa: F401
                                      MultiLoraTrainer, PipelineFailed)
from pitstop.torch.placement import Placement, compute_placement  # noqa: F401
