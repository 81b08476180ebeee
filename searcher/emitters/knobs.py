"""The knobs every emitter must account for, and the one-line refusal of a knob a format lacks."""

from __future__ import annotations

from constraints.config import TrainConfig
from constraints.errors import FitplanError

#: the knobs every emitter must account for: the fields of TrainConfig
KNOB_NAMES: tuple[str, ...] = tuple(TrainConfig.model_fields)


def refuse(
    fmt: str, knob: str, value: object, reason: str, hint: str | None = None
) -> FitplanError:
    """The one-line refusal: which knob, which value, why the format cannot express it."""
    return FitplanError(f"--emit {fmt} cannot express {knob}={value}: {reason}", hint)


#: the speed-only knobs (issue 12), which no format emits yet: each format refuses a value other
#: than the default rather than launching a run that would not match the plan's step time
SPEED_KNOBS: dict[str, str] = {
    "kernels": "eager only (compile / te / liger are refused: not emitted yet)",
    "fp8_recipe": "tensorwise only with fp8 compute (other recipes are refused: not emitted yet)",
    "tp_comm_overlap": "off only (refused when on: not emitted yet)",
    "virtual_stages": "1 only (interleaved pipelines are refused: not emitted yet)",
    "model_code": "hf only (plans are timed with Hugging Face layer code; the torchtune / "
    "torchtitan layers describe measured runs)",
    "attention_kernel": "fa2 only (plans run FlashAttention-2 through flash-attn 2 / SDPA; fa1 "
    "describes measured runs)",
    "fsdp_embedding_units": "off only (the embedding and head stay in FSDP's root unit; "
    "torchtune's custom_sharded_layers describes measured runs, which `fitplan check` reads)",
    # not speed knobs but emitted by every format the same way: the allocator's mode, and when
    # gradients are reduced under accumulation (HF Trainer formats: sync_each_batch)
    "grad_sync": "each-micro-batch: accelerator_config gradient_accumulation_kwargs "
    "sync_each_batch true where FSDP shards the gradients and accumulates; last-micro-batch: "
    "false (the Trainer's default, FSDP no_sync); torchtune refuses last-micro-batch there",
    "expandable_segments": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the launch "
    "environment (train.py / the launch script / the launch command)",
    "loss_chain": "padded-labels only: the files pin a transformers release (versions.json) "
    "whose ForCausalLMLoss pads the labels (4.49+); a plan read for an older release is refused",
    "kbit_saves_input": "off only: the files install bitsandbytes >= 0.45, whose 4-bit matmul "
    "keeps no input; a plan read for bitsandbytes before 0.43.2 is refused",
}
_SPEED_DEFAULTS = {
    "kernels": "eager",
    "fp8_recipe": "tensorwise",
    "tp_comm_overlap": False,
    "model_code": "hf",
    "attention_kernel": "fa2",
    "fsdp_embedding_units": False,
}


def refuse_speed_knobs(fmt: str, cfg: TrainConfig) -> None:
    """Refuse a speed knob the format cannot emit (one line, exit 2)."""
    for knob, default in _SPEED_DEFAULTS.items():
        value = getattr(cfg, knob)
        if value != default and not (knob == "fp8_recipe" and cfg.compute_dtype != "fp8"):
            raise refuse(fmt, knob, value, "fitplan does not emit it yet", f"plan with {default}")
    if cfg.loss == "standard-held":
        raise refuse(
            fmt,
            "loss",
            cfg.loss,
            "it describes torchtune loops of 2024 that keep the fp32 logits through backward",
            "plan with standard",
        )
    if cfg.virtual_stages != 1:
        raise refuse(fmt, "virtual_stages", cfg.virtual_stages, "fitplan does not emit it yet")
    if cfg.loss_chain != "padded-labels":
        raise refuse(
            fmt,
            "loss_chain",
            cfg.loss_chain,
            "the files pin a transformers release whose loss pads the labels (4.49 or later)",
            "plan without --transformers, or with 4.49 or later",
        )
    if cfg.kbit_saves_input:
        raise refuse(
            fmt,
            "kbit_saves_input",
            True,
            "the files install bitsandbytes 0.45 or later, whose 4-bit matmul keeps no input",
            "plan without --bitsandbytes, or with 0.43.2 or later",
        )


def sync_each_batch(cfg: TrainConfig) -> bool | None:
    """accelerate's ``GradientAccumulationPlugin(sync_each_batch=...)`` that makes an HF Trainer
    run reduce gradients as the plan's ``grad_sync`` says; None where it changes nothing.

    The Trainer runs every micro-batch but the last under ``accelerator.no_sync`` unless
    ``sync_each_batch`` (transformers trainer.py: "We sync the gradients in the following cases:
    1. sync_each_batch set to True 2. Using deepspeed 3. when we are at the last batch"), and
    under FSDP that keeps every gradient unsharded (constraints/backend_memory.py
    ``unsynced_gradients``). It matters only where FSDP shards the gradients and accumulates."""
    sharded = cfg.backend in ("fsdp1", "fsdp2") and cfg.zero >= 2 and cfg.dp > 1
    if not sharded or cfg.grad_accum <= 1:
        return None
    return cfg.grad_sync == "each-micro-batch"


def refuse_unsynced(fmt: str, cfg: TrainConfig, loop: str) -> None:
    """Refuse grad_sync last-micro-batch where it would hold FSDP-sharded gradients unsharded and
    the format's training loop (``loop``: what it does instead) cannot skip the reduction."""
    if sync_each_batch(cfg) is False:
        raise refuse(fmt, "grad_sync", cfg.grad_sync, loop, "plan with each-micro-batch")
