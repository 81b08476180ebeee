"""Serving memory and speed: hand-worked KV arithmetic, vLLM's block and TP rules, the roofline."""

from __future__ import annotations

import pytest

from constraints.errors import FitplanError
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from constraints.serving import kv_bytes_per_token_per_gpu, serving_memory, serving_weight_bytes
from constraints.serving_plan import ServeRequest, plan_serving
from constraints.units import GiB


def test_llama2_7b_kv_per_token_by_hand():
    # 2 (K, V) × 32 layers × 32 KV heads × 128 head_dim × 2 bytes (Llama-2-7B config.json)
    spec = resolve_model("llama-2-7b")
    assert kv_bytes_per_token_per_gpu(spec, 2.0, 1) == 2 * 32 * 32 * 128 * 2 == 524_288


def test_tp_splits_kv_heads_and_replicates_beyond_them():
    spec = resolve_model("llama-3.1-8b")  # 8 KV heads
    assert kv_bytes_per_token_per_gpu(spec, 2.0, 2) == 2 * 32 * 4 * 128 * 2
    assert kv_bytes_per_token_per_gpu(spec, 2.0, 8) == 2 * 32 * 1 * 128 * 2
    small = resolve_model("qwen2.5-3b")  # 2 KV heads, 16 query heads
    assert kv_bytes_per_token_per_gpu(small, 2.0, 4) == 2 * 36 * 1 * 128 * 2  # replicated


def test_blocks_round_a_request_up_to_whole_blocks():
    spec, gpu = resolve_model("llama-2-7b"), resolve_gpu("a100-80gb")
    m = serving_memory(spec, gpu)
    assert m.block_bytes == 16 * 524_288
    assert m.blocks_per_request(17) == 2
    assert m.max_concurrency(16) == m.kv_blocks
    assert m.max_concurrency(17) == m.kv_blocks // 2


def test_budget_is_utilisation_times_capacity_and_kv_takes_the_rest():
    spec, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    m = serving_memory(spec, gpu, gpu_memory_utilization=0.8)
    assert m.budget == int(0.8 * gpu.memory_bytes)
    assert m.kv_budget == m.budget - m.non_kv
    assert m.kv_cache <= m.kv_budget < m.kv_cache + m.block_bytes


def test_quantised_weights_shrink_by_their_bits():
    spec = resolve_model("llama-3.1-8b")
    bf16, fp8, int4 = (serving_weight_bytes(spec, w) for w in ("bf16", "fp8", "int4"))
    # embeddings, head and the 65 RMSNorms stay 16-bit (2 × 128,256 × 4,096 + 65 × 4,096) × 2 B
    head = (2 * 128_256 * 4096 + 65 * 4096) * 2
    assert fp8 - head == pytest.approx((bf16 - head) / 2, rel=1e-9)
    assert int4 - head == pytest.approx((bf16 - head) * (4 + 20 / 128) / 16, rel=1e-9)


def test_max_context_and_target_questions():
    spec, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    p = plan_serving(spec, gpu, ServeRequest(concurrency=10))
    assert p.question == "context"
    assert p.memory.max_concurrency(p.context) >= 10
    assert p.memory.max_concurrency(p.context + p.memory.block_size) < 10 or (
        p.context == spec.max_position
    )
    t = plan_serving(spec, gpu, ServeRequest(context=32768, concurrency=32))
    assert t.question == "gpus" and t.fits and t.memory.tp == 4


def test_a_model_too_big_for_the_card_does_not_fit():
    p = plan_serving(
        resolve_model("llama-3.1-70b"), resolve_gpu("rtx-4090"), ServeRequest(context=2048)
    )
    assert not p.fits and p.max_concurrency == 0 and p.memory.kv_budget == 0


def test_decode_is_bandwidth_bound_and_aggregate_grows_with_concurrency():
    spec, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    one = plan_serving(spec, gpu, ServeRequest(context=2048, concurrency=1)).speed
    many = plan_serving(spec, gpu, ServeRequest(context=2048, concurrency=32)).speed
    assert one is not None and many is not None
    # one request: the step reads ~16 GB of weights at ≤ 3.35 TB/s → at most ~210 tokens/s
    assert one.decode_tokens_per_s_per_request < gpu.bandwidth_gb_s * 1e9 / (16.06e9)
    assert many.decode_tokens_per_s > 10 * one.decode_tokens_per_s
    assert many.decode_tokens_per_s_per_request < one.decode_tokens_per_s_per_request
    # prefill is compute-bound: far more tokens/s than one request decodes
    assert one.prefill_tokens_per_s > 50 * one.decode_tokens_per_s_per_request


@pytest.mark.parametrize(
    "request_, message",
    [
        (ServeRequest(concurrency=0), "--concurrency"),
        (ServeRequest(context=0), "--context"),
        (ServeRequest(context=10**6), "longer than"),
        (ServeRequest(tp=3), "--tp 3"),
        (ServeRequest(gpu_memory_utilization=1.5), "utilization"),
        (ServeRequest(kv_dtype="int3"), "KV cache dtype"),
    ],
)
def test_bad_requests_are_refused(request_, message):
    with pytest.raises(FitplanError, match=message):
        plan_serving(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), request_)


def test_kv_capacity_in_gib_is_plausible_against_vllm_logs():
    # vLLM on one H100 80GB, Llama-3.1-8B bf16 at 0.9 reports ~54 GiB of KV cache (public logs
    # "Available KV cache memory: 5x GiB"); fitplan's accounting must land in 50–58 GiB
    m = serving_memory(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    assert 50 * GiB < m.kv_cache < 58 * GiB


@pytest.mark.parametrize("block_size", [0, 2, 17, 24, 512])
def test_a_block_size_vllm_refuses_is_refused(block_size: int) -> None:
    """vLLM's CacheConfig takes BlockSize = Literal[1, 8, 16, 32, 64, 128, 256] (vllm/config/cache.py)."""
    with pytest.raises(FitplanError, match="--block-size"):
        serving_memory(
            resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), block_size=block_size
        )


@pytest.mark.parametrize("block_size", [1, 8, 16, 32, 64, 128, 256])
def test_every_block_size_vllm_takes_plans(block_size: int) -> None:
    m = serving_memory(
        resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), block_size=block_size
    )
    assert m.block_size == block_size and m.kv_blocks > 0
