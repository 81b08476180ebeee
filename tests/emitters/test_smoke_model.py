"""The CPU smoke test's shrunken copy of the model (searcher/emitters/smoke_model.py): the same
type, two layers, narrow widths, token ids inside the smaller vocabulary; a small model is left
as it is. Counts by hand from the shrunken shapes, not from fitplan's counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constraints.models import catalog_entry, spec_from_hf_config
from searcher.emitters.smoke_model import shrunken_config, smoke_config

TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())


def test_llama_8b_shrinks_to_two_narrow_layers() -> None:
    cfg = dict(catalog_entry("llama-3.1-8b")["config"])
    small, note = smoke_config(cfg)  # type: ignore[misc]
    assert small["num_hidden_layers"] == 2 and small["model_type"] == "llama"
    assert small["num_attention_heads"] == 32 and small["num_key_value_heads"] == 8
    h, i, v = 32 * 16, 2 * 32 * 16, 2048
    kv = 8 * 16
    by_hand = 2 * v * h + 2 * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + h
    assert f"({by_hand:,} of 8,030,261,248 parameters)" in note
    assert "layers 32 -> 2" in note and "vocabulary 128256 -> 2048" in note
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = small.get(key)
        for i_ in ids if isinstance(ids, list) else [ids]:
            assert i_ is None or i_ < 2048


def test_a_small_model_is_smoke_tested_as_it_is() -> None:
    assert smoke_config(dict(TINY)) is None


@pytest.mark.parametrize(
    "model_id", ["gemma-3-1b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "gpt2", "t5-base"]
)
def test_the_copy_is_the_same_family_and_small(model_id: str) -> None:
    cfg = dict(catalog_entry(model_id)["config"])
    small, note = smoke_config(cfg)  # type: ignore[misc]
    spec = spec_from_hf_config(small, id="s")
    assert spec.family == spec_from_hf_config(cfg, id="c").family
    assert spec.layers <= 2 and spec.vocab <= 2048
    assert "layers" in note


def test_per_layer_lists_keep_a_layer_of_each_kind() -> None:
    cfg = {
        "model_type": "glm4_moe_lite",
        "hidden_size": 2048,
        "num_hidden_layers": 4,
        "num_attention_heads": 20,
        "num_key_value_heads": 20,
        "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    }
    small, _said = shrunken_config(cfg)
    assert small["mlp_layer_types"] == ["dense", "sparse"]
    assert small["layer_types"] == ["sliding_attention", "full_attention"]
