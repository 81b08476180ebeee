"""Serving speed from the training model's roofline (constraints.throughput): prefill and decode.

Every matmul runs at ``max(FLOPs / (peak × η_gemm), bytes / bandwidth)`` with the same fitted
η_gemm and η_attention the training model uses; tensor parallelism divides both and adds two
all-reduces of the activations per layer (constraints.throughput.collective_seconds).

    prefill (compute-bound): a prompt of C tokens in chunks of max_num_batched_tokens; each chunk
        multiplies every weight (2 FLOPs per weight per token) and attends causally to the
        prompt so far (4 · q_width FLOPs per token per cached position per layer); the logits
        only for the last position (vLLM samples the last token of a prompt).
    decode (bandwidth-bound): one step produces a token for each of B requests; it reads every
        weight once (a routed expert only when some request picks it: 1 − (1 − k/E)^B of them)
        and every request's live KV cache at context C, at η_decode of the HBM peak.

Not counted: the scheduler, sampling and detokenisation on the host (vLLM overlaps most of it),
speculative decoding, prefix caching: the figures are the GPU's bound.
"""

from __future__ import annotations

import numpy as np

from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.matmul_ceiling import gemm_ceiling_scale
from constraints.models import ModelSpec
from constraints.serving import WEIGHT_BITS, ServingMemory, serving_weight_bytes
from constraints.throughput import collective_seconds, intra_node_bandwidth, model_gemms
from constraints.throughput_constants import ETA_ATTENTION, ETA_GEMM, FA2_HOPPER_SHARE

#: Fraction of the HBM peak that decode's weight and KV reads reach (GEMV-shaped matmuls and
#: paged attention). Assumed, not fitted (fitplan has no serving measurements yet): memory-bound
#: kernels reach 80–90 % of peak DRAM bandwidth on A100/H100 (NVIDIA's STREAM-like bandwidthTest
#: figures); the KV gather of paged attention somewhat less.
ETA_DECODE_BANDWIDTH = 0.8
#: Latency floor of one small all-reduce inside a node (NCCL / vLLM custom all-reduce over NVLink
#: moves a decode step's few kilobytes in ~10 µs). Assumed, not fitted.
ALLREDUCE_LATENCY_S = 10e-6


@frozen
class ServingSpeed:
    """Tokens/s and latencies of one deployment (all its GPUs together)."""

    prefill_tokens_per_s: float
    time_to_first_token_s: float
    decode_step_s: float
    decode_tokens_per_s_per_request: float
    decode_tokens_per_s: float
    decode_bytes_per_step: float
    concurrency: int
    context: int


def _peak(gpu: GpuSpec, weights: str) -> float:
    """Dense peak FLOP/s of the matmuls: fp8 weights run fp8 GEMMs where the card has them."""
    bf16 = gpu.bf16_tflops or gpu.fp16_tflops
    peak = gpu.fp8_tflops if weights == "fp8" and gpu.fp8_tflops else bf16
    return max(peak, 1e-3) * 1e12


def _matmul_split(spec: ModelSpec) -> tuple[float, float, float]:
    """(weight elements a token multiplies by without the head, the head's, routed-expert
    weight elements of the whole model)."""
    body = head = experts = 0.0
    for g in model_gemms(spec):
        if g.key == "lm_head":
            head += g.params_per_token
            continue
        body += g.params_per_token
        if g.token_share < 1.0:
            experts += g.d_in * g.d_out * g.instances
    return body, head, experts


def _tp_allreduce_s(spec: ModelSpec, gpu: GpuSpec, tokens: float, tp: int) -> float:
    """Two all-reduces of the activations per layer (after attention and after the MLP)."""
    if tp <= 1:
        return 0.0
    intra = intra_node_bandwidth(gpu)
    volume = np.array([tokens * spec.hidden * 2.0])
    one = float(collective_seconds(volume, np.array([tp]), np.array([tp]), intra, intra)[0])
    return 2.0 * spec.layers * (one + ALLREDUCE_LATENCY_S)


def _attention_flops(spec: ModelSpec, queries: float, positions: float) -> float:
    """Q·Kᵀ and P·V: 2 matmuls × 2 FLOPs × q_width per query per cached position, every layer."""
    return 4.0 * queries * positions * spec.q_width * spec.layers


def serving_speed(
    spec: ModelSpec,
    gpu: GpuSpec,
    memory: ServingMemory,
    *,
    weights: str,
    context: int,
    concurrency: int,
    max_num_batched_tokens: int,
) -> ServingSpeed:
    tp = memory.tp
    peak = _peak(gpu, weights) * tp
    bw = gpu.bandwidth_gb_s * 1e9 * tp
    hopper = gpu.sm is not None and 9.0 <= gpu.sm < 10.0
    eta_attn = ETA_ATTENTION * (FA2_HOPPER_SHARE if hopper else 1.0)
    eta_gemm = ETA_GEMM * gemm_ceiling_scale(gpu)  # the GPU's measured matmul ceiling
    weight_bytes = serving_weight_bytes(spec, weights)
    body, head, expert_params = _matmul_split(spec)

    # ---- prefill: one prompt of `context` tokens, chunk by chunk ----
    chunk = min(max_num_batched_tokens, context)
    chunks = -(-context // chunk)
    gemm_s = max(2.0 * context * body / (peak * eta_gemm), chunks * weight_bytes / bw)
    head_s = 2.0 * head / (peak * eta_gemm)
    attn_s = _attention_flops(spec, context, context / 2.0) / (peak * eta_attn)
    comm_s = chunks * _tp_allreduce_s(spec, gpu, chunk, tp)
    ttft = gemm_s + head_s + attn_s + comm_s

    # ---- decode: B requests, each at `context` cached tokens ----
    b = float(concurrency)
    experts_read = 1.0
    if spec.is_moe and spec.num_experts:
        experts_read = 1.0 - (1.0 - spec.experts_per_token / spec.num_experts) ** b
    unread_experts = expert_params * (1.0 - experts_read) * WEIGHT_BITS[weights] / 8
    weight_read = weight_bytes - unread_experts
    kv_read = b * context * memory.kv_bytes_per_token_per_gpu * tp
    step_bytes = weight_read + kv_read
    step_flops = 2.0 * b * (body + head) + _attention_flops(spec, b, context)
    step = max(step_bytes / (bw * ETA_DECODE_BANDWIDTH), step_flops / (peak * eta_gemm))
    step += _tp_allreduce_s(spec, gpu, b, tp)
    return ServingSpeed(
        prefill_tokens_per_s=context / ttft,
        time_to_first_token_s=ttft,
        decode_step_s=step,
        decode_tokens_per_s_per_request=1.0 / step,
        decode_tokens_per_s=b / step,
        decode_bytes_per_step=step_bytes,
        concurrency=concurrency,
        context=context,
    )
