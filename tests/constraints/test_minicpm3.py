"""MiniCPM3 (read as DeepSeek-V3's MLA with a dense MLP in every layer, constraints/
hf_config_aliases.py ``BUILT_AS``) against the model transformers 5.25 builds: the stored totals
are ``sum(p.numel() for p in model.parameters())`` of ``MiniCPM3ForCausalLM`` built on the meta
device from ``AutoConfig.for_model("minicpm3", **overrides)`` (transformers 5.25.0). The default
is openbmb/MiniCPM3-4B's shape."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (MiniCPM3-4B)": ({}, 4_073_875_968),
    "no q LoRA rank, untied": (
        {
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 8,
            "intermediate_size": 1024,
            "num_hidden_layers": 3,
            "vocab_size": 3000,
            "q_lora_rank": None,
            "kv_lora_rank": 64,
            "v_head_dim": 64,
            "tie_word_embeddings": False,
        },
        10_104_512,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "minicpm3", **overrides}, id="m")
    assert total_params(spec) == expected
    assert spec.is_mla and not spec.num_experts and spec.kv_heads == spec.heads


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("minicpm3", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_its_key_value_heads_are_not_read() -> None:
    """MLA expands its latent to every head: a num_key_value_heads that does not divide the
    heads (MiniCPM3Config's 40 beside 10 heads) builds, and is read."""
    spec = spec_from_hf_config(
        {"model_type": "minicpm3", "num_attention_heads": 10, "hidden_size": 640}, id="m"
    )
    assert spec.kv_heads == 10
