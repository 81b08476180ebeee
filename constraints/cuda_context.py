"""The CUDA context per GPU generation and CUDA version, from public measurements.

``data/cuda_context.csv``: one row per published figure with its source. ``kind`` says what was
measured: ``training`` (nvidia-smi used − the allocator's reserved bytes while a training step
runs: the context with the kernels, cuBLAS and cuDNN state training loads) or ``bare`` (a process
that has created its context and run almost nothing: a lower bound for training).

:func:`context_bytes` is the one figure every memory total uses for a GPU (training, inference,
serving, the usable share): the generation's measured training context under CUDA 12 with lazy
loading where one is published (T4: 141 MiB), else ``constants.CUDA_CONTEXT_BYTES`` (0.5 GiB).
Why the default stays for the rest: every other public figure is a bare context (256 MiB on an
RTX 3090 under CUDA 12.8, 426 MiB on an RTX 6000 Ada under CUDA 13.0, 287 MiB on an unnamed GPU
under CUDA 11.7, "300–400 MB" from PyTorch's maintainers), a lower bound for training, which
loads cuBLAS, cuDNN and the attention kernels on top; no public A100, H100, L4 or A10 figure was
found (pytorch, transformers, vLLM, unsloth issue threads searched), and the 0.5 GiB default
lies above every bare figure. CUDA 12 is assumed (PyTorch 2.x wheels ship cu12x; lazy loading
is the default from CUDA 12.2 on, and PyTorch sets it since 1.13).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from constraints import constants as C
from constraints.frozen import frozen
from constraints.gpus import GpuSpec

DATA = Path(__file__).with_name("data") / "cuda_context.csv"
KINDS = ("training", "bare")
LOADING = ("lazy", "eager")


@frozen
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


#: the CUDA major version assumed for a GPU (PyTorch 2.x wheels are built against CUDA 12)
ASSUMED_CUDA_MAJOR = 12


def context_bytes(gpu: GpuSpec | None) -> int:
    """The CUDA context a training or serving process holds on ``gpu``, bytes: its generation's
    (compute capability's) measured training figure under CUDA 12 with lazy loading where one
    exists, else ``constants.CUDA_CONTEXT_BYTES`` (module docstring: why); None: the default."""
    measured = None if gpu is None else training_context(gpu.sm, ASSUMED_CUDA_MAJOR)
    return C.CUDA_CONTEXT_BYTES if measured is None else measured
