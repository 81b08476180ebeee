"""A serving plan: which question is asked (concurrency at a context, context at a concurrency,
or the tensor-parallel degree a target needs), answered from constraints.serving and its speed."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.serving import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KV_DTYPE_BYTES,
    WEIGHT_BITS,
    ServingMemory,
    check_block_size,
    check_tp,
    serving_batch_defaults,
    serving_memory,
)
from constraints.serving_speed import ServingSpeed, serving_speed

#: Tensor-parallel degrees tried for a target: inside one node of 8 GPUs (vLLM runs TP over
#: NVLink; beyond a node it adds pipeline parallelism, which this plan does not model).
TP_CANDIDATES = (1, 2, 4, 8)
#: The source documents' advice for an inference server: keep 20–30 % of the memory free
#: (shared/seeds/003: "allow 20% to 30% memory headroom").
ADVISED_UTILIZATION = 0.8


@frozen
class ServeRequest:
    context: int | None = None
    concurrency: int | None = None
    tp: int | None = None
    weights: str = "bf16"
    kv_dtype: str = "auto"
    block_size: int = DEFAULT_BLOCK_SIZE
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    cuda_graphs: bool = True
    allow_long_context: bool = False


@frozen
class ServePlan:
    spec: ModelSpec
    gpu: GpuSpec
    request: ServeRequest
    question: str  # "concurrency", "context" or "gpus"
    memory: ServingMemory
    context: int
    concurrency: int
    max_concurrency: int
    max_context: int
    fits: bool
    speed: ServingSpeed | None
    max_num_batched_tokens: int
    max_num_seqs: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kv_bytes_per_request(self) -> int:
        """Unpaged: kv_bytes_per_token × context (the whole model, one copy)."""
        return self.memory.kv_bytes_per_token * self.context

    @property
    def kv_bytes_per_request_per_gpu(self) -> int:
        """What one request holds on each GPU: whole blocks."""
        return self.memory.blocks_per_request(self.context) * self.memory.block_bytes


def check_request(spec: ModelSpec, r: ServeRequest) -> None:
    """Refuse bad input before any work (one line, exit 2 at the CLI)."""
    if r.context is not None and r.context < 1:
        raise FitplanError(f"--context must be at least 1 token, got {r.context}")
    if r.concurrency is not None and r.concurrency < 1:
        raise FitplanError(f"--concurrency must be at least 1 request, got {r.concurrency}")
    ctx = r.context
    if ctx and spec.max_position and ctx > spec.max_position and not r.allow_long_context:
        raise FitplanError(
            f"--context {ctx} is longer than {spec.name}'s {spec.max_position} positions",
            "use a shorter --context, or --allow-long-context if you extend it (RoPE scaling)",
        )
    for flag, v in (
        ("--max-num-batched-tokens", r.max_num_batched_tokens),
        ("--max-num-seqs", r.max_num_seqs),
    ):
        if v is not None and v < 1:
            raise FitplanError(f"{flag} must be at least 1, got {v}")
    if r.tp is not None:
        check_tp(spec, r.tp)
    if r.weights not in WEIGHT_BITS:
        raise FitplanError(
            f"unknown weight format '{r.weights}'", f"use one of {', '.join(WEIGHT_BITS)}"
        )
    if r.kv_dtype not in KV_DTYPE_BYTES:
        raise FitplanError(
            f"unknown KV cache dtype '{r.kv_dtype}'", f"use one of {', '.join(KV_DTYPE_BYTES)}"
        )
    if not 0 < r.gpu_memory_utilization <= 1:
        raise FitplanError(
            f"--gpu-memory-utilization {r.gpu_memory_utilization} must be in (0, 1], e.g. 0.9"
        )
    check_block_size(r.block_size)


def _memory(spec: ModelSpec, gpu: GpuSpec, r: ServeRequest, tp: int) -> ServingMemory:
    return serving_memory(
        spec,
        gpu,
        weights=r.weights,
        kv_dtype=r.kv_dtype,
        tp=tp,
        block_size=r.block_size,
        gpu_memory_utilization=r.gpu_memory_utilization,
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        cuda_graphs=r.cuda_graphs,
    )


def plan_serving(spec: ModelSpec, gpu: GpuSpec, r: ServeRequest) -> ServePlan:
    check_request(spec, r)
    default_ctx = min(4096, spec.max_position) if spec.max_position else 4096
    context = r.context or default_ctx
    notes: list[str] = []
    if r.context and r.concurrency:
        question = "gpus"
        tps = [r.tp] if r.tp else [t for t in TP_CANDIDATES if valid_tp(spec, t)]
        memory = None
        for tp in tps:
            memory = _memory(spec, gpu, r, tp)
            if memory.max_concurrency(context) >= r.concurrency:
                break
        assert memory is not None
        concurrency = r.concurrency
    elif r.concurrency:
        question = "context"
        memory = _memory(spec, gpu, r, r.tp or 1)
        concurrency = r.concurrency
        context = memory.max_context(concurrency)
    else:
        question = "concurrency"
        memory = _memory(spec, gpu, r, r.tp or 1)
        concurrency = max(memory.max_concurrency(context), 0)
    max_conc = memory.max_concurrency(context) if context else 0
    max_ctx = memory.max_context(max(concurrency, 1))
    fits = memory.kv_blocks > 0 and context >= 1 and max_conc >= max(concurrency, 1)
    tokens_default, seqs_default = serving_batch_defaults(gpu)
    chunk = r.max_num_batched_tokens or tokens_default
    seqs = r.max_num_seqs or seqs_default
    if memory.kv_budget == 0:
        notes.append(
            f"the weights and workspace ({memory.non_kv / 2**30:.1f} GiB per GPU) leave no room "
            f"for a KV cache in {memory.budget / 2**30:.1f} GiB: quantise, or raise --tp"
        )
    if fits and max(concurrency, 1) > seqs:
        notes.append(
            f"the engine schedules at most max_num_seqs = {seqs} requests at once "
            "(raise --max-num-seqs)"
        )
    if r.gpu_memory_utilization > ADVISED_UTILIZATION:
        notes.append(
            "the source documents advise 20–30 % memory headroom for a server "
            f"(--gpu-memory-utilization {ADVISED_UTILIZATION:g} or less)"
        )
    if spec.sliding_window:
        notes.append(
            f"sliding-window layers are costed as full attention (window {spec.sliding_window})"
        )
    speed = None
    if fits and context >= 1 and (gpu.bf16_tflops or gpu.fp16_tflops):
        speed = serving_speed(
            spec,
            gpu,
            memory,
            weights=r.weights,
            context=context,
            concurrency=max(min(concurrency, seqs), 1),
            max_num_batched_tokens=chunk,
        )
    return ServePlan(
        spec=spec,
        gpu=gpu,
        request=r,
        question=question,
        memory=memory,
        context=context,
        concurrency=concurrency,
        max_concurrency=max_conc,
        max_context=max_ctx,
        fits=fits,
        speed=speed,
        max_num_batched_tokens=chunk,
        max_num_seqs=seqs,
        notes=tuple(notes),
    )


def valid_tp(spec: ModelSpec, tp: int) -> bool:
    try:
        check_tp(spec, tp)
    except FitplanError:
        return False
    return True


def serve_json(p: ServePlan) -> dict[str, Any]:
    m = p.memory
    s = p.speed
    return {
        "model": p.spec.id,
        "gpu": p.gpu.id,
        "question": p.question,
        "fits": p.fits,
        "tp": m.tp,
        "gpus": m.tp,
        "weights": p.request.weights,
        "kv_cache_dtype": p.request.kv_dtype,
        "block_size": m.block_size,
        "gpu_memory_utilization": p.request.gpu_memory_utilization,
        "max_num_batched_tokens": p.max_num_batched_tokens,
        "max_num_seqs": p.max_num_seqs,
        "context": p.context,
        "concurrency": p.concurrency,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_bytes_per_token_per_gpu": m.kv_bytes_per_token_per_gpu,
        "kv_bytes_per_request": p.kv_bytes_per_request,
        "kv_bytes_per_request_per_gpu": p.kv_bytes_per_request_per_gpu,
        "kv_blocks": m.kv_blocks,
        "kv_capacity_tokens": m.kv_capacity_tokens,
        "max_concurrency": p.max_concurrency,
        "max_context": p.max_context,
        "memory_bytes": {
            "capacity": m.capacity,
            "budget": m.budget,
            "weights": m.weights,
            "activations": m.activations,
            "cuda_context": m.cuda_context,
            "nccl": m.nccl,
            "cuda_graphs": m.cuda_graphs,
            "kv_cache": m.kv_cache,
            "kv_in_use": p.kv_bytes_per_request_per_gpu * max(p.concurrency, 0) if p.fits else 0,
        },
        "speed": None
        if s is None
        else {
            "prefill_tokens_per_s": s.prefill_tokens_per_s,
            "time_to_first_token_s": s.time_to_first_token_s,
            "decode_step_s": s.decode_step_s,
            "decode_tokens_per_s_per_request": s.decode_tokens_per_s_per_request,
            "decode_tokens_per_s": s.decode_tokens_per_s,
            "at_concurrency": s.concurrency,
            "at_context": s.context,
        },
        "notes": list(p.notes),
    }
