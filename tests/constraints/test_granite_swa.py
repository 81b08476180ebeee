"""Granite SWA and Granite MoE SWA (read as Llama-like layers with a sink per head,
constraints/hf_config_traits.py ``GRANITE_SWA_TRAITS``) against the models transformers 5.25
builds: the stored totals are ``sum(p.numel() for p in model.parameters())`` of
``GraniteSWAForCausalLM`` / ``GraniteMoeSWAForCausalLM`` built on the meta device from
``AutoConfig.for_model(type, **overrides)`` written out as its config.json (transformers 5.25.0)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[str, dict[str, Any], int, int]] = {
    # (type, overrides, parameters, sliding layers)
    "granite_swa default": ("granite_swa", {}, 2_144_463_840, 18),
    "granite_swa, 5 layers, untied, biases": (
        "granite_swa",
        {
            "num_hidden_layers": 5,
            "tie_word_embeddings": False,
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 1024,
            "vocab_size": 3000,
            "attention_bias": True,
        },
        14_225_192,
        3,
    ),
    "granitemoe_swa default": ("granitemoe_swa", {}, 37_039_117_312, 24),
    "granitemoe_swa, shared MLP": (
        "granitemoe_swa",
        {
            "shared_intermediate_size": 256,
            "num_local_experts": 4,
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 512,
            "num_hidden_layers": 3,
            "vocab_size": 3000,
        },
        15_664_664,
        2,
    ),
}


def _config(model_type: str, overrides: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(model_type, **overrides).to_dict()
    return json.loads(json.dumps({**cfg, "model_type": model_type}, default=str))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, overrides, expected, sliding = SHAPES[shape]
    spec = spec_from_hf_config(_config(model_type, overrides), id="g")
    assert total_params(spec) == expected and spec.sliding_layers == sliding
    assert spec.attn_sinks and spec.sink_scaling and not spec.sdpa_supported
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_a_bare_config_takes_the_class_defaults() -> None:
    """A config.json that leaves the shape out means GraniteSWAConfig's (2.1B, tied, 18 of 24
    layers in a 128-token window)."""
    spec = spec_from_hf_config({"model_type": "granite_swa"}, id="g")
    assert total_params(spec) == 2_144_463_840
    assert spec.tie_embeddings and spec.sliding_window == 128 and spec.sliding_layers == 18
