"""LFM3 (constraints/lfm3.py) against the model transformers 5.25 builds.

The stored totals are ``sum(p.numel() for p in model.parameters())`` of ``Lfm3ForCausalLM`` built
on the meta device from ``AutoConfig.for_model("lfm3", **overrides)`` (transformers 5.25.0), an
independent source; where torch is installed the build is repeated live.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import lora_params, peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

#: overrides of Lfm3Config's defaults -> transformers' parameter count
SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (gate per head, sandwich norms)": ({}, 1_728_801_536),
    "no gate, no sandwich, biases, untied": (
        {
            "use_attention_gate": False,
            "use_sandwich_norm": False,
            "conv_bias": True,
            "attention_bias": True,
            "tie_word_embeddings": False,
            "num_hidden_layers": 8,
        },
        1_017_292_544,
    ),
    "small": (
        {
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "num_hidden_layers": 10,
            "intermediate_size": 1536,
            "vocab_size": 5000,
            "conv_L_cache": 3,
            "pad_token_id": 0,
        },
        35_112_960,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    assert total_params(spec_from_hf_config({"model_type": "lfm3", **overrides}, id="l3")) == (
        expected
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("lfm3", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_the_default_pattern_is_lfm3s() -> None:
    """Lfm3Config: global attention at 2 mod 4, sliding at 0 mod 4 past the first layer."""
    spec = spec_from_hf_config({"model_type": "lfm3"}, id="l3")
    assert spec.layer_mixers == "ccac" + "acac" * 5
    assert spec.sliding_layers == 5 and spec.attention_layers == 11


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"layer_types": ["conv", "mamba"]}, "layer_types must list"),
        ({"num_key_value_heads": 3}, "not a multiple"),
        ({"conv_L_cache": 0}, "conv_L_cache must be positive"),
    ],
)
def test_bad_fields_are_refused_in_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "lfm3", **overrides}, id="l3")
    assert phrase in err.value.message and "\n" not in err.value.message


def test_lora_counts_what_peft_builds() -> None:
    """all-linear wraps the gate's g_proj and the convolution's in/out projections, not the
    depthwise conv."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides = SHAPES["small"][0]
    spec = spec_from_hf_config({"model_type": "lfm3", **overrides}, id="l3")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("lfm3", **overrides))
    lora = LoraConfig(r=8, target_modules=peft_target_modules(spec, "all-linear"))
    peft_model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, "all-linear")
