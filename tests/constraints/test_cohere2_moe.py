"""Cohere 2 MoE (constraints/cohere2_moe.py) against the model transformers 5.25 builds: the
stored totals are ``sum(p.numel() for p in model.parameters())`` of ``Cohere2MoeForCausalLM``
built on the meta device from ``AutoConfig.for_model("cohere2_moe", **overrides)`` written out as
its config.json (transformers 5.25.0)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SMALL = {
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 5,
    "vocab_size": 3000,
}
SHAPES: dict[str, tuple[dict[str, Any], int, int]] = {
    # (overrides, parameters, dense prefix layers)
    "default": ({}, 190_004_928_512, 0),
    "dense prefix, shared experts, RMSNorm, sigmoid, untied": (
        {
            **SMALL,
            "num_shared_experts": 2,
            "first_k_dense_replace": 2,
            "prefix_dense_intermediate_size": 1024,
            "rms_norm_eps": 1e-5,
            "expert_selection_fn": "sigmoid",
            "tie_word_embeddings": False,
        },
        21_306_368,
        2,
    ),
}


def _config(overrides: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model("cohere2_moe", **overrides).to_dict()
    return json.loads(json.dumps({**cfg, "model_type": "cohere2_moe"}, default=str))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected, dense = SHAPES[shape]
    spec = spec_from_hf_config(_config(overrides), id="c")
    assert total_params(spec) == expected and spec.first_dense_layers == dense
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("cohere2_moe", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"mlp_layer_types": ["sparse", "dense", "sparse", "sparse", "sparse"]}, "as a prefix"),
        ({"mlp_layer_types": ["dense"]}, "for each of the 5 layers"),
        ({"expert_selection_fn": "relu"}, "must be one of softmax, sigmoid"),
        ({"shared_expert_combination_strategy": "max"}, "must be one of sum, average"),
        ({"num_experts_per_tok": 9}, "exceeds num_experts"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    cfg = {"model_type": "cohere2_moe", **SMALL, **overrides}
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config(cfg, id="c")
    assert phrase in str(err.value) and "\n" not in str(err.value)
