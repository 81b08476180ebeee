"""Gemma 4's text model (constraints/gemma4.py) against the model transformers 5.25 builds.

The stored totals are ``sum(p.numel() for p in model.parameters())`` of ``Gemma4ForCausalLM``
built on the meta device from ``AutoConfig.for_model("gemma4_text", **overrides)`` (transformers
5.25.0), an independent source; where torch is installed the build is repeated live.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import lora_params, peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

#: overrides of Gemma4TextConfig's defaults -> transformers' parameter count
SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (E2B-like: per-layer inputs)": ({}, 5_077_177_856),
    "kv sharing, double-wide MLP, one kv head": (
        {
            "num_hidden_layers": 35,
            "hidden_size": 1536,
            "intermediate_size": 6144,
            "num_kv_shared_layers": 20,
            "use_double_wide_mlp": True,
            "num_key_value_heads": 1,
        },
        4_621_490_944,
    ),
    "MoE beside the dense MLP": (
        {
            "enable_moe_block": True,
            "num_experts": 16,
            "top_k_experts": 4,
            "moe_intermediate_size": 704,
            "hidden_size_per_layer_input": 0,
            "num_hidden_layers": 12,
        },
        2_501_526_976,
    ),
    "global values are keys, untied, biases": (
        {
            "attention_k_eq_v": True,
            "num_global_key_value_heads": 2,
            "hidden_size_per_layer_input": 0,
            "num_hidden_layers": 12,
            "tie_word_embeddings": False,
            "attention_bias": True,
        },
        2_156_595_456,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "gemma4_text", **overrides}, id="g4")
    assert total_params(spec) == expected


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reads_the_config_transformers_writes(shape: str) -> None:
    """transformers writes the global layers' shape as ``per_layer_config`` (``global_head_dim``
    is popped): the saved config.json counts the same."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    config = AutoConfig.for_model("gemma4_text", **overrides)
    with torch.device("meta"):
        built = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    assert built == expected
    saved = {**config.to_dict(), "model_type": "gemma4_text"}
    assert "per_layer_config" in saved
    assert total_params(spec_from_hf_config(saved, id="g4")) == expected


def test_layer_kinds_follow_the_pattern_and_the_sharing() -> None:
    spec = spec_from_hf_config(
        {"model_type": "gemma4_text", **SHAPES["kv sharing, double-wide MLP, one kv head"][0]},
        id="g4",
    )
    # 5:1 sliding/global, the last layer forced global, the last 20 reusing keys and values
    assert spec.layer_mixers == "aaaaag" * 2 + "aaa" + "ssr" + "sssssr" * 2 + "ssssr"
    assert spec.attention_layers == 35
    assert spec.sliding_layers == 29


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"use_bidirectional_attention": "all"}, "not a causal"),
        ({"num_hidden_layers": 7, "num_kv_shared_layers": 3}, "no earlier layer computes"),
        ({"num_kv_shared_layers": 31}, "more than the 30 layers"),
        ({"layer_types": ["sliding_attention"] * 3}, "for each of the 30 layers"),
        ({"per_layer_config": {"5": {"intermediate_size": 64}}}, "only head_dim"),
        ({"per_layer_config": {"40": {"head_dim": 64}}}, "not a layer index"),
        (
            {"per_layer_config": {"5": {"head_dim": 512}, "11": {"head_dim": 256}}},
            "one shape for the sliding layers",
        ),
        ({"num_global_key_value_heads": 3, "attention_k_eq_v": True}, "not a multiple"),
    ],
)
def test_shapes_it_does_not_model_are_refused_in_one_line(
    overrides: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "gemma4_text", **overrides}, id="g4")
    assert phrase in err.value.message and "\n" not in err.value.message


SMALL = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "global_head_dim": 64,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "vocab_size_per_layer_input": 1000,
    "num_hidden_layers": 6,
}


@pytest.mark.parametrize(
    "overrides",
    [
        {"hidden_size_per_layer_input": 32, "num_kv_shared_layers": 2, "num_hidden_layers": 8},
        {
            "hidden_size_per_layer_input": 0,
            "enable_moe_block": True,
            "num_experts": 8,
            "top_k_experts": 2,
            "moe_intermediate_size": 64,
        },
    ],
)
@pytest.mark.parametrize("targets", ["all-linear", "q_proj,v_proj"])
def test_lora_counts_what_peft_builds(overrides: dict[str, Any], targets: str) -> None:
    """PEFT wraps the router's ``proj`` Linear and the per-layer-input Linears, not the
    experts' 3-D Parameters (no conversion for gemma4_text in transformers 5.25)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {**SMALL, **overrides}
    spec = spec_from_hf_config({"model_type": "gemma4_text", **fields}, id="g4")
    config = AutoConfig.for_model("gemma4_text", **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    lora = LoraConfig(r=8, target_modules=peft_target_modules(spec, targets))
    peft_model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, targets)


def test_kv_cache_holds_the_layers_computing_their_own_keys_and_values() -> None:
    """Gemma4TextAttention: a reusing layer calls no cache.update (it reads the storing layer's
    keys and values); a global layer caches its own width. E2B-like: 15 own layers (12
    sliding × 1 kv head × 256, 3 global × 1 × 512) of 35, K and V, 2 bytes each."""
    from constraints.inference import kv_cache_bytes

    spec = spec_from_hf_config(
        {"model_type": "gemma4_text", **SHAPES["kv sharing, double-wide MLP, one kv head"][0]},
        id="g4",
    )
    assert spec.layer_mixers[:15].count("g") == 2 and spec.layer_mixers[:15].count("a") == 13
    per_token = 2 * (13 * 1 * 256 + 2 * 1 * 512) * 2
    assert kv_cache_bytes(spec, 1) == per_token


def test_explain_names_the_kernel_of_the_global_layers(tmp_path: Any, capsys: Any) -> None:
    """torch's SDPA runs flash only up to head_dim 256: the 512-wide global layers take the
    memory-efficient kernel, said on the assumed line."""
    import json

    from searcher.cli.parser import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gemma4_text"}), encoding="utf-8")
    code = main(["explain", "--model", str(path), "--gpu", "rtx-4090", "--method", "lora"])
    out = " ".join(capsys.readouterr().out.split())
    assert code in (0, 1)
    assert "the flash kernel on GeForce RTX 4090 (sm 8.9, bf16, head_dim 256)" in out
    assert "its global layers (head_dim 512) the memory-efficient kernel" in out
