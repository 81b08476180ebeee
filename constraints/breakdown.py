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

from constraints import constants as C
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.cuda_context import context_bytes
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.hardware import describe, hardware_mask
from constraints.memory import PARTS, PHASES, TERMS, memory_arrays
from constraints.models import ModelSpec
from constraints.params import total_params
from constraints.record import Record
from constraints.speed import StepTime, speed_of

NumberOrArray = TypeVar("NumberOrArray", int, float, np.ndarray)


@frozen(slots=True, kw_only=True)
class MemoryBreakdown(Record):
    """Bytes per GPU at the peak moment of a step. ``total`` = the five terms = what nvidia-smi
    shows at the peak; ``total − overhead − paged`` = peak allocated (bitsandbytes' paged states
    are cudaMallocManaged memory, outside the PyTorch allocator's counts); + slack = peak
    reserved."""

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
    def nccl_buffers(self) -> int:
        return self.parts["nccl_buffers"]

    @property
    def allocated(self) -> int:
        return self.total - self.overhead - self.paged_optimizer

    @property
    def reserved(self) -> int:
        return self.allocated + self.allocator_slack

    def term(self, name: str) -> int:
        return int(getattr(self, name))


@frozen(slots=True, kw_only=True)
class Verdict(Record):
    """The breakdown against the card: usable = capacity − CUDA context − headroom; the
    allocator may reserve up to ``usable`` (``needed`` = peak reserved)."""

    capacity: int
    cuda_context: int
    headroom: int
    usable: int
    needed: int
    fits: bool
    margin: int
    problems: tuple[str, ...] = ()


@frozen(slots=True, kw_only=True)
class Explanation(Record):
    model: ModelSpec
    gpu: GpuSpec
    config: TrainConfig
    params_total: int
    params_trainable: int
    breakdown: MemoryBreakdown
    verdict: Verdict
    notes: tuple[str, ...]
    #: step time, tokens/s, MFU and the step's parts (whether the configuration fits or not)
    speed: StepTime | None = None


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
    context = context_bytes(gpu)
    return gpu.memory_bytes - context - head, context, head


def room_bytes(gpu: GpuSpec, headroom: float = C.DEFAULT_HEADROOM) -> int:
    """Capacity less headroom: the room the peak nvidia-smi shows must fit in (the figure every
    screen compares a peak with; :func:`usable_bytes` is the same less the CUDA context)."""
    usable, context, _head = usable_bytes(gpu, headroom)
    return usable + context


def peak_bytes(needed: float, gpu: GpuSpec) -> float:
    """The peak nvidia-smi shows for what :func:`needed_bytes` says must fit: plus the CUDA
    context that the usable figure sets aside."""
    return needed + context_bytes(gpu)


def needed_bytes(
    total: NumberOrArray,
    paged: NumberOrArray | float = 0.0,
    usable: float | None = None,
    *,
    context: int,
) -> NumberOrArray:
    """What must fit in :func:`usable_bytes`: the peak (nvidia-smi's view, ``total``) less the
    CUDA context that ``usable`` already sets aside (``context``: the GPU's,
    constraints/cuda_context.py) = peak reserved + NCCL buffers + paged states.
    Paged states (CUDA unified memory) stay on the GPU while there is room; beyond ``usable``
    the driver pages them to CPU RAM (at a cost in time, constraints/throughput.py), so the
    part of them over ``usable`` is not needed on the card."""
    on_card = total - context
    if usable is None:
        return on_card
    spill = np.clip(np.asarray(on_card, dtype=float) - usable, 0.0, paged)
    out = on_card - spill
    return out if isinstance(out, np.ndarray) else type(total)(out)  # type: ignore[return-value]


def verdict_of(
    b: MemoryBreakdown, gpu: GpuSpec, headroom: float, problems: tuple[str, ...] = ()
) -> Verdict:
    usable, ctx, head = usable_bytes(gpu, headroom)
    needed = needed_bytes(b.total, b.paged_optimizer, usable, context=ctx)
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
    spec: ModelSpec,
    cfg: TrainConfig,
    gpu: GpuSpec,
    headroom: float = C.DEFAULT_HEADROOM,
    *,
    gpus_per_node: int = 8,
    inter_node_gb_s: float | None = None,
    nvlink_domain: int | None = None,
) -> Explanation:
    b = breakdown_of(spec, [cfg], gpu)[0]
    mask = int(hardware_mask(spec, ConfigBatch.from_configs([cfg]), gpu)[0])
    problems = tuple(describe(mask & ~256, spec, gpu))
    if mask & 256:
        problems += (f"{cfg.backend_problem()} (constraints/data/backends.json)",)
    verdict = verdict_of(b, gpu, headroom, problems)
    notes = []
    if spec.caveats:
        notes.append(spec.caveats)
    base = cfg.base_adapter_dtype() if cfg.is_lora else "fp32"
    if cfg.is_lora and cfg.adapter_dtype is None and cfg.trainable_dtype() == "fp32" != base:
        prepared = bool(ConfigBatch.from_configs([cfg]).kbit_prepared[0])
        notes.append(
            "adapters in fp32, PEFT's default (autocast_adapter_dtype=True)"
            + ("; PEFT's QLoRA recipe: the non-quantised parameters in fp32" if prepared else "")
            + f"; --adapter-dtype {cfg.base_adapter_dtype()} models adapters in the base's dtype"
        )
    if b.paged_optimizer:
        notes.append(
            "paged optimizer states live in CUDA unified memory: resident on the GPU (counted in "
            "the total, and in nvidia-smi, though not in torch.cuda.max_memory_allocated) unless "
            "the card is oversubscribed; then each step pages the excess to CPU RAM and back over "
            "PCIe (2 x the excess / PCIe bandwidth per step)"
        )
    if cfg.checkpointing == "selective" and cfg.attention != "eager":
        if cfg.backend == "fsdp2" and cfg.method == "full":
            notes.append(
                "selective under FSDP2 is torchtitan's per-op policy: it keeps every other matmul "
                "output and the attention output of each layer, and recomputes the rest"
            )
        else:
            notes.append(
                f"selective recomputation (Korthikanti et al.) drops the attention scores, which "
                f"{cfg.attention} attention never saves: under {cfg.backend} it changes nothing; "
                "per-op selective checkpointing is modelled for --backend fsdp2 (torchtitan), "
                "full fine-tuning"
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
        # a card known only by its memory (--gpu 24GiB) has no compute or bandwidth to time
        speed=None
        if gpu.custom
        else speed_of(
            spec,
            cfg,
            gpu,
            gpus_per_node=gpus_per_node,
            **({"inter_node_gb_s": inter_node_gb_s} if inter_node_gb_s else {}),
            nvlink_domain=nvlink_domain,
        ),
    )
