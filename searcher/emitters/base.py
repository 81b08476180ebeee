"""The emitter interface: a plan in, the files a person runs and the command that launches them out.

Every emitter names, for every knob of :class:`~constraints.config.TrainConfig`, how its format
expresses it (``knobs``). A knob the format cannot express is refused with :func:`refuse` (one
line, exit code 2), never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Protocol

from constraints.frozen import frozen
from searcher.emitters.knobs import KNOB_NAMES, refuse
from searcher.emitters.plan import Plan


@frozen
class EmittedFile:
    """One file of an emission: its name inside ``--out`` and its text."""

    name: str
    text: str
    executable: bool = False


@frozen
class Emission:
    """What an emitter produces: the files, the command that launches them, and notes."""

    format: str
    files: tuple[EmittedFile, ...]
    command: str
    notes: tuple[str, ...] = ()
    #: the launch with the flags of a smoke test that needs no GPU and no download (random
    #: weights from the config.json beside the script, random tokens, one step); "" if none
    smoke: str = ""

    def file(self, name: str) -> EmittedFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)


@frozen
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
    #: the backends (constraints/data/backends.json) this format writes; a plan modelled under
    #: another is refused before emitting
    backends: tuple[str, ...]

    def emit(self, plan: Plan, options: EmitOptions) -> Emission: ...


__all__ = ["KNOB_NAMES", "Emission", "EmitOptions", "EmittedFile", "Emitter", "Plan", "refuse"]
