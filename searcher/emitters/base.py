"""The emitter interface: a plan in, the files a person runs and the command that launches them out.

Every emitter names, for every knob of :class:`~constraints.config.TrainConfig`, how its format
expresses it (``knobs``). A knob the format cannot express is refused with :func:`refuse` (one
line, exit code 2), never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from constraints.config import TrainConfig
from constraints.errors import FitplanError

if TYPE_CHECKING:
    from searcher.emitters.plan import Plan

#: the knobs every emitter must account for: the fields of TrainConfig
KNOB_NAMES: tuple[str, ...] = tuple(TrainConfig.model_fields)


@dataclass(frozen=True)
class EmittedFile:
    """One file of an emission: its name inside ``--out`` and its text."""

    name: str
    text: str
    executable: bool = False


@dataclass(frozen=True)
class Emission:
    """What an emitter produces: the files, the command that launches them, and notes."""

    format: str
    files: tuple[EmittedFile, ...]
    command: str
    notes: tuple[str, ...] = ()

    def file(self, name: str) -> EmittedFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(frozen=True)
class EmitOptions:
    """Choices that are not knobs of the plan.

    ``out``: the folder as the user typed it (commands and cross-file references use it).
    ``lora_alpha``: None = 2 × rank. ``backend``: how HF-Trainer based formats shard ZeRO-2/3
    (``auto``: FSDP unless the plan needs DeepSpeed). ``gpus_per_node`` splits the GPUs into nodes.
    """

    out: str = "."
    lora_alpha: int | None = None
    backend: str = "auto"
    gpus_per_node: int = 8
    extra: Mapping[str, Any] = field(default_factory=dict)


class Emitter(Protocol):
    """One launch format. ``knobs`` maps every name in KNOB_NAMES to how the format expresses it."""

    name: str
    summary: str
    knobs: Mapping[str, str]

    def emit(self, plan: Plan, options: EmitOptions) -> Emission: ...


def refuse(
    fmt: str, knob: str, value: object, reason: str, hint: str | None = None
) -> FitplanError:
    """The one-line refusal: which knob, which value, why the format cannot express it."""
    return FitplanError(f"--emit {fmt} cannot express {knob}={value}: {reason}", hint)
