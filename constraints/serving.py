"""Serving memory: how many requests of what context fit on a GPU under a paged KV cache.

Per GPU, with vLLM's semantics (vllm/v1/worker/gpu_worker.py ``determine_available_memory``):

    budget       = gpu_memory_utilization × device memory                 (default 0.9)
    non-KV       = weights / tp                                            (quantised or not)
                 + activations of the largest prefill chunk (the profile run: max_num_batched_tokens)
                 + CUDA context (+ NCCL buffers when tp > 1) + CUDA graphs
    KV budget    = budget − non-KV
    page         = 2 (K and V) × block_size × kv_heads_per_gpu × head_dim × kv bytes, per layer
                   (vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes; MLA caches one
                   latent of kv_lora_rank + rope dims, coefficient 1)
    blocks       = ⌊KV budget / (page × layers)⌋
    concurrency  = ⌊blocks / ⌈context / block_size⌉⌋                      (prefix sharing off)

Tensor parallelism splits the weights and the KV heads: ``max(1, kv_heads // tp)`` heads per GPU
(vLLM ModelConfig.get_num_kv_heads: replicated when tp > kv_heads); an MLA latent is replicated
on every rank. Sliding-window layers are costed as full attention (an upper bound).
"""

from __future__ import annotations

import math

from constraints import constants as C
from constraints.cuda_context import context_bytes
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.inference import kv_cache_bytes, prefill_workspace_bytes
from constraints.limits import KV_BLOCK_SIZES
from constraints.memory import model_facts
from constraints.models import ModelSpec
from constraints.precision import QUANTS
from constraints.units import GiB

#: Bits per quantisable (transformer-block linear) weight of each serving weight format; the
#: embeddings, output head and norms stay 16-bit in every one of them (vLLM keeps lm_head and
#: embed_tokens unquantised for fp8, AWQ, GPTQ and bitsandbytes).
#:   bf16/fp16: 16. fp8 (vLLM Fp8LinearMethod, per-tensor fp32 scale): 8.
#:   int8 / nf4 / nf4-dq: bitsandbytes, as in training (constraints.precision.QUANTS).
#:   int4: AWQ/GPTQ, group size 128, an fp16 scale and a packed 4-bit zero point per group per
#:   output column: 4 + (16 + 4)/128 bits (AutoAWQ WQLinear_GEMM qweight/qzeros/scales).
WEIGHT_BITS: dict[str, float] = {
    "bf16": 16.0,
    "fp16": 16.0,
    "fp8": 8.0,
    "int8": QUANTS["int8"].bits_per_weight,
    "nf4": QUANTS["nf4"].bits_per_weight,
    "nf4-dq": QUANTS["nf4-dq"].bits_per_weight,
    "int4": 4.0 + (16.0 + 4.0) / 128,
}

#: Bytes per cached K or V element by vLLM ``--kv-cache-dtype`` (auto = the model's 16-bit dtype;
#: fp8 = fp8_e4m3 or fp8_e5m2, one byte).
KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp32": 4.0,
}

#: vLLM's default KV block size on CUDA, tokens (CacheConfig.block_size = 16).
DEFAULT_BLOCK_SIZE = 16
#: vLLM's default ``gpu_memory_utilization`` (CacheConfig): 10 % of the device left free.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

#: CUDA graphs captured for decode batch sizes (vLLM logs "Graph capturing finished in N secs,
#: took X GiB": 0.11, 0.31 and 0.96 GiB in public logs of 1–70B models). Counted inside the
#: budget; ``enforce_eager`` captures none.
CUDA_GRAPH_BYTES = GiB // 2


def serving_batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of vLLM's OpenAI server on this GPU:
    8192 / 1024 on a card of ≥ 70 GiB that is not an A100, else 2048 / 256
    (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, UsageContext.OPENAI_API_SERVER)."""
    big = gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.id.lower()
    return (8192, 1024) if big else (2048, 256)


def kv_heads_per_gpu(spec: ModelSpec, tp: int) -> int:
    """KV heads one tensor-parallel rank holds (vLLM: max(1, kv_heads // tp))."""
    return max(1, spec.kv_heads // tp)


def kv_bytes_per_token(spec: ModelSpec, kv_bytes: float) -> int:
    """Bytes of K and V one token adds to the cache of the whole model (one copy, no TP)."""
    return kv_cache_bytes(spec, 1, kv_bytes)


def kv_bytes_per_token_per_gpu(spec: ModelSpec, kv_bytes: float, tp: int) -> float:
    """Bytes of K and V one token adds on each GPU of a tensor-parallel group."""
    whole = kv_bytes_per_token(spec, kv_bytes)
    if spec.is_mla:
        return float(whole)  # the latent is not split over heads: every rank holds all of it
    return whole * kv_heads_per_gpu(spec, tp) / spec.kv_heads


def serving_weight_bytes(spec: ModelSpec, weights: str) -> float:
    """Bytes of the model's weights in a serving format (all GPUs together); a multimodal
    checkpoint's other towers (vision / audio encoders, projector) load beside the text model,
    counted in 16 bits."""
    if weights not in WEIGHT_BITS:
        raise FitplanError(
            f"unknown weight format '{weights}'", f"use one of {', '.join(WEIGHT_BITS)}"
        )
    f = model_facts(spec)
    bits = WEIGHT_BITS[weights]
    quantised = f.quantizable * bits / 8
    rest = (f.total - f.quantizable) * 2.0
    scales = 4.0 * f.quant_row_scales if weights == "int8" else 0.0  # LLM.int8 fp32 row scales
    towers = 2.0 * spec.tower_params
    return quantised + rest + scales + towers


def check_tp(spec: ModelSpec, tp: int) -> None:
    """vLLM's constraints on a tensor-parallel degree (ModelConfig.verify_with_parallel_config)."""
    if tp < 1:
        raise FitplanError(f"--tp must be at least 1, got {tp}")
    if spec.heads % tp:
        raise FitplanError(
            f"--tp {tp} does not divide the model's {spec.heads} attention heads",
            "use a divisor of the head count (1, 2, 4, 8 …)",
        )
    if not spec.is_mla and spec.kv_heads % tp and tp % spec.kv_heads:
        raise FitplanError(
            f"--tp {tp} and the model's {spec.kv_heads} KV heads: neither divides the other",
            "vLLM splits or replicates whole KV heads",
        )


@frozen
class ServingMemory:
    """One GPU of a serving deployment, bytes; blocks and tokens of its paged KV cache."""

    capacity: int
    budget: int
    weights: int
    activations: int
    cuda_context: int
    nccl: int
    cuda_graphs: int
    kv_budget: int
    block_size: int
    block_bytes: int
    kv_blocks: int
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: float
    tp: int
    max_position: int | None

    @property
    def non_kv(self) -> int:
        return self.weights + self.activations + self.cuda_context + self.nccl + self.cuda_graphs

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def kv_cache(self) -> int:
        """Bytes the engine allocates for the KV cache: whole blocks."""
        return self.kv_blocks * self.block_bytes

    def blocks_per_request(self, context: int) -> int:
        return math.ceil(context / self.block_size)

    def max_concurrency(self, context: int) -> int:
        """Requests of ``context`` tokens the cache holds at once (prefix sharing off)."""
        return self.kv_blocks // self.blocks_per_request(context)

    def max_context(self, concurrency: int) -> int:
        """The longest context each of ``concurrency`` requests can reach at once."""
        tokens = (self.kv_blocks // concurrency) * self.block_size
        return min(tokens, self.max_position) if self.max_position else tokens


def check_block_size(block_size: int) -> None:
    """Refuse a KV block size vLLM would refuse (:data:`constraints.limits.KV_BLOCK_SIZES`)."""
    if block_size not in KV_BLOCK_SIZES:
        raise FitplanError(
            f"--block-size {block_size} is not a block size vLLM accepts",
            f"use one of {', '.join(map(str, KV_BLOCK_SIZES))} tokens (default 16)",
        )


def serving_memory(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    weights: str = "bf16",
    kv_dtype: str = "auto",
    tp: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    cuda_graphs: bool = True,
) -> ServingMemory:
    """The memory of one GPU of a ``tp``-way deployment, vLLM's accounting (see the module)."""
    if spec.arch != "decoder" or spec.hidden <= 1:
        raise FitplanError(
            f"{spec.id}: serving plans are for decoder models with a known attention shape",
            "use --model NAME or a config.json of a decoder (encoders cache nothing)",
        )
    if kv_dtype not in KV_DTYPE_BYTES:
        raise FitplanError(
            f"unknown KV cache dtype '{kv_dtype}'", f"use one of {', '.join(KV_DTYPE_BYTES)}"
        )
    mixed = max(spec.layers - spec.attention_layers, spec.mamba_layers)
    if mixed:
        raise FitplanError(
            f"{spec.id}: {mixed} of its {spec.layers} layers keep a per-request state besides or "
            "instead of attention's K/V (gated DeltaNet, short convolution, Mamba), which vLLM "
            "keeps in its hybrid cache: not modelled",
            "fitplan plans training for this model; serving plans cover attention-only decoders",
        )
    if not 0 < gpu_memory_utilization <= 1:
        raise FitplanError(
            f"--gpu-memory-utilization {gpu_memory_utilization} must be in (0, 1], e.g. 0.9"
        )
    check_block_size(block_size)
    check_tp(spec, tp)
    default_tokens, default_seqs = serving_batch_defaults(gpu)
    chunk = max_num_batched_tokens or default_tokens
    seqs = min(max_num_seqs or default_seqs, chunk)
    if chunk < 1 or seqs < 1:
        raise FitplanError("--max-num-batched-tokens and --max-num-seqs must be positive")
    kv_b = KV_DTYPE_BYTES[kv_dtype]
    budget = int(gpu.memory_bytes * gpu_memory_utilization)
    weight_bytes = serving_weight_bytes(spec, weights) / tp
    activations = prefill_workspace_bytes(spec, chunk, seqs, tp)
    if weights in ("int8", "nf4", "nf4-dq"):  # bitsandbytes dequantises one weight at a time
        activations += model_facts(spec).largest_linear * 2.0 / tp
    nccl = C.NCCL_BUFFER_BYTES if tp > 1 else 0
    graphs = CUDA_GRAPH_BYTES if cuda_graphs else 0
    context = context_bytes(gpu)
    non_kv = weight_bytes + activations + context + nccl + graphs
    kv_budget = max(0, int(budget - non_kv))
    per_token_gpu = kv_bytes_per_token_per_gpu(spec, kv_b, tp)
    block_bytes = round(block_size * per_token_gpu)
    return ServingMemory(
        capacity=gpu.memory_bytes,
        budget=budget,
        weights=int(weight_bytes),
        activations=int(activations),
        cuda_context=context,
        nccl=nccl,
        cuda_graphs=graphs,
        kv_budget=kv_budget,
        block_size=block_size,
        block_bytes=block_bytes,
        kv_blocks=kv_budget // block_bytes if block_bytes else 0,
        kv_bytes_per_token=kv_bytes_per_token(spec, kv_b),
        kv_bytes_per_token_per_gpu=per_token_gpu,
        tp=tp,
        max_position=spec.max_position,
    )
