"""DeepSeek-V3.2 and GLM-5 (DeepSeek's MLA and MoE with DeepSeek Sparse Attention's indexer,
constraints/hf_config_llama.py ``dsa_indexer``) against the models transformers 5.25 builds: the
stored totals are ``sum(p.numel() for p in model.parameters())`` of ``DeepseekV32ForCausalLM`` /
``GlmMoeDsaForCausalLM`` built on the meta device from ``AutoConfig.for_model(type, **overrides)``
(transformers 5.25.0): DeepSeek-V3.2's 671.9B main model (its card's 685B adds the MTP module),
GLM-5's 744B."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from constraints.attention_transients import indexer_transient_bytes
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import total_params

NARROW = {
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1024,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "vocab_size": 3000,
    "q_lora_rank": 128,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 48,
    "qk_rope_head_dim": 16,
    "v_head_dim": 64,
    "index_n_heads": 8,
    "index_head_dim": 32,
    "index_topk": 64,
}
SHAPES: dict[str, tuple[str, dict[str, Any], int]] = {
    "DeepSeek-V3.2": ("deepseek_v32", {}, 671_877_929_216),
    "GLM-5": ("glm_moe_dsa", {}, 743_911_199_232),
    "DeepSeek-V3.2 narrowed": ("deepseek_v32", NARROW, 13_369_600),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    model_type, overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": model_type, **overrides}, id="d")
    assert total_params(spec) == expected and spec.index_heads and spec.is_mla


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_the_indexer_scores_are_a_quadratic_transient() -> None:
    """Two fp32 [s, heads, s] tensors per sequence (the scores and their ReLU) beside the
    queries: 64 heads at 4,096 tokens hold 8 GiB per sequence."""
    spec = spec_from_hf_config({"model_type": "deepseek_v32"}, id="d")
    batch = ConfigBatch.from_configs([TrainConfig(micro_batch=1, seq_len=4096)])
    got = float(indexer_transient_bytes(spec, batch, np.array([2.0]))[0])
    assert got == 4096 * (2 * 64 * 4096 * 4 + 64 * 128 * (2 * 2 + 4))
    assert got / 2**30 > 8


def test_the_indexer_adapters_keep_nothing() -> None:
    """PEFT's all-linear wraps the indexer's wq_b / wk / weights_proj (their adapters count as
    trainable), but the indexer runs under no_grad: they add no activation."""
    from constraints.activation_coefficients import _block_linear_widths
    from constraints.lora_targets import lora_target_groups

    spec = spec_from_hf_config({"model_type": "deepseek_v32", **NARROW}, id="d")
    names = {g.name for g in lora_target_groups(spec, "all-linear")}
    assert "self_attn.indexer.wq_b.weight" in names
    assert not any("indexer" in key for _block, key in _block_linear_widths(spec))


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"indexer_types": ["full", "shared", "full"]}, "not layers that reuse"),
        ({"index_topk_freq": 2}, "not layers that reuse"),
        ({"index_head_dim": 8}, "narrower than qk_rope_head_dim"),
        ({"index_n_heads": 0}, "index_n_heads"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "glm_moe_dsa", **NARROW, **overrides}, id="d")
    assert phrase in str(err.value) and "\n" not in str(err.value)
