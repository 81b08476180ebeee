"""Falcon-H1 (constraints/falcon_h1.py) against the model transformers 5.25 builds.

The stored totals are ``sum(p.numel() for p in model.parameters())`` of ``FalconH1ForCausalLM``
built on the meta device from ``AutoConfig.for_model("falcon_h1", **overrides)`` (transformers
5.25.0), an independent source; where torch is installed the build is repeated live.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import lora_params, peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

#: overrides of FalconH1Config's defaults -> transformers' parameter count
SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default (no mixer norm, mamba_d_ssm 1024)": ({}, 8_514_961_408),
    "norm after the gate, biases on both projections": (
        {
            "mamba_rms_norm": True,
            "mamba_norm_before_gate": False,
            "num_hidden_layers": 4,
            "projectors_bias": True,
            "mamba_proj_bias": True,
        },
        1_981_908_992,
    ),
    "norm before the gate, width from mamba_expand, tied, attention bias": (
        {
            "mamba_rms_norm": True,
            "num_hidden_layers": 4,
            "mamba_d_ssm": None,
            "mamba_n_heads": 64,
            "mamba_d_head": "auto",
            "head_dim": 64,
            "tie_word_embeddings": True,
            "attention_bias": True,
        },
        1_725_180_672,
    ),
    "small, two groups, no conv bias": (
        {
            "hidden_size": 1024,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "num_hidden_layers": 6,
            "mamba_d_ssm": 1536,
            "mamba_n_heads": 24,
            "mamba_d_head": 64,
            "mamba_n_groups": 2,
            "mamba_d_state": 128,
            "intermediate_size": 2048,
            "vocab_size": 32000,
            "mamba_conv_bias": False,
        },
        150_681_008,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "falcon_h1", **overrides}, id="fh1")
    assert total_params(spec) == expected
    assert spec.attention_layers == spec.mamba_layers == spec.layers  # side by side


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    config = AutoConfig.for_model("falcon_h1", **overrides)
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in built.parameters()) == expected


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"mamba_n_heads": 100}, "does not divide mamba_d_ssm 1024"),
        ({"mamba_d_head": 16}, "is not mamba_d_ssm 1024"),
        ({"num_key_value_heads": 5}, "not a multiple"),
        ({"mamba_d_ssm": -4}, "must not be negative"),
    ],
)
def test_shapes_transformers_refuses_are_refused_in_one_line(
    overrides: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "falcon_h1", **overrides}, id="fh1")
    assert phrase in err.value.message and "\n" not in err.value.message


def test_lora_counts_what_peft_builds() -> None:
    """PEFT refuses LoRA on the Mamba out_proj / conv1d of falcon_h1: all-linear is written as
    the other Linears' names, and counts what PEFT then builds."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides = SHAPES["small, two groups, no conv bias"][0]
    spec = spec_from_hf_config({"model_type": "falcon_h1", **overrides}, id="fh1")
    targets = peft_target_modules(spec, "all-linear")
    assert isinstance(targets, list) and "out_proj" not in targets and "in_proj" in targets
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("falcon_h1", **overrides))
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=targets))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, "all-linear")


def test_serving_refuses_the_mamba_state_it_does_not_model() -> None:
    """Every layer caches attention's K/V and a Mamba state: the KV figure counts the K/V of
    every layer, and serve refuses in one line (vLLM's hybrid cache is not modelled)."""
    from constraints.gpus import resolve_gpu
    from constraints.inference import kv_cache_bytes
    from constraints.serving import serving_memory

    spec = spec_from_hf_config({"model_type": "falcon_h1"}, id="fh1")
    assert kv_cache_bytes(spec, 1) == 2 * 8 * 128 * 2 * 32  # K and V, 8 kv heads × 128, bf16
    with pytest.raises(FitplanError, match="32 of its 32 layers keep a per-request state"):
        serving_memory(spec, resolve_gpu("h100"))
