"""Inference memory: weights + KV cache + the prefill workspace, per GPU.

KV cache = 2 (K and V) × layers × kv_heads × head_dim × bytes × tokens, tokens = batch × context
(MLA caches the compressed latent: (kv_lora_rank + rope dims) per token per layer, as serving
engines do). The prefill runs one layer at a time over the prompt without saving anything for
backward: its transient is about one layer's matmul outputs for the prompt; generate() computes
logits for the last position only (transformers logits_to_keep=1).
"""

from __future__ import annotations

from constraints import constants as C
from constraints.cuda_context import context_bytes as gpu_context_bytes
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.model_states import model_facts
from constraints.models import ModelSpec
from constraints.precision import QUANTS, dtype_bytes
from constraints.record import Record


@frozen(slots=True, kw_only=True)
class InferenceBreakdown(Record):
    weights: int
    kv_cache: int
    workspace: int
    cuda_context: int
    allocator_slack: int
    total: int


def kv_cache_bytes(spec: ModelSpec, tokens: int, kv_bytes: float = 2.0) -> int:
    """Bytes of K and V for ``tokens`` cached positions (summed over sequences)."""
    if spec.arch == "encoder" or (spec.arch == "raw" and spec.hidden <= 1):
        return 0  # encoders cache nothing; raw numbers without --hidden have no KV estimate
    if spec.is_mla:
        per_token_layer = (spec.kv_lora_rank + spec.qk_rope_head_dim) * kv_bytes
        return int(per_token_layer * spec.attention_layers * tokens)
    if spec.arch == "encoder-decoder":  # self + cross K/V
        return int(2 * spec.kv_width * kv_bytes * 2 * spec.layers * tokens)
    # a gated DeltaNet / Mamba layer keeps a fixed-size state, no K/V
    return int(spec.cached_kv_width * kv_bytes * tokens)


def recurrent_state_bytes(spec: ModelSpec, sequences: int, conv_bytes: float = 2.0) -> float:
    """What the layers without attention cache per sequence, whatever its length, bytes: a gated
    DeltaNet its fp32 recurrent state (H_v · d_k · d_v: torch_chunk_gated_delta_rule's
    ``last_recurrent_state`` is fp32) and its convolution's last K − 1 inputs, LFM2's short
    convolution those inputs alone (the model's dtype), a Mamba-2 mixer its fp32 H · P · N state
    (Nemotron-H's ``mamba_ssm_cache_dtype`` default) and its conv window."""
    key = spec.linear_key_heads * spec.linear_key_head_dim
    conv = 2 * key + spec.linear_value_heads * spec.linear_value_head_dim
    state = spec.linear_value_heads * spec.linear_key_head_dim * spec.linear_value_head_dim * 4.0
    window = (spec.linear_conv_kernel - 1) * conv_bytes
    deltanet = spec.linear_layers * (state + conv * window)
    short_conv = spec.layer_mixers.count("c") * spec.hidden * window
    inner = spec.ssm_heads * spec.ssm_head_dim
    ssm = inner * spec.ssm_state * 4.0 + (inner + 2 * spec.ssm_groups * spec.ssm_state) * window
    mamba = spec.mamba_layers * ssm
    return sequences * (deltanet + short_conv + mamba)


def prefill_workspace_bytes(spec: ModelSpec, tokens: int, sequences: int, tp: int = 1) -> float:
    """Transient bytes per GPU of a forward over ``tokens`` prompt tokens of ``sequences``
    sequences: one layer's matmul outputs (hidden-wide ×4, replicated on every tensor-parallel
    rank; MLP-wide ×3, split) for every token, 16-bit, and the fp32 logits of the last position
    of each sequence (vocabulary-parallel: split)."""
    if spec.hidden <= 1:
        return 0.0
    mlp = max(spec.intermediate, spec.moe_intermediate * max(spec.experts_per_token, 1))
    hidden_wide = tokens * 4 * spec.hidden * 2.0
    mlp_wide = tokens * 3 * mlp * 2.0 / tp
    logits = sequences * spec.vocab * 4.0 / tp
    return hidden_wide + mlp_wide + logits


def inference_memory(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    batch: int = 1,
    context: int = 2048,
    weight_dtype: str = "bf16",
    quant: str = "none",
    kv_dtype: str = "bf16",
    tp: int = 1,
) -> InferenceBreakdown:
    if batch <= 0 or context <= 0:
        raise FitplanError("inference batch and context must be positive")
    if quant not in QUANTS:
        raise FitplanError(f"unknown quantisation '{quant}'", f"use one of {', '.join(QUANTS)}")
    f = model_facts(spec)
    wb = dtype_bytes(weight_dtype)
    if quant != "none":
        q = QUANTS[quant]
        weights = f.quantizable * q.bytes_per_weight + (f.total - f.quantizable) * wb
        weights += 4.0 * f.quant_row_scales if q.per_row_fp32_scale else 0.0
    else:
        weights = f.total * wb
    tokens = batch * context
    kv: float = kv_cache_bytes(spec, tokens, dtype_bytes(kv_dtype))
    kv += recurrent_state_bytes(spec, batch, wb)
    workspace = prefill_workspace_bytes(spec, tokens, batch)
    if quant != "none":
        workspace += f.largest_linear * 2.0
    weights, kv, workspace = weights / tp, kv / tp, workspace / tp
    slack = C.SERVING_FRAGMENTATION_FRACTION * workspace
    context_bytes = gpu_context_bytes(gpu) + (C.NCCL_BUFFER_BYTES if tp > 1 else 0)
    total = weights + kv + workspace + slack + context_bytes
    return InferenceBreakdown(
        weights=int(weights),
        kv_cache=int(kv),
        workspace=int(workspace),
        cuda_context=int(context_bytes),
        allocator_slack=int(slack),
        total=int(total),
    )
