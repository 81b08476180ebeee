"""The CUDA context per GPU generation and CUDA version, from public measurements.

``data/cuda_context.csv``: one row per published figure with its source. ``kind`` says what was
measured: ``training`` (nvidia-smi used − the allocator's reserved bytes while a training step
runs: the context with the kernels, cuBLAS and cuDNN state training loads) or ``bare`` (a process
that has created its context and run almost nothing: a lower bound for training). The memory
model's overhead term still uses the flat ``constants.CUDA_CONTEXT_BYTES`` (0.5 GiB); this table
is the evidence a per-generation term will be built from (only the T4 has a training figure yet).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).with_name("data") / "cuda_context.csv"
KINDS = ("training", "bare")
LOADING = ("lazy", "eager")


@dataclass(frozen=True)
class ContextFigure:
    """One published CUDA context figure, bytes."""

    architecture: str
    compute_capability: float | None
    gpu: str
    cuda: str
    module_loading: str
    kind: str
    context_bytes: int
    measured_as: str
    source: str


@cache
def context_figures() -> tuple[ContextFigure, ...]:
    rows = []
    with DATA.open(encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            cc = r["compute_capability"]
            rows.append(
                ContextFigure(
                    architecture=r["architecture"],
                    compute_capability=float(cc) if cc else None,
                    gpu=r["gpu"],
                    cuda=r["cuda"],
                    module_loading=r["module_loading"],
                    kind=r["kind"],
                    context_bytes=int(r["context_bytes"]),
                    measured_as=r["measured_as"],
                    source=r["source"],
                )
            )
    return tuple(rows)


def training_context(compute_capability: float | None, cuda_major: int = 12) -> int | None:
    """The measured training-time context of this GPU generation under CUDA ``cuda_major`` with
    lazy loading, bytes; None where no public training figure exists."""
    for f in context_figures():
        if (
            f.kind == "training"
            and f.module_loading == "lazy"
            and f.compute_capability == compute_capability
            and f.cuda.split(".")[0] == str(cuda_major)
        ):
            return f.context_bytes
    return None
