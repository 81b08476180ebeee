"""Qwen 3.5 / Qwen3-Next's hybrid layers read from config.json: which layers are gated DeltaNets,
their widths, and the refusals of a config transformers would not build."""

from __future__ import annotations

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config

#: Qwen3.5-9B-like text config (transformers 5.25 Qwen3_5TextConfig defaults, written out)
QWEN35 = {
    "model_type": "qwen3_5_text",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 248320,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}


def test_every_fourth_layer_is_attention_by_default() -> None:
    spec = spec_from_hf_config(QWEN35, id="q")
    assert spec.layer_mixers == "llla" * 8
    assert (spec.linear_layers, spec.attention_layers) == (24, 8)
    assert [spec.layer_block(i) for i in range(4)] == [
        "linear-dense",
        "linear-dense",
        "linear-dense",
        "dense",
    ]
    kinds = ["full_attention", "linear_attention"] * 16
    listed = spec_from_hf_config({**QWEN35, "layer_types": kinds}, id="q")
    assert listed.layer_mixers == "al" * 16
    every_other = spec_from_hf_config({**QWEN35, "full_attention_interval": 2}, id="q")
    assert every_other.layer_mixers == "la" * 16


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"layer_types": ["linear_attention"] * 31}, "for each of the 32 layers"),
        ({"layer_types": ["sliding_attention"] * 32}, "must list 'linear_attention'"),
        ({"layer_types": "linear_attention"}, "must list"),
        ({"linear_num_value_heads": 24, "linear_num_key_heads": 16}, "not a multiple"),
        ({"linear_key_head_dim": 0}, "linear_key_head_dim must be positive"),
        ({"full_attention_interval": 0}, "full_attention_interval must be positive"),
        ({"linear_conv_kernel_dim": "four"}, "linear_conv_kernel_dim"),
    ],
)
def test_a_config_transformers_would_not_build_is_refused(
    extra: dict[str, object], message: str
) -> None:
    with pytest.raises(FitplanError, match=message):
        spec_from_hf_config({**QWEN35, **extra}, id="q")


def test_the_gated_attention_q_proj_is_twice_as_wide() -> None:
    """Qwen3_5Attention.q_proj: hidden → heads · head_dim · 2 (the query and its output gate)."""
    from constraints.params import inventory

    spec = spec_from_hf_config(QWEN35, id="q")
    q = next(g for g in inventory(spec).groups if g.name == "self_attn.q_proj.weight")
    assert (q.d_in, q.d_out) == (4096, 16 * 256 * 2)


def test_the_cache_holds_k_v_of_attention_layers_and_a_state_per_sequence() -> None:
    """8 attention layers × 2 × 4 heads × 256 × 2 bytes per token; per sequence, 24 layers of an
    fp32 32 × 128 × 128 state and 3 columns of the 8,192-channel convolution in bf16."""
    from constraints.inference import kv_cache_bytes, recurrent_state_bytes

    spec = spec_from_hf_config(QWEN35, id="q")
    assert kv_cache_bytes(spec, 1000) == 1000 * 8 * 2 * 4 * 256 * 2
    state = 32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2
    assert recurrent_state_bytes(spec, 3) == 3 * 24 * state


def test_serving_plans_refuse_the_hybrid_cache() -> None:
    from constraints.gpus import resolve_gpu
    from constraints.serving import serving_memory

    spec = spec_from_hf_config(QWEN35, id="q")
    with pytest.raises(FitplanError, match="24 of its 32 layers keep a per-request state"):
        serving_memory(spec, resolve_gpu("h100"))


def test_a_deep_hybrid_model_is_traced_a_period_apart() -> None:
    from searcher.truth.step_trace import TRACE_DEPTHS, trace_depths

    assert trace_depths(spec_from_hf_config(QWEN35, id="q")) == (4, 8)
    other = spec_from_hf_config({**QWEN35, "full_attention_interval": 3}, id="q")
    assert other.layer_mixers.startswith("llalla")
    assert trace_depths(other) == (3, 6)
    llama = spec_from_hf_config({**QWEN35, "model_type": "llama"}, id="l")
    assert trace_depths(llama) == TRACE_DEPTHS


def test_fla_keeps_what_its_autograd_function_saves() -> None:
    """fla v0.5.2 ChunkGatedDeltaRuleFunction.save_for_backward(q, q_rstd, k, k_rstd, v, g,
    beta_raw, beta, A, ...): q, k on the 16 key heads × 128 and v on the 32 value heads × 128
    in bf16, A [T, 32, 64] in k's dtype; q_rstd, k_rstd (one fp32 per key head) and the
    chunk-local cumsum of g (fp32, per value head); beta is the sigmoid's output, kept already."""
    from constraints.gated_deltanet import mixer_saved

    def per_token(spec: object) -> dict[str, float]:
        out: dict[str, float] = {}
        for x in mixer_saved(spec):  # type: ignore[arg-type]
            out[x.dtype] = out.get(x.dtype, 0.0) + x.width
        return out

    torch_path = spec_from_hf_config(QWEN35, id="q")
    fla = torch_path.model_copy(update={"delta_rule_kernel": "fla"})
    shared_compute = per_token(torch_path)["compute"]
    assert per_token(fla)["compute"] == shared_compute + 2 * 16 * 128 + 32 * 128 + 32 * 64
    torch_fp32, fla_fp32 = per_token(torch_path)["fp32"], per_token(fla)["fp32"]
    outside = 2 * 32 + 4096 + 32 + 2 * 4096  # softplus, gated norm: upcast, rsqrt, z and silu(z)
    assert fla_fp32 == outside + 2 * 16 + 32
    # the torch path keeps, among others, the state each 64-token chunk read: 32 × 128 × 128 / 64
    assert torch_fp32 - outside > 32 * 128 * 128 / 64


def test_the_stack_decides_the_kernel() -> None:
    from searcher.search.stack import Stack, with_stack_kernels

    spec = spec_from_hf_config(QWEN35, id="q")
    fla = with_stack_kernels(spec, Stack(frozenset({"flash-linear-attention"}), "--stack"))
    assert fla.delta_rule_kernel == "fla"
    assert with_stack_kernels(fla, Stack(frozenset(), "--stack")).delta_rule_kernel == "torch"
    llama = spec_from_hf_config({**QWEN35, "model_type": "llama"}, id="l")
    assert with_stack_kernels(llama, Stack(frozenset({"flash-linear-attention"}), "x")) is llama


def test_a_mamba_layer_caches_its_ssm_state_per_sequence() -> None:
    """Bamba-like: 128 heads × 64 × state 256 in fp32, and the conv's last 3 columns of
    8,192 + 2 · 256 channels in bf16, per Mamba layer and sequence; K/V for the 2 attention layers."""
    from constraints.inference import kv_cache_bytes, recurrent_state_bytes

    bamba = {
        "model_type": "bamba",
        "hidden_size": 4096,
        "num_hidden_layers": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "attn_layer_indices": [1, 3],
    }
    spec = spec_from_hf_config(bamba, id="b")
    per_layer = 128 * 64 * 256 * 4 + (8192 + 2 * 256) * 3 * 2
    assert recurrent_state_bytes(spec, 2) == 2 * 2 * per_layer
    assert kv_cache_bytes(spec, 10) == 10 * 2 * 2 * 8 * 128 * 2
