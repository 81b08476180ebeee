"""One configuration explained: every memory term, the verdict against the GPU, and the lever.

This is the Python API behind ``fitplan explain``::

    from constraints import explain, TrainConfig, resolve_model, resolve_gpu
    e = explain(resolve_model("llama-3.1-8b"), TrainConfig(method="lora", micro_batch=2),
                resolve_gpu("rtx-4090"))
    e.breakdown.total, e.verdict.fits, e.levers[0].change
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from constraints import constants as C
from constraints.config import ConfigBatch, TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.hardware import describe, hardware_mask
from constraints.memory import PARTS, PHASES, TERMS, memory_arrays
from constraints.models import ModelSpec
from constraints.params import total_params


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


class Lever(BaseModel):
    model_config = ConfigDict(frozen=True)

    term: str
    change: str
    flags: str
    config: TrainConfig
    total: int
    saves: int
    fits: bool


class Explanation(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    model: ModelSpec
    gpu: GpuSpec
    config: TrainConfig
    params_total: int
    params_trainable: int
    breakdown: MemoryBreakdown
    verdict: Verdict
    levers: tuple[Lever, ...]
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


def verdict_of(
    b: MemoryBreakdown, gpu: GpuSpec, headroom: float, problems: tuple[str, ...] = ()
) -> Verdict:
    usable, ctx, head = usable_bytes(gpu, headroom)
    needed = b.reserved + (
        b.cuda_context - C.CUDA_CONTEXT_BYTES
    )  # NCCL buffers count against usable
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


# levers: (term they attack, description, flags, how to change the config)
_LeverFn = Callable[[TrainConfig], TrainConfig | None]


def _upd(cfg: TrainConfig, **kw: object) -> TrainConfig | None:
    try:
        return TrainConfig(**{**cfg.model_dump(), **kw})
    except (FitplanError, ValueError):
        return None


_LEVERS: list[tuple[str, str, str, _LeverFn]] = [
    (
        "optimizer",
        "8-bit AdamW states (bitsandbytes)",
        "--optimizer adamw-8bit",
        lambda c: _upd(c, optimizer="adamw-8bit") if c.optimizer == "adamw" else None,
    ),
    (
        "optimizer",
        "bf16 states, no master copy (torch AdamW on a bf16 model)",
        "--recipe bf16-torch",
        lambda c: (
            _upd(c, recipe="bf16-torch")
            if c.recipe in ("bf16-master", "bf16-pure", "amp", "fp32")
            else None
        ),
    ),
    (
        "optimizer",
        "LoRA r=16 on all linear layers instead of full fine-tuning",
        "--method lora --rank 16",
        lambda c: (
            _upd(c, method="lora", lora_rank=16, lora_targets="all-linear")
            if c.method == "full"
            else None
        ),
    ),
    (
        "optimizer",
        "offload optimizer states to CPU (ZeRO-Offload)",
        "--zero 2 --offload optimizer",
        lambda c: (
            _upd(c, zero=max(c.zero, 2), offload="optimizer", optimizer="adamw")
            if c.offload == "none" and c.method == "full"
            else None
        ),
    ),
    (
        "optimizer",
        "shard optimizer states over the data-parallel GPUs (ZeRO-1)",
        "--zero 1",
        lambda c: _upd(c, zero=1) if c.zero == 0 and c.dp > 1 else None,
    ),
    (
        "gradients",
        "LoRA r=16 on all linear layers (gradients only for adapters)",
        "--method lora --rank 16",
        lambda c: (
            _upd(c, method="lora", lora_rank=16, lora_targets="all-linear")
            if c.method == "full"
            else None
        ),
    ),
    (
        "gradients",
        "shard gradients too (ZeRO-2)",
        "--zero 2",
        lambda c: _upd(c, zero=2) if c.zero < 2 and c.dp > 1 else None,
    ),
    (
        "gradients",
        "step the optimizer inside backward (no full gradient set)",
        "--optimizer-in-backward --grad-accum 1",
        lambda c: (
            _upd(c, optimizer_in_backward=True, grad_accum=1)
            if c.gpus == 1 and not c.optimizer_in_backward
            else None
        ),
    ),
    (
        "weights",
        "QLoRA: 4-bit NF4 base with double quantisation",
        "--method qlora --quant nf4-dq",
        lambda c: _upd(c, method="qlora", quant="nf4-dq") if c.method in ("lora", "full") else None,
    ),
    (
        "weights",
        "double-quantise the NF4 constants (4.127 instead of 4.5 bits per weight)",
        "--quant nf4-dq",
        lambda c: _upd(c, quant="nf4-dq") if c.quant == "nf4" else None,
    ),
    (
        "weights",
        "split the layers over GPUs (tensor parallel 2)",
        "--tp 2",
        lambda c: _upd(c, tp=c.tp * 2) if c.dp % 2 == 0 and c.dp > 1 else None,
    ),
    (
        "weights",
        "shard the weights too (ZeRO-3 / FSDP full shard)",
        "--zero 3",
        lambda c: _upd(c, zero=3) if c.zero < 3 and c.dp > 1 else None,
    ),
    (
        "weights",
        "bf16 weights instead of fp32",
        "--recipe bf16-master",
        lambda c: _upd(c, recipe="bf16-master") if c.recipe in ("fp32", "amp") else None,
    ),
    (
        "activations",
        "full activation checkpointing",
        "--checkpointing full",
        lambda c: _upd(c, checkpointing="full") if c.checkpointing != "full" else None,
    ),
    (
        "activations",
        "fused linear cross-entropy (no vocabulary-sized logits)",
        "--fused-ce",
        lambda c: _upd(c, loss="fused") if c.loss != "fused" else None,
    ),
    (
        "activations",
        "flash / memory-efficient attention (no s² scores)",
        "--attention sdpa",
        lambda c: _upd(c, attention="sdpa") if c.attention == "eager" else None,
    ),
    (
        "activations",
        "halve the micro-batch, double the accumulation (same effective batch)",
        "--micro-batch {mb} --grad-accum {ga}",
        lambda c: (
            _upd(c, micro_batch=c.micro_batch // 2, grad_accum=c.grad_accum * 2)
            if c.micro_batch > 1
            else None
        ),
    ),
]


def levers_for(
    spec: ModelSpec, cfg: TrainConfig, gpu: GpuSpec, b: MemoryBreakdown, headroom: float
) -> list[Lever]:
    """Each applicable lever with the total it gives, the largest term's levers first."""
    candidates = []
    for term, change, flags, fn in _LEVERS:
        new = fn(cfg)
        if (
            new is not None
            and new.is_lora
            and spec.arch == "raw"
            and spec.raw_trainable_params is None
        ):
            continue  # raw numbers without --trainable-params cannot size an adapter
        if new is not None and new != cfg:
            candidates.append(
                (term, change, flags.format(mb=new.micro_batch, ga=new.grad_accum), new)
            )
    if not candidates:
        return []
    results = breakdown_of(spec, [c[3] for c in candidates], gpu)
    mask = hardware_mask(spec, ConfigBatch.from_configs([c[3] for c in candidates]), gpu)
    order = sorted(TERMS, key=lambda t: -b.term(t))
    levers = [
        Lever(
            term=term,
            change=change,
            flags=flags,
            config=new,
            total=r.total,
            saves=b.total - r.total,
            fits=verdict_of(r, gpu, headroom, tuple(describe(int(m), spec, gpu))).fits,
        )
        for (term, change, flags, new), r, m in zip(candidates, results, mask, strict=True)
        if b.total - r.total > 0 and not m
    ]
    levers.sort(key=lambda lv: (order.index(lv.term), -lv.saves))
    return levers


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
        levers=tuple(levers_for(spec, cfg, gpu, b, headroom)),
        notes=tuple(notes),
    )
