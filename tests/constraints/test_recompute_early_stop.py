"""What full activation checkpointing recomputes (constraints/recompute.py).

Expected values are the per-block FLOP arithmetic of the layer code, not the function under
test: a GPT/MPT block's linears are qkv 3h², out h², up 4h², down 4h² per token (12h²); a
training step runs each forward once and backward twice (dgrad + wgrad); non-reentrant
checkpointing reruns qkv, out and up (its early stop comes before down: traced in
test_recompute_trace.py) and never the head.
"""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.recompute import early_stop_skipped_gemm
from constraints.speed import speed_of
from searcher.truth.throughput_rows import load_throughput_cases

A100 = resolve_gpu("a100-80gb")


def _mpt7b():
    """MPT-7B as the llm-foundry rows build it (GPT-2 shape, no dropout)."""
    case = next(c for c in load_throughput_cases() if c.row_id == "tp-97")
    assert case.spec is not None
    return case.spec


def _gemm_ratio(spec, **knobs) -> float:
    """GEMM time per step, full checkpointing over none (compute-bound micro-batch)."""
    base = {"micro_batch": 16, "seq_len": 2048, "zero": 3, "dp": 8, **knobs}
    full = speed_of(spec, TrainConfig(checkpointing="full", **base), A100).parts["gemm_s"]
    none = speed_of(spec, TrainConfig(checkpointing="none", **base), A100).parts["gemm_s"]
    return full / none


def test_mpt_block_reruns_eight_of_twelve_h2_and_not_the_head() -> None:
    spec = _mpt7b()
    h, layers, vocab = spec.hidden, spec.layers, spec.vocab
    block = 12 * h * h * layers  # MACs per token of the blocks' linears
    head = h * vocab
    expected = (3 * block + 8 * h * h * layers + 3 * head) / (3 * block + 3 * head)
    assert _gemm_ratio(spec) == pytest.approx(expected, rel=1e-3)
    # before: every linear, the head included, rerun once: 4/3
    assert _gemm_ratio(spec) < 4.0 / 3.0 - 0.05


def test_llama_block_skips_down_proj() -> None:
    spec = catalog_model("llama-3.1-8b")
    h, i, kv, layers = spec.hidden, spec.intermediate, spec.kv_width, spec.layers
    attn = 2 * h * h + 2 * h * kv  # q, o; k, v
    mlp = 3 * h * i  # gate, up, down
    head = h * spec.vocab
    expected = (3 * (attn + mlp) * layers + (attn + 2 * h * i) * layers + 3 * head) / (
        3 * (attn + mlp) * layers + 3 * head
    )
    assert _gemm_ratio(spec) == pytest.approx(expected, rel=1e-3)


def test_lora_on_down_proj_reruns_it() -> None:
    """PEFT's lora_B saves its input after the base GEMM ran: the replay computes down too; a
    frozen base has no wgrad (2 passes: forward, dgrad)."""
    spec = catalog_model("llama-3.1-8b")
    h, i, kv, layers = spec.hidden, spec.intermediate, spec.kv_width, spec.layers
    blocks = (2 * h * h + 2 * h * kv + 3 * h * i) * layers
    head = h * spec.vocab
    ratio = _gemm_ratio(spec, method="lora", lora_targets="all-linear")
    assert ratio == pytest.approx((3 * blocks + 2 * head) / (2 * blocks + 2 * head), rel=1e-3)


@pytest.mark.parametrize(
    ("model", "skipped"),
    [
        ("llama-3.1-8b", "mlp.down_proj"),  # residual + down_proj(...)
        ("qwen2.5-0.5b", "mlp.down_proj"),
        ("mistral-7b-v0.1", "mlp.down_proj"),
        ("phi-3-mini-4k", "mlp.down_proj"),  # resid_pdrop 0
        ("falcon-7b", "mlp.dense_4h_to_h"),  # dropout_add with p 0
        ("gpt2", None),  # resid_pdrop 0.1: the dropout saves its mask after c_proj
        ("opt-1.3b", None),  # dropout 0.1
        ("bert-base-uncased", None),  # post-norm: LayerNorm saves the sum
        ("olmo-2-7b", None),  # post-norm
        ("gemma-2-2b", None),  # post-feed-forward norm
        ("mixtral-8x7b", None),  # expert combine saves routing weights and indices
    ],
)
def test_which_projection_the_early_stop_skips(model: str, skipped: str | None) -> None:
    assert early_stop_skipped_gemm(catalog_model(model)) == skipped


def test_fp8_and_quantised_bases_rerun_the_projection() -> None:
    """torchao's float8 matmul and bitsandbytes' MatMul4Bit are autograd Functions: they save
    after their forward has run, so the replay computes the projection."""
    spec = catalog_model("llama-3.1-8b")
    h100 = resolve_gpu("h100-sxm")
    base = {"micro_batch": 2, "seq_len": 4096, "zero": 3, "dp": 8, "recipe": "amp"}
    parts = {
        ck: speed_of(spec, TrainConfig(checkpointing=ck, compute_dtype="fp8", **base), h100)
        for ck in ("full", "none")
    }
    full, none = (parts[k].gemm_groups["mlp.down_proj"] for k in ("full", "none"))
    assert full / none == pytest.approx(4.0 / 3.0, rel=1e-6)


def test_megatron_recompute_reruns_the_whole_layer() -> None:
    """Megatron's full recompute (tensor_parallel.random.CheckpointFunction) is reentrant: every
    linear of the layer reruns, the head still not."""
    spec = catalog_model("llama-3.1-8b")
    base = {"micro_batch": 2, "seq_len": 4096, "tp": 2, "dp": 4, "backend": "megatron"}
    parts = {
        ck: speed_of(spec, TrainConfig(checkpointing=ck, **base), A100).gemm_groups
        for ck in ("full", "none")
    }
    assert parts["full"]["mlp.down_proj"] / parts["none"]["mlp.down_proj"] == pytest.approx(4 / 3)
    assert parts["full"]["lm_head"] == pytest.approx(parts["none"]["lm_head"])
