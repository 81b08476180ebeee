"""nanochat (constraints/nanochat.py) against the model transformers 5.25 builds: the stored
totals are ``sum(p.numel() for p in model.parameters())`` of ``NanoChatForCausalLM`` built on
the meta device from ``AutoConfig.for_model("nanochat", **overrides)`` (transformers 5.25.0)."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (d12)": ({}, 256_573_440),
    "GQA, tied, attention bias": (
        {
            "num_key_value_heads": 2,
            "num_hidden_layers": 4,
            "hidden_size": 512,
            "num_attention_heads": 4,
            "intermediate_size": 2048,
            "tie_word_embeddings": True,
            "attention_bias": True,
        },
        37_296_128,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "nanochat", **overrides}, id="nc")
    assert total_params(spec) == expected
    assert spec.final_softcap == 15.0 and spec.norm == "nonparam"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("nanochat", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"hidden_act": "silu"}, "relu² MLP"),
        ({"num_key_value_heads": 4}, "not a multiple"),
        ({"hidden_size": 100}, "not divisible by 6"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "nanochat", **overrides}, id="nc")
    assert phrase in err.value.message and "\n" not in err.value.message
