"""Mamba-2 (constraints/mamba2_lm.py) against the model transformers 5.25 builds: the stored
totals are ``sum(p.numel() for p in model.parameters())`` of ``Mamba2ForCausalLM`` built on the
meta device from ``AutoConfig.for_model("mamba2", **overrides)`` (transformers 5.25.0)."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.lora_targets import peft_target_modules
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[dict[str, Any], int]] = {
    "default": ({}, 7_285_403_648),
    # mamba2-130m's shape: 24 × 768, one group, a tied head
    "130m-like, tied": (
        {
            "hidden_size": 768,
            "num_heads": 24,
            "head_dim": 64,
            "num_hidden_layers": 24,
            "vocab_size": 50280,
            "tie_word_embeddings": True,
            "n_groups": 1,
            "state_size": 128,
        },
        128_983_488,
    ),
    "expand 3, biases, no conv bias": (
        {
            "hidden_size": 512,
            "num_heads": 16,
            "head_dim": 96,
            "expand": 3,
            "num_hidden_layers": 5,
            "vocab_size": 32000,
            "use_bias": True,
            "use_conv_bias": False,
            "n_groups": 4,
            "conv_kernel": 3,
        },
        47_299_392,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": "mamba2", **overrides}, id="m2")
    assert total_params(spec) == expected
    assert spec.attention_layers == 0 and spec.mamba_layers == spec.layers


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("mamba2", **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_peft_gets_no_out_proj() -> None:
    """PEFT refuses LoRA on a Mamba model's out_proj and conv1d (peft 0.21.2
    ``_check_lora_target_modules_mamba``): all-linear is handed over as the rest."""
    spec = spec_from_hf_config({"model_type": "mamba2"}, id="m2")
    assert peft_target_modules(spec, "all-linear") == ["in_proj"]


def test_checkpointed_layers_keep_the_fp32_stream() -> None:
    """``residual_in_fp32``: each block after the first is given the fp32 stream, so full
    checkpointing keeps 4 bytes per element there in bf16 training, 2 without it."""
    from constraints.breakdown import explain
    from constraints.gpus import resolve_gpu

    gpu = resolve_gpu("h100")
    cfg = TrainConfig(method="full", micro_batch=1, seq_len=1024, checkpointing="full")
    base = {"model_type": "mamba2", "num_hidden_layers": 8}
    fp32 = explain(spec_from_hf_config(base, id="a"), cfg, gpu).breakdown
    plain = explain(
        spec_from_hf_config({**base, "residual_in_fp32": False}, id="b"), cfg, gpu
    ).breakdown
    # seven layer inputs of 1024 × 4096 at 2 more bytes each
    assert fp32.parts["saved_activations"] - plain.parts["saved_activations"] == 7 * 1024 * 4096 * 2


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"num_heads": 100}, "is not expand"),
        ({"n_groups": 3}, "does not divide num_heads"),
        ({"hidden_act": "gelu"}, "SiLU"),
        ({"state_size": 0}, "state_size"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "mamba2", **overrides}, id="m2")
    assert phrase in str(err.value) and "\n" not in str(err.value)
