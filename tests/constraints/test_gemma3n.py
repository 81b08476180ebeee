"""Gemma 3n's text model (constraints/gemma3n.py) against the model transformers 5.25 builds.

The stored totals are ``sum(p.numel() for p in model.parameters())`` of ``Gemma3nForCausalLM``
built on the meta device from ``AutoConfig.for_model("gemma3n_text", **overrides)``
(transformers 5.25.0), an independent source; where torch is installed the build is repeated.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import lora_params, peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (E4B-like)": ({}, 6_835_235_568),
    "E2B-like": (
        {"num_hidden_layers": 30, "intermediate_size": 8192, "num_kv_shared_layers": 10},
        4_435_182_688,
    ),
    "three streams, untied, biases": (
        {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "intermediate_size": 512,
            "num_hidden_layers": 10,
            "num_kv_shared_layers": 4,
            "vocab_size": 1000,
            "vocab_size_per_layer_input": 1000,
            "hidden_size_per_layer_input": 32,
            "laurel_rank": 16,
            "altup_num_inputs": 3,
            "tie_word_embeddings": False,
            "attention_bias": True,
        },
        7_094_408,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "gemma3n_text", **overrides}, id="g3n")
    assert total_params(spec) == expected


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reads_the_config_transformers_writes(shape: str) -> None:
    """transformers writes intermediate_size and activation_sparsity_pattern per layer."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    config = AutoConfig.for_model("gemma3n_text", **overrides)
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in built.parameters()) == expected
    saved = {**config.to_dict(), "model_type": "gemma3n_text"}
    assert isinstance(saved["intermediate_size"], list)
    assert total_params(spec_from_hf_config(saved, id="g3n")) == expected


def test_layer_kinds() -> None:
    """The default: every fifth layer global, the last 15 reusing keys and values, the first
    ten sparsifying their MLP gate."""
    spec = spec_from_hf_config({"model_type": "gemma3n_text"}, id="g3n")
    assert spec.layer_mixers == "aaaag" * 4 + "ssssr" * 3
    assert spec.sparse_mlp_layers == 10
    assert spec.layer_block(0) == "sparse-dense" and spec.layer_block(34) == "shared-global-dense"


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"intermediate_size": [8192] * 34 + [4096]}, "differs between layers"),
        ({"intermediate_size": [8192] * 3}, "one value per layer (35)"),
        ({"activation_sparsity_pattern": [0.0] * 34 + [0.95]}, "after a dense one"),
        ({"activation_sparsity_pattern": [1.5] * 35}, "fractions in [0, 1)"),
        ({"altup_active_idx": 4}, "not one of the 4 streams"),
        ({"num_kv_shared_layers": 36}, "more than the 35 layers"),
        ({"laurel_rank": 0}, "laurel_rank must be positive"),
    ],
)
def test_shapes_it_does_not_model_are_refused_in_one_line(
    overrides: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "gemma3n_text", **overrides}, id="g3n")
    assert phrase in err.value.message and "\n" not in err.value.message


def test_lora_counts_what_peft_builds() -> None:
    """all-linear reaches AltUp's and LAuReL's Linears and the per-layer-input ones too."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides = SHAPES["three streams, untied, biases"][0]
    spec = spec_from_hf_config({"model_type": "gemma3n_text", **overrides}, id="g3n")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gemma3n_text", **overrides))
    lora = LoraConfig(r=8, target_modules=peft_target_modules(spec, "all-linear"))
    peft_model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, "all-linear")
