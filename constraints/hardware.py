"""Hardware and layout feasibility rules, vectorised: each rule is a bit in a mask.

Sources: bf16 tensor cores need compute capability 8.0+ (Ampere); fp8 needs 8.9+ (Ada, Hopper);
FlashAttention-2 supports Ampere, Ada and Hopper (Dao-AILab/flash-attention README), elsewhere
PyTorch SDPA falls back to the memory-efficient kernel; tensor parallelism splits attention heads
and pipeline parallelism splits layers evenly (Megatron-LM); DeepSpeed's CPU offload steps with
DeepSpeedCPUAdam and bitsandbytes' 8-bit optimizers run on CUDA only.
"""

from __future__ import annotations

import numpy as np

from constraints.backend_rules import runnable_mask
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec

RULES: dict[int, str] = {
    1: "bf16 needs compute capability 8.0+ ({gpu} is {cc}): use --compute-dtype fp16",
    2: "fp8 needs compute capability 8.9+ ({gpu} is {cc})",
    4: "FlashAttention-2 needs Ampere or newer ({gpu}): use --attention sdpa",
    8: "tensor parallel degree must divide the attention heads ({heads}) and key/value heads ({kv})",
    16: "pipeline parallel degree must divide the layers ({layers})",
    32: "8-bit bitsandbytes optimizers run on the GPU: they cannot be combined with CPU offload",
    64: "the optimizer step fused into backward is single-GPU only (torchtune optimizer_in_bwd)",
    128: "tensor parallelism is not modelled for encoder-decoder models",
    256: "the backend does not run this combination (constraints/data/backends.json; "
    "`fitplan explain` names the reason)",
    512: "transformers has no SDPA attention for {family} (soft-capped scores or attention "
    "sinks): use --attention eager, or flash with flash-attn",
}


#: the rules the configuration alone breaks, whatever the card
LAYOUT_RULES = 8 | 16 | 32 | 64 | 128 | 256 | 512


def hardware_mask(spec: ModelSpec, batch: ConfigBatch, gpu: GpuSpec | None) -> np.ndarray:
    """Bitmask of violated rules per configuration (0 = feasible); ``gpu=None`` checks the
    layout rules only."""
    n = len(batch)
    mask = np.zeros(n, dtype=np.int64)
    if gpu is not None and not gpu.custom:
        uses_bf16 = (~batch.compute_is_fp16) & (batch.compute_bytes == 2) | (
            batch.weight_bytes == 2
        ) & ~batch.compute_is_fp16
        if not gpu.supports_bf16:
            mask |= np.where(uses_bf16, 1, 0)
        if not gpu.supports_fp8:
            mask |= np.where(batch.compute_is_fp8, 2, 0)
        if not gpu.supports_flash_attention:
            mask |= np.where(batch.attention == CODE["attention"]["flash"], 4, 0)
    tp = batch.tp
    kv_ok = (spec.kv_heads % tp == 0) | (tp % spec.kv_heads == 0)
    mask |= np.where((tp > 1) & ((spec.heads % tp != 0) | ~kv_ok), 8, 0)
    mask |= np.where((batch.pp > 1) & (spec.layers % batch.pp != 0), 16, 0)
    eight_bit = np.isin(
        batch.optimizer, [CODE["optimizer"]["adamw-8bit"], CODE["optimizer"]["paged-adamw-8bit"]]
    )
    mask |= np.where(eight_bit & (batch.offload != CODE["offload"]["none"]), 32, 0)
    mask |= np.where(batch.opt_in_bwd & (batch.gpus > 1), 64, 0)
    if spec.arch == "encoder-decoder":
        mask |= np.where(tp > 1, 128, 0)
    mask |= np.where(runnable_mask(batch), 0, 256)
    if not spec.sdpa_supported:
        mask |= np.where(batch.attention == CODE["attention"]["sdpa"], 512, 0)
    return mask


def describe(mask: int, spec: ModelSpec, gpu: GpuSpec | None) -> list[str]:
    return [
        text.format(
            gpu=gpu.name if gpu else "the GPU",
            cc=gpu.compute_capability if gpu else "?",
            heads=spec.heads,
            kv=spec.kv_heads,
            layers=spec.layers,
            family=spec.family,
        )
        for bit, text in RULES.items()
        if mask & bit
    ]
