"""Lever advice: configuration changes that shrink the largest memory term, with the flags to ask
for them.

Each lever is a *change*: a dict of :class:`~constraints.config.TrainConfig` field values. The
configuration it is costed on is the old one with that change applied, and the flags it prints are
derived from the same change through :data:`FLAG_OF_FIELD` (the options of ``fitplan explain``),
so a printed lever cannot say one thing and cost another.

    from searcher.search.levers import advise
    e = advise(spec, cfg, gpu)
    e.levers[0].change, e.levers[0].flags
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from constraints.breakdown import Explanation, MemoryBreakdown, breakdown_of, explain, verdict_of
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.constants import DEFAULT_HEADROOM
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.hardware import describe, hardware_mask
from constraints.memory import TERMS
from constraints.models import ModelSpec
from constraints.precision import DEFAULT_RECIPE
from constraints.record import Record
from searcher.search.stack_profile import ENGINE_KNOBS

#: TrainConfig field -> the ``fitplan explain`` option that sets it (searcher/cli/parser.py
#: ``config_args`` in searcher/cli/args.py; tests/search/test_levers.py holds the two together). ``dp`` has no option: it
#: follows from ``--gpus`` / (tp · pp).
FLAG_OF_FIELD: dict[str, str] = {
    "method": "--method",
    "lora_rank": "--rank",
    "lora_targets": "--lora-targets",
    "lora_dropout": "--lora-dropout",
    "recipe": "--recipe",
    "weight_dtype": "--weight-dtype",
    "adapter_dtype": "--adapter-dtype",
    "compute_dtype": "--compute-dtype",
    "optimizer": "--optimizer",
    "quant": "--quant",
    "micro_batch": "--micro-batch",
    "seq_len": "--seq-len",
    "grad_accum": "--grad-accum",
    "checkpointing": "--checkpointing",
    "attention": "--attention",
    "loss": "--loss",
    "zero": "--zero",
    "offload": "--offload",
    "tp": "--tp",
    "pp": "--pp",
    "optimizer_in_backward": "--optimizer-in-backward",
    "backend": "--backend",
    "kernels": "--kernels",
    "fp8_recipe": "--fp8-recipe",
    "tp_comm_overlap": "--tp-comm-overlap",
    "virtual_stages": "--virtual-stages",
    "model_code": "--model-code",
    "attention_kernel": "--attention-kernel",
    "expandable_segments": "--expandable-segments",
    "fsdp_embedding_units": "--fsdp-embedding-units",
    "grad_sync": "--grad-sync",
}

#: (field, value) pairs the CLI has a shorter switch for (``--fused-ce`` = ``--loss fused``).
FLAG_SHORTCUTS: dict[tuple[str, object], str] = {("loss", "fused"): "--fused-ce"}

Change = dict[str, Any]


def flags_of(change: Change) -> str:
    """The command-line options that make ``change``, in the change's order."""
    out = []
    for field, value in change.items():
        if field == "dp":  # follows from --gpus / (tp · pp)
            continue
        if (field, value) in FLAG_SHORTCUTS:
            out.append(FLAG_SHORTCUTS[(field, value)])
        elif value is True:
            out.append(FLAG_OF_FIELD[field])
        else:
            out.append(f"{FLAG_OF_FIELD[field]} {value}")
    return " ".join(out)


def _to_lora(c: TrainConfig) -> Change | None:
    if c.method != "full":
        return None
    targets = {} if c.lora_targets == "all-linear" else {"lora_targets": "all-linear"}
    return {"method": "lora", "lora_rank": 16, **targets}


def _offload_optimizer(c: TrainConfig) -> Change | None:
    if c.offload != "none" or c.method != "full":
        return None
    adamw = {} if c.optimizer == "adamw" else {"optimizer": "adamw"}
    return {"zero": max(c.zero, 2), "offload": "optimizer", **adamw}


#: (term it attacks, what it does, the change it makes to a configuration or None where it does
#: not apply), the largest term's levers first at display.
LEVERS: list[tuple[str, str, Callable[[TrainConfig], Change | None]]] = [
    (
        "optimizer",
        "8-bit AdamW states (bitsandbytes)",
        lambda c: {"optimizer": "adamw-8bit"} if c.optimizer == "adamw" else None,
    ),
    (
        "optimizer",
        "bf16 states, no master copy (torch AdamW on a bf16 model)",
        lambda c: (
            {"recipe": "bf16-torch"}
            if c.recipe in ("bf16-master", "bf16-pure", "amp", "fp32")
            else None
        ),
    ),
    ("optimizer", "LoRA r=16 on all linear layers instead of full fine-tuning", _to_lora),
    ("optimizer", "offload optimizer states to CPU (ZeRO-Offload)", _offload_optimizer),
    (
        "optimizer",
        "shard optimizer states over the data-parallel GPUs (ZeRO-1)",
        lambda c: {"zero": 1} if c.zero == 0 and c.dp > 1 else None,
    ),
    ("gradients", "LoRA r=16 on all linear layers (gradients only for adapters)", _to_lora),
    (
        "gradients",
        "shard gradients too (ZeRO-2)",
        lambda c: {"zero": 2} if c.zero < 2 and c.dp > 1 else None,
    ),
    (
        "gradients",
        "step the optimizer inside backward (no full gradient set)",
        lambda c: (
            {"optimizer_in_backward": True, "grad_accum": 1}
            if c.gpus == 1 and not c.optimizer_in_backward
            else None
        ),
    ),
    (
        "weights",
        "QLoRA: 4-bit NF4 base with double quantisation",
        lambda c: {"method": "qlora", "quant": "nf4-dq"} if c.method in ("lora", "full") else None,
    ),
    (
        "weights",
        "double-quantise the NF4 constants (4.127 instead of 4.5 bits per weight)",
        lambda c: {"quant": "nf4-dq"} if c.quant == "nf4" else None,
    ),
    (
        "weights",
        "split the layers over GPUs (tensor parallel 2)",
        # on the same GPUs: the data-parallel degree halves (--gpus stays, dp = gpus / tp·pp)
        lambda c: {"tp": c.tp * 2, "dp": c.dp // 2} if c.dp % 2 == 0 and c.dp > 1 else None,
    ),
    (
        "weights",
        "shard the weights too (ZeRO-3 / FSDP full shard)",
        lambda c: {"zero": 3} if c.zero < 3 and c.dp > 1 else None,
    ),
    (
        "weights",
        "bf16 weights instead of fp32",
        lambda c: {"recipe": "bf16-master"} if c.recipe in ("fp32", "amp") else None,
    ),
    (
        "activations",
        "full activation checkpointing",
        lambda c: {"checkpointing": "full"} if c.checkpointing != "full" else None,
    ),
    (
        "activations",
        "fused linear cross-entropy (no vocabulary-sized logits)",
        lambda c: {"loss": "fused"} if c.loss != "fused" else None,
    ),
    (
        "activations",
        "flash / memory-efficient attention (no s² scores)",
        lambda c: {"attention": "sdpa"} if c.attention == "eager" else None,
    ),
    (
        "activations",
        "halve the micro-batch, double the accumulation (same effective batch)",
        lambda c: (
            {"micro_batch": c.micro_batch // 2, "grad_accum": c.grad_accum * 2}
            if c.micro_batch > 1
            else None
        ),
    ),
]


@frozen(slots=True, kw_only=True)
class Lever(Record):
    term: str
    change: str
    flags: str
    config: TrainConfig
    total: int
    saves: int
    fits: bool


@frozen(slots=True, kw_only=True)
class AdvisedExplanation(Explanation):
    """An explanation with the levers that shrink its peak."""

    levers: tuple[Lever, ...]


def apply(cfg: TrainConfig, change: Change) -> TrainConfig | None:
    """``cfg`` with ``change`` applied, or None where the result is not a valid configuration.

    A backend that was inferred (not given) is inferred again for the new knobs, as the CLI does
    when the printed flags are run; :func:`with_backend` adds it to the change where it moves."""
    fields = {**cfg.model_dump(), **change}
    if "backend" not in change and cfg.backend == cfg.inferred_backend():
        fields["backend"] = None
    try:
        return TrainConfig(**fields)
    except (FitplanError, ValueError):
        return None


def with_backend(cfg: TrainConfig, change: Change, new: TrainConfig) -> Change:
    """The change, plus ``backend`` where applying it moved the backend, ``recipe`` where the
    change names a distributed engine and the plan's recipe is not the engine's default, and
    ``checkpointing`` where it switches to QLoRA (so the flags, added to the command line, make
    the configuration the lever was costed on)."""
    out = dict(change)
    if new.backend != cfg.backend and "backend" not in change:
        out["backend"] = new.backend
    engine = any(k in change for k in ENGINE_KNOBS)
    if engine and "recipe" not in change and cfg.recipe != DEFAULT_RECIPE:
        out["recipe"] = cfg.recipe
    if new.method == "qlora" and cfg.method != "qlora" and "checkpointing" not in change:
        # a QLoRA plan that names no checkpointing takes prepare_model_for_kbit_training's
        # (on): the lever was costed with the plan's own
        out["checkpointing"] = new.checkpointing
    return out


def levers_for(
    spec: ModelSpec, cfg: TrainConfig, gpu: GpuSpec, b: MemoryBreakdown, headroom: float
) -> list[Lever]:
    """Each applicable lever with the total it gives, the largest term's levers first."""
    candidates = []
    for term, what, make in LEVERS:
        change = make(cfg)
        new = None if change is None else apply(cfg, change)
        if (
            new is not None
            and new.is_lora
            and spec.arch == "raw"
            and spec.raw_trainable_params is None
        ):
            continue  # raw numbers without --trainable-params cannot size an adapter
        if new is not None and change is not None and new != cfg:
            candidates.append((term, what, flags_of(with_backend(cfg, change, new)), new))
    if not candidates:
        return []
    results = breakdown_of(spec, [c[3] for c in candidates], gpu)
    mask = hardware_mask(spec, ConfigBatch.from_configs([c[3] for c in candidates]), gpu)
    order = sorted(TERMS, key=lambda t: -b.term(t))
    levers = [
        Lever(
            term=term,
            change=what,
            flags=flags,
            config=new,
            total=r.total,
            saves=b.total - r.total,
            fits=verdict_of(r, gpu, headroom, tuple(describe(int(m), spec, gpu))).fits,
        )
        for (term, what, flags, new), r, m in zip(candidates, results, mask, strict=True)
        if b.total - r.total > 0 and not m
    ]
    levers.sort(key=lambda lv: (order.index(lv.term), -lv.saves))
    return levers


def advise(
    spec: ModelSpec,
    cfg: TrainConfig,
    gpu: GpuSpec,
    headroom: float = DEFAULT_HEADROOM,
    **topology: Any,
) -> AdvisedExplanation:
    """:func:`constraints.breakdown.explain` plus the levers (what ``fitplan explain`` prints);
    ``topology``: gpus_per_node, inter_node_gb_s, nvlink_domain for the step time."""
    e = explain(spec, cfg, gpu, headroom, **topology)
    levers = tuple(levers_for(spec, cfg, gpu, e.breakdown, headroom))
    return AdvisedExplanation(**dict(e), levers=levers)
