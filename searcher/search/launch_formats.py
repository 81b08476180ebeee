"""What each launch format (``--emit``) can write, for the search of ``search --emit FMT``: the
space keeps to it, so the front holds plans the format expresses instead of a cheapest pick it
refuses after the search. The backends a format writes are ``emitted_by`` in
constraints/data/backends.json; the values here are the rest of the emitters' refusals that do not
depend on the model (searcher/emitters/formats/*; tests/search/test_emit_space.py holds every front
member of such searches to the emitter itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: knob -> the values a format writes, where it writes fewer than the search tries
#: torchtune 0.6.1: no fused linear cross-entropy (LinearCrossEntropyLoss is unreleased); its
#: QLoRA base is torchao's NF4 with double-quantised scalers only (emitters/formats/torchtune.py)
#: the HF Trainer family (hf, torchrun, accelerate, axolotl) and a plain DeepSpeed JSON step the
#: optimizer after backward: only torchtune's full-fine-tune recipes step it in backward
HF_FAMILY = ("hf", "torchrun", "accelerate", "axolotl", "deepspeed")
FORMAT_VALUES: dict[str, dict[str, tuple[Any, ...]]] = {
    "torchtune": {"loss": ("chunked", "standard"), "quant": ("nf4-dq",)},
    **{fmt: {"optimizer_in_backward": (False,)} for fmt in HF_FAMILY},
}
#: formats with no tensor parallelism: the HF Trainer family (axolotl's tensor_parallel_size
#: needs DeepSpeed AutoTP, not emitted) and a plain DeepSpeed JSON
NO_TENSOR_PARALLEL = frozenset(HF_FAMILY)


def writable(fmt: str | None, knob: str, values: Iterable[Any]) -> tuple[Any, ...]:
    """``values`` the format writes for ``knob`` (all of them when ``fmt`` is None)."""
    values = tuple(values)
    allowed = FORMAT_VALUES.get(fmt or "", {}).get(knob)
    return values if allowed is None else tuple(v for v in values if v in allowed)


def tensor_parallel_degrees(fmt: str | None, degrees: Iterable[int]) -> list[int]:
    """The TP degrees a format writes (1 only for the formats without tensor parallelism)."""
    return [d for d in degrees if d == 1 or fmt not in NO_TENSOR_PARALLEL]
