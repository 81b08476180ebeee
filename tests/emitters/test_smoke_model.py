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


def test_a_hybrid_model_keeps_a_deltanet_and_an_attention_layer_narrowed() -> None:
    """Qwen 3.5: the gated DeltaNet narrowed to 2 key and 4 value heads of 16 (its torch path on
    a CPU took 3.5 minutes a step at full width), a DeltaNet layer and the attention layer kept;
    LFM2's attention layer kept through full_attn_idxs."""
    qwen = {
        "model_type": "qwen3_5_text",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 248320,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "layer_types": [
            "linear_attention",
            "linear_attention",
            "linear_attention",
            "full_attention",
        ]
        * 8,
    }
    small, said = shrunken_config(qwen)
    assert small["layer_types"] == ["linear_attention", "full_attention"]
    assert (small["linear_num_key_heads"], small["linear_num_value_heads"]) == (2, 4)
    assert (small["linear_key_head_dim"], small["linear_value_head_dim"]) == (16, 16)
    assert "linear_num_value_heads 32 -> 4" in said
    spec = spec_from_hf_config(small, id="s")
    assert spec.layer_mixers == "la"
    left_out = {k: v for k, v in qwen.items() if not k.startswith("linear_")}
    defaulted = shrunken_config(left_out)[0]  # the class's 16 × 128 / 32 × 128, narrowed too
    assert (defaulted["linear_num_key_heads"], defaulted["linear_value_head_dim"]) == (2, 16)
    odd = shrunken_config({**qwen, "linear_num_key_heads": 3, "linear_num_value_heads": 3})[0]
    assert (odd["linear_num_key_heads"], odd["linear_num_value_heads"]) == (2, 2)
    lfm2 = {
        "model_type": "lfm2",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "full_attn_idxs": [2, 5, 8, 10, 12, 15],
    }
    assert shrunken_config(lfm2)[0]["full_attn_idxs"] == [1]
    moe = {**lfm2, "model_type": "lfm2_moe", "num_dense_layers": 2, "num_experts": 32}
    moe["layer_types"] = ["conv", "conv", "full_attention", "conv"] * 4
    small_moe = shrunken_config(moe)[0]
    assert small_moe["num_dense_layers"] == 1 and small_moe["num_experts"] == 4
    assert spec_from_hf_config(small_moe, id="m").moe_layers == 1


@pytest.mark.parametrize(
    "model_type",
    [
        "gemma4_text",
        "gemma3n_text",
        "falcon_h1",
        "lfm3",
        "nanochat",
        "mamba2",
        "falcon_mamba",
        "jamba",
    ],
)
def test_the_newer_types_shrink_and_train_a_step(model_type: str) -> None:
    """The smoke copy of each type's default config (Gemma 4's per_layer_config re-keyed to
    the kept layers, Gemma 3n's per-layer lists cut to them, K/V sharing off) is small, read as
    the same family, and transformers builds it and runs a training step on it."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {**AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}
    cfg = json.loads(json.dumps(cfg, default=str))
    found = smoke_config(cfg)
    assert found is not None
    small, _note = found
    assert spec_from_hf_config(small, id="smoke").family == model_type
    fields = {k: v for k, v in small.items() if k not in ("model_type", "transformers_version")}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields))
    assert sum(p.numel() for p in model.parameters()) < 20_000_000
    ids = torch.randint(0, small["vocab_size"], (1, 64))
    model(input_ids=ids, labels=ids).loss.backward()
