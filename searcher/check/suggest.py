"""The smallest changes that make a configuration fit, ranked by the throughput they cost.

Candidate changes are single knob moves (``CHANGES``); sets of up to ``MAX_CHANGES`` of them are
evaluated together (memory and throughput models, vectorised), and a set is kept only if it fits
and no smaller kept set is inside it. Sets are ordered first by what they change — the same
training (micro-batch split, recomputation, fused loss, sharding, offload), then the optimizer's
numerics (8-bit states), then the method (LoRA / QLoRA) — and within that by tokens/s lost.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Any

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec

MAX_CHANGES = 3
#: what a change alters, in the order the suggestions are ranked
SAME_TRAINING, NUMERICS, METHOD = 0, 1, 2
KIND_NAMES = {
    SAME_TRAINING: "same training",
    NUMERICS: "optimizer numerics",
    METHOD: "what is trained",
}


@frozen
class Change:
    name: str
    group: str  # changes of one group exclude each other
    kind: int
    update: Callable[[TrainConfig], dict[str, Any] | None]


def _micro(m: int) -> Callable[[TrainConfig], dict[str, Any] | None]:
    def upd(c: TrainConfig) -> dict[str, Any] | None:
        if c.micro_batch <= m or c.micro_batch % m or c.optimizer_in_backward:
            return None
        return {"micro_batch": m, "grad_accum": c.grad_accum * (c.micro_batch // m)}

    return upd


CHANGES: tuple[Change, ...] = (
    *(Change(f"micro-batch {m}", "micro", SAME_TRAINING, _micro(m)) for m in (1, 2, 4, 8, 16, 32)),
    Change(
        "full activation checkpointing",
        "ckpt",
        SAME_TRAINING,
        lambda c: {"checkpointing": "full"} if c.checkpointing != "full" else None,
    ),
    Change(
        "fused linear cross-entropy",
        "loss",
        SAME_TRAINING,
        lambda c: {"loss": "fused"} if c.loss == "standard" else None,
    ),
    Change(
        "chunked cross-entropy",
        "loss",
        SAME_TRAINING,
        lambda c: {"loss": "chunked"} if c.loss == "standard" else None,
    ),
    Change(
        "ZeRO-2 (shard gradients and optimizer states)",
        "zero",
        SAME_TRAINING,
        lambda c: {"zero": 2} if c.zero < 2 and c.dp > 1 else None,
    ),
    Change(
        "ZeRO-3 / FSDP full shard",
        "zero",
        SAME_TRAINING,
        lambda c: {"zero": 3} if c.zero < 3 and c.dp > 1 else None,
    ),
    Change(
        "offload optimizer states to CPU",
        "offload",
        SAME_TRAINING,
        lambda c: (
            {"offload": "optimizer", "zero": max(c.zero, 2)}
            if c.offload == "none" and c.optimizer == "adamw"
            else None
        ),
    ),
    Change(
        "offload parameters and optimizer to CPU (ZeRO-3)",
        "offload",
        SAME_TRAINING,
        lambda c: (
            {"offload": "all", "zero": 3} if c.offload != "all" and c.optimizer == "adamw" else None
        ),
    ),
    Change(
        "8-bit AdamW states",
        "optimizer",
        NUMERICS,
        lambda c: (
            {"optimizer": "adamw-8bit"} if c.optimizer == "adamw" and c.offload == "none" else None
        ),
    ),
    Change(
        "LoRA r=16 on all linear layers",
        "method",
        METHOD,
        lambda c: (
            {"method": "lora", "lora_rank": 16, "lora_targets": "all-linear"}
            if c.method == "full"
            else None
        ),
    ),
    Change(
        "QLoRA (4-bit NF4 base, double-quantised)",
        "method",
        METHOD,
        lambda c: (
            {
                "method": "qlora",
                "quant": "nf4-dq",
                **({"lora_rank": 16, "lora_targets": "all-linear"} if c.method == "full" else {}),
            }
            if c.method in ("full", "lora")
            else None
        ),
    ),
)


@frozen
class Suggestion:
    changes: tuple[str, ...]
    kind: int
    config: TrainConfig
    needed: int
    usable: int
    tokens_per_s: float
    tokens_per_s_before: float

    @property
    def throughput_lost(self) -> float:
        """Fraction of tokens/s lost (negative: faster)."""
        if not self.tokens_per_s_before:
            return 0.0
        return 1.0 - self.tokens_per_s / self.tokens_per_s_before


def _apply(cfg: TrainConfig, changes: tuple[Change, ...]) -> TrainConfig | None:
    cur = cfg
    for ch in changes:
        upd = ch.update(cur)
        if upd is None:
            return None
        try:
            cur = TrainConfig(**{**cur.model_dump(), **upd})
        except (FitplanError, ValueError):
            return None
    return cur


def candidates(cfg: TrainConfig) -> list[tuple[tuple[Change, ...], TrainConfig]]:
    out = []
    seen: set[TrainConfig] = set()
    for n in range(1, MAX_CHANGES + 1):
        for combo in combinations(CHANGES, n):
            if len({c.group for c in combo}) < n:
                continue
            new = _apply(cfg, combo)
            if new is None or new == cfg or new in seen:
                continue
            seen.add(new)
            out.append((combo, new))
    return out


def evaluate(
    spec: ModelSpec, configs: list[TrainConfig], gpu: GpuSpec, headroom: float
) -> tuple[list[int], list[bool], list[float], int]:
    """(needed bytes, fits, tokens/s) per configuration, and the usable bytes."""
    from constraints.breakdown import breakdown_of, verdict_of
    from constraints.hardware import describe, hardware_mask
    from constraints.throughput import throughput_arrays

    batch = ConfigBatch.from_configs(configs)
    mems = breakdown_of(spec, configs, gpu)
    mask = hardware_mask(spec, batch, gpu)
    verdicts = [
        verdict_of(b, gpu, headroom, tuple(describe(int(m), spec, gpu)))
        for b, m in zip(mems, mask, strict=True)
    ]
    tps = throughput_arrays(spec, batch, gpu)["tokens_per_s"]
    return (
        [v.needed for v in verdicts],
        [v.fits for v in verdicts],
        [float(t) for t in tps],
        verdicts[0].usable,
    )


def suggest(
    spec: ModelSpec,
    cfg: TrainConfig,
    gpu: GpuSpec,
    headroom: float,
    accept: Callable[[TrainConfig], bool] | None = None,
    limit: int = 5,
    reserve: int = 0,
) -> list[Suggestion]:
    """Minimal change sets that fit, best first. ``accept`` says what the user's files can express
    (minimal among those); ``reserve`` bytes are kept free on top of the prediction (what a real
    out-of-memory showed the model under-predicts)."""
    cands = candidates(cfg)
    if not cands:
        return []
    needed, fits, tps, usable = evaluate(spec, [cfg] + [c for _, c in cands], gpu, headroom)
    before = tps[0]
    kept: list[tuple[tuple[Change, ...], int, TrainConfig, float]] = []
    for (combo, new), need, ok, t in zip(cands, needed[1:], fits[1:], tps[1:], strict=True):
        if not ok or need + reserve > usable:
            continue
        names = {c.name for c in combo}
        if any({c.name for c in k[0]} < names for k in kept):
            continue
        if accept is not None and not accept(new):
            continue
        kept.append((combo, need, new, t))
    if gpu.custom:  # a card given by its size has no compute figures: fewest changes, least memory
        kept.sort(key=lambda k: (max(c.kind for c in k[0]), len(k[0]), k[1]))
    else:
        kept.sort(key=lambda k: (max(c.kind for c in k[0]), -k[3], len(k[0])))
    out: list[Suggestion] = []
    for combo, need, new, t in kept:
        out.append(
            Suggestion(
                tuple(c.name for c in combo),
                max(c.kind for c in combo),
                new,
                need,
                usable,
                t,
                before,
            )
        )
        if len(out) >= limit:
            break
    return out
