"""pitstop.torch: EDiT / A-EDiT local SGD with a runtime switch."""

from pitstop.client import Directive, TrainerClient  # noqa: F401
from pitstop.torch.edit import EDiT  # noqa: F401
from pitstop.torch.penalty import PseudoGradientPenalty  # noqa: F401
from pitstop.torch.switch import SwitchAgreement  # noqa: F401
