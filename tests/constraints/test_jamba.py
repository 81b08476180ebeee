"""Jamba (constraints/jamba.py) against the model transformers 5.25 builds: the stored totals
are ``sum(p.numel() for p in model.parameters())`` of ``JambaForCausalLM`` built on the meta
device from ``AutoConfig.for_model("jamba", **overrides)`` (transformers 5.25.0). The default
is Jamba v0.1's shape (AI21: "52B total parameters")."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (v0.1, 52B)": ({}, 51_570_323_328),
    "attention every 4th from 1, tied, biases, rank and state changed": (
        {
            "hidden_size": 1024,
            "num_hidden_layers": 8,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 2048,
            "num_experts": 4,
            "vocab_size": 5000,
            "tie_word_embeddings": True,
            "mamba_dt_rank": 40,
            "mamba_d_state": 8,
            "mamba_proj_bias": True,
            "mamba_conv_bias": False,
            "attn_layer_period": 4,
            "attn_layer_offset": 1,
        },
        175_357_264,
    ),
    "dense (one expert)": (
        {
            "hidden_size": 512,
            "num_hidden_layers": 6,
            "num_attention_heads": 8,
            "intermediate_size": 1024,
            "num_experts": 1,
            "vocab_size": 5000,
        },
        24_086_336,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "jamba", **overrides}, id="j")
    assert total_params(spec) == expected


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("jamba", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_layer_pattern() -> None:
    """Attention at i % 8 == 4, experts at i % 2 == 1 (JambaConfig's defaults)."""
    spec = spec_from_hf_config({"model_type": "jamba", "num_hidden_layers": 16}, id="j")
    assert spec.layer_mixers == "yyyyayyyyyyyayyy"
    blocks = [spec.layer_block(i) for i in range(4)]
    assert blocks == ["mamba1-dense", "mamba1-moe", "mamba1-dense", "mamba1-moe"]
    assert spec.layer_block(4) == "dense" and spec.layer_block(12) == "dense"


def test_peft_leaves_the_mamba_out_proj_in() -> None:
    """PEFT's Mamba check names falcon_h1, mamba, mamba2, falcon_mamba and nemotron_h, not jamba:
    all-linear adapts Jamba's out_proj too; not the router or expert stacks (Parameters)."""
    spec = spec_from_hf_config({"model_type": "jamba"}, id="j")
    assert peft_target_modules(spec, "all-linear") == "all-linear"


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"expert_layer_offset": 0}, "offset = period − 1"),
        ({"attn_layer_offset": 8}, "attn_layer_offset 8 must be in [0, attn_layer_period 8)"),
        ({"num_experts_per_tok": 20}, "exceeds num_experts"),
        ({"num_attention_heads": 7}, "must divide hidden_size"),
        ({"mamba_d_state": "big"}, "mamba_d_state"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "jamba", **overrides}, id="j")
    assert phrase in str(err.value) and "\n" not in str(err.value)
