"""The kinds of device machine the project's device calls run on, and what a command there
needs: the wheels folder it carries and sources first, how long the machine stays warm
between calls (a run continues across calls only then), and a session's device time.

A device machine has no package registry: wmx's dependencies travel as wheels in a
folder the call carries (``carry``), made here by ``made_by``, and every command starts
with ``source <wheels>/setup.sh &&`` (it installs them once per machine and puts them and
the checkout on PYTHONPATH; the H200's returns 1 when it could not, and the command then
stops before Python runs without them). The TPU v5e machine has the lock's JAX (0.10.2); the H200
machine has its own JAX (0.11.2 with its CUDA 13 plugin, on Python 3.12), which the
H200 wheels go beside (docs/accelerators.md).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DeviceKind:
    """One kind of device machine.

    Attributes:
        name: the flag value (``--device NAME``).
        label: the chip, for messages.
        wheels: the carried wheels folder, relative to the project root (ignored by git).
        made_by: the command, run here from the project root, that makes ``wheels``.
        warm_s: seconds the machine stays warm after a call (its /tmp, and a run's replay
            and checkpoints there, are gone after that).
        session_s: device seconds a session may use (the machine's start included).
        backends: JAX's ``default_backend()`` names on such a machine.
    """
    name: str
    label: str
    wheels: str
    made_by: str
    warm_s: float
    session_s: float
    backends: tuple[str, ...]

    def setup(self) -> str:
        """The command's first words: ``source <wheels>/setup.sh &&``."""
        return f"source {self.wheels}/setup.sh &&"


KINDS = {
    "tpu": DeviceKind("tpu", "TPU v5e", ".whl-tpu", "bash ../shared/tpu/wheels.sh", 100.0,
                      1800.0, ("tpu",)),
    "h200": DeviceKind("h200", "NVIDIA H200", ".whl-h200", "bash tools/h200_wheels.sh", 30.0,
                       900.0, ("gpu", "cuda")),
}
"""The kinds, by flag value; the TPU first (the project's default device)."""
DEFAULT = "tpu"


def kind_of_backend(backend: str) -> DeviceKind | None:
    """The kind whose machine JAX names ``backend`` (``jax.default_backend()``); None on
    the CPU or another backend."""
    return next((k for k in KINDS.values() if backend in k.backends), None)
