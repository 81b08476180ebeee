"""BitNet (constraints/bitnet.py) against the model transformers 5.25 builds: the stored totals
are ``sum(p.numel() for p in model.parameters())`` of ``BitNetForCausalLM`` built on the meta
device from ``AutoConfig.for_model("bitnet", **overrides)`` (transformers 5.25.0). Tied, the
default shape is bitnet-b1.58-2B-4T's ("2.4B" on its model card)."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default": ({}, 2_741_155_840),
    "2B-4T (tied)": ({"tie_word_embeddings": True}, 2_412_820_480),
    "narrow, attention bias": (
        {
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 1376,
            "num_hidden_layers": 3,
            "vocab_size": 1000,
            "attention_bias": True,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
        9_343_776,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    assert total_params(spec_from_hf_config({"model_type": "bitnet", **overrides}, id="b")) == (
        expected
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("bitnet", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"hidden_act": "silu"}, "relu² MLP"),
        ({"head_dim": 64}, "attn_sub_norm is hidden_size 2560 wide"),
        ({"num_key_value_heads": 3}, "multiple of num_key_value_heads"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "bitnet", **overrides}, id="b")
    assert phrase in str(err.value) and "\n" not in str(err.value)
