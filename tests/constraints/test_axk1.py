"""A.X-K1 (read as DeepSeek-V3 with an RMSNorm on each MoE block's output, constraints/
hf_config_aliases.py ``BUILT_AS``) against the model transformers 5.25 builds: the stored totals
are ``sum(p.numel() for p in model.parameters())`` of ``AXK1ForCausalLM`` built on the meta
device from ``AutoConfig.for_model("axk1", **overrides)`` (transformers 5.25.0); the default is
A.X-K1's 519B."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import inventory, total_params

NARROW = {
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1024,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 4,
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
    "mlp_layer_types": ["dense", "dense", "sparse", "sparse"],
}
SHAPES: dict[str, tuple[dict[str, Any], int, int]] = {
    "default (519B)": ({}, 518_983_052_288, 60),
    "two dense layers first": (NARROW, 15_276_288, 2),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected, moe_layers = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "axk1", **overrides}, id="a")
    assert total_params(spec) == expected and spec.moe_layers == moe_layers
    norms = [g for g in inventory(spec).groups if "post_mlp_layernorm" in g.name]
    assert [g.block for g in norms] == ["moe"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected, _moe = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("axk1", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_dense_layers_after_sparse_ones_are_refused() -> None:
    cfg = {
        "model_type": "axk1",
        **NARROW,
        "mlp_layer_types": ["dense", "sparse", "dense", "sparse"],
    }
    with pytest.raises(FitplanError, match="dense layer after a sparse one"):
        spec_from_hf_config(cfg, id="a")
