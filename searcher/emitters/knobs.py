"""The knobs every emitter must account for, and the one-line refusal of a knob a format lacks."""

from __future__ import annotations

from constraints.config import TrainConfig
from constraints.errors import FitplanError

#: the knobs every emitter must account for: the fields of TrainConfig
KNOB_NAMES: tuple[str, ...] = tuple(TrainConfig.model_fields)


def refuse(
    fmt: str, knob: str, value: object, reason: str, hint: str | None = None
) -> FitplanError:
    """The one-line refusal: which knob, which value, why the format cannot express it."""
    return FitplanError(f"--emit {fmt} cannot express {knob}={value}: {reason}", hint)
