"""One configuration explained: every memory term and the verdict against the GPU.

The physics behind ``fitplan explain`` (its lever advice is :mod:`searcher.search.levers`)::

    from constraints import explain, TrainConfig, resolve_model, resolve_gpu
    e = explain(resolve_model("llama-3.1-8b"), TrainConfig(method="lora", micro_batch=2),
                resolve_gpu("rtx-4090"))
    e.breakdown.total, e.verdict.fits, e.verdict.needed
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from constraints import constants as C
from constraints.config import ConfigBatch, TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.hardware import describe, hardware_mask
from constraints.memory import PARTS, PHASES, TERMS, memory_arrays
from constraints.models import ModelSpec
from constraints.params import total_params

NumberOrArray = TypeVar("NumberOrArray", int, float, np.ndarray)


class MemoryBreakdown(BaseModel):
    """Bytes per GPU at the peak moment of a step. ``total`` = the five terms = what nvidia-smi
    shows at the peak; ``total − overhead`` = peak allocated; ``total − cuda_context`` = peak
    reserved."""

    model_config = ConfigDict(frozen=True)

    weights: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    total: int
    parts: dict[str, int]
    phase: str
    static: int
    static_weights: int
    static_gradients: int
    static_optimizer: int
    paged_optimizer: int
    cpu_bytes: int

    @property
    def cuda_context(self) -> int:
        return self.parts["cuda_context"]

    @property
    def allocator_slack(self) -> int:
        return self.parts["allocator_slack"]

    @property
    def allocated(self) -> int:
        return self.total - self.overhead

    @property
    def reserved(self) -> int:
        return self.total - self.cuda_context

    def term(self, name: str) -> int:
        return int(getattr(self, name))


class Verdict(BaseModel):
    """The breakdown against the card: usable = capacity − CUDA context − headroom; the
    allocator may reserve up to ``usable`` (``needed`` = peak reserved)."""

    model_config = ConfigDict(frozen=True)

    capacity: int
    cuda_context: int
    headroom: int
    usable: int
    needed: int
    fits: bool
    margin: int
    problems: tuple[str, ...] = ()


class Explanation(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    model: ModelSpec
    gpu: GpuSpec
    config: TrainConfig
    params_total: int
    params_trainable: int
    breakdown: MemoryBreakdown
    verdict: Verdict
    notes: tuple[str, ...]


def breakdown_of(
    spec: ModelSpec, configs: list[TrainConfig], gpu: GpuSpec
) -> list[MemoryBreakdown]:
    arrays = memory_arrays(spec, ConfigBatch.from_configs(configs), gpu)
    out = []
    for i in range(len(configs)):
        parts = {p: round(float(arrays[p][i])) for p in PARTS}
        terms = {t: sum(parts[p] for p in TERMS[t]) for t in TERMS}
        out.append(
            MemoryBreakdown(
                **terms,
                total=sum(terms.values()),
                parts=parts,
                phase=PHASES[int(arrays["phase"][i])],
                static=round(float(arrays["static"][i])),
                static_weights=round(float(arrays["static_weights"][i])),
                static_gradients=round(float(arrays["static_gradients"][i])),
                static_optimizer=round(float(arrays["static_optimizer"][i])),
                paged_optimizer=round(float(arrays["paged_optimizer"][i])),
                cpu_bytes=round(float(arrays["cpu_bytes"][i])),
            )
        )
    return out


def usable_bytes(gpu: GpuSpec, headroom: float = C.DEFAULT_HEADROOM) -> tuple[int, int, int]:
    """(usable, cuda_context, headroom bytes): what the PyTorch allocator may reserve."""
    if not 0 <= headroom < 1:
        raise FitplanError(f"--headroom {headroom} must be a fraction in [0, 1), e.g. 0.1 for 10 %")
    head = int(gpu.memory_bytes * headroom)
    return gpu.memory_bytes - C.CUDA_CONTEXT_BYTES - head, C.CUDA_CONTEXT_BYTES, head


def needed_bytes(total: NumberOrArray) -> NumberOrArray:
    """What must fit in :func:`usable_bytes`: the peak (nvidia-smi's view, ``total``) less the
    CUDA context that ``usable`` already sets aside = peak reserved + NCCL buffers."""
    return total - C.CUDA_CONTEXT_BYTES


def verdict_of(
    b: MemoryBreakdown, gpu: GpuSpec, headroom: float, problems: tuple[str, ...] = ()
) -> Verdict:
    usable, ctx, head = usable_bytes(gpu, headroom)
    needed = needed_bytes(b.total)
    return Verdict(
        capacity=gpu.memory_bytes,
        cuda_context=ctx,
        headroom=head,
        usable=usable,
        needed=needed,
        fits=needed <= usable and not problems,
        margin=usable - needed,
        problems=problems,
    )


def explain(
    spec: ModelSpec, cfg: TrainConfig, gpu: GpuSpec, headroom: float = C.DEFAULT_HEADROOM
) -> Explanation:
    b = breakdown_of(spec, [cfg], gpu)[0]
    mask = int(hardware_mask(spec, ConfigBatch.from_configs([cfg]), gpu)[0])
    problems = tuple(describe(mask, spec, gpu))
    verdict = verdict_of(b, gpu, headroom, problems)
    notes = []
    if spec.caveats:
        notes.append(spec.caveats)
    if cfg.is_lora and cfg.adapter_dtype is None:
        notes.append(
            "adapters are held in the recipe's weight dtype; PEFT keeps them in fp32 by default "
            "(autocast_adapter_dtype=True): add --adapter-dtype fp32 to model that"
        )
    if b.paged_optimizer:
        notes.append(
            "paged optimizer states live in CUDA unified memory: evicted to CPU RAM under pressure, "
            "not counted by torch.cuda.max_memory_allocated, so they are reported beside the total"
        )
    if b.phase != "loss backward":
        notes.append(
            f"the peak is at the {b.phase}; gradients are freed between steps (zero_grad set_to_none)"
        )
    trainable = round(
        float(memory_arrays(spec, ConfigBatch.from_configs([cfg]), gpu)["trainable"][0])
    )
    return Explanation(
        model=spec,
        gpu=gpu,
        config=cfg,
        params_total=total_params(spec),
        params_trainable=trainable,
        breakdown=b,
        verdict=verdict,
        notes=tuple(notes),
    )
