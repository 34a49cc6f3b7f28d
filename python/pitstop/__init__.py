"""pitstop trainer library: step reports to the node agent and the local-SGD
switch (EDiT / A-EDiT) for PyTorch (``pitstop.torch``).

The gRPC stubs of ``proto/pitstop/v1/trainer.proto`` are generated at build
time (``pitstop.v1.trainer_pb2``); they are found in an installed package,
in ``$PITSTOP_PY_GEN/pitstop`` or in ``<repo>/build/python/pitstop``.
"""

import os as _os

__version__ = "0.1.0"


def _extend_path():
    here = _os.path.dirname(_os.path.abspath(__file__))
    candidates = []
    gen = _os.environ.get("PITSTOP_PY_GEN")
    if gen:
        candidates.append(_os.path.join(gen, "pitstop"))
    candidates.append(
        _os.path.join(here, "..", "..", "build", "python", "pitstop"))
    for c in candidates:
        c = _os.path.normpath(c)
        if _os.path.isdir(_os.path.join(c, "v1")) and c not in __path__:
            __path__.append(c)


if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "v1")):
    _extend_path()
