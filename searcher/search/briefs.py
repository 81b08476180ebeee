"""One-line descriptions of a configuration: the knobs as a person reads them."""

from __future__ import annotations

from typing import Any

from constraints.config import TrainConfig


def recipe_label(cfg: Any) -> str:
    """The recipe named by the dtype the run computes in: ``fp16-torch`` for ``--recipe bf16-torch
    --compute-dtype fp16`` (a T4 run), ``amp-fp16``; the --recipe name where they agree."""
    compute = getattr(cfg, "compute_dtype", None)
    name = str(cfg.recipe)
    if compute == "fp16" and name.startswith("bf16-"):
        return "fp16-" + name.removeprefix("bf16-")
    if compute in ("fp16", "fp8") and name == "amp":
        return f"amp-{compute}"
    if compute == "fp8" and name.startswith("bf16-"):
        return f"{name} fp8"
    if compute == "fp32" and name != "fp32":
        return f"{name} fp32"
    return name


def config_brief(cfg: Any) -> str:
    parts = [cfg.method]
    if cfg.method != "full":
        parts.append(f"r={cfg.lora_rank} {cfg.lora_targets}")
    if cfg.quant != "none":
        parts.append(cfg.quant)
    parts += [
        recipe_label(cfg),
        cfg.optimizer,
        f"mb={cfg.micro_batch}×{cfg.seq_len}",
        f"accum={cfg.grad_accum}",
    ]
    if getattr(cfg, "grad_sync", "each-micro-batch") == "last-micro-batch":
        parts.append("sync=last")
    if cfg.checkpointing != "none":
        parts.append(f"ckpt={cfg.checkpointing}")
    parts.append(cfg.attention)
    if cfg.loss != "standard":
        parts.append(f"{cfg.loss}-CE")
    if cfg.zero:
        parts.append(f"zero{cfg.zero}")
    if cfg.offload != "none":
        parts.append(f"offload={cfg.offload}")
    if cfg.tp > 1 or cfg.pp > 1 or cfg.dp > 1:
        parts.append(f"tp{cfg.tp}·pp{cfg.pp}·dp{cfg.dp}")
    backend = getattr(cfg, "backend", None)
    if backend:
        parts.append(f"backend={backend}")
    return " ".join(parts)


def knobs_brief(cfg: TrainConfig) -> str:
    parts = [str(cfg.backend)]
    if cfg.zero:
        parts.append(f"ZeRO-{cfg.zero}")
    if cfg.offload != "none":
        parts.append(f"{cfg.offload} offload")
    if cfg.tp > 1 or cfg.pp > 1:
        parts.append(f"tp{cfg.tp} pp{cfg.pp}")
    parts.append(
        {
            "adamw": "AdamW",
            "adamw-8bit": "8-bit AdamW",
            "paged-adamw-8bit": "paged 8-bit AdamW",
        }.get(cfg.optimizer, cfg.optimizer)
    )
    if cfg.method != "full":
        parts.append(f"r={cfg.lora_rank}")
    if cfg.quant != "none":
        parts.append(cfg.quant)
    parts.append(
        f"{cfg.checkpointing} checkpointing" if cfg.checkpointing != "none" else "no checkpointing"
    )
    parts.append(f"micro-batch {cfg.micro_batch}")
    if cfg.grad_sync == "last-micro-batch" and cfg.grad_accum > 1:
        parts.append("gradients reduced on the last micro-batch (no_sync)")
    if cfg.gpus > 1:
        parts.append(f"{cfg.gpus} GPUs")
    return ", ".join(parts)
