"""Mamba and Falcon-Mamba (constraints/mamba_lm.py, the mixer in constraints/mamba1.py) against
the models transformers 5.25 builds: the stored totals are ``sum(p.numel() for p in
model.parameters())`` of ``MambaForCausalLM`` / ``FalconMambaForCausalLM`` built on the meta
device from ``AutoConfig.for_model(type, **overrides)`` (transformers 5.25.0). mamba-2.8b's shape
gives the 2.77B of its model card, Falcon-Mamba-7B's the 7.27B of its."""

from __future__ import annotations

from typing import Any

import pytest

from constraints.errors import FitplanError
from constraints.lora_targets import peft_target_modules
from constraints.mamba1 import scan_backward_bytes_per_token
from constraints.models import spec_from_hf_config
from constraints.params import total_params

SHAPES: dict[str, tuple[str, dict[str, Any], int]] = {
    "mamba default": ("mamba", {}, 159_308_544),
    "mamba-2.8b": (
        "mamba",
        {"hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50280},
        2_768_345_600,
    ),
    # a saved intermediate_size overrides expand; biases; an explicit time-step rank
    "mamba, width given, biases": (
        "mamba",
        {
            "hidden_size": 256,
            "intermediate_size": 640,
            "num_hidden_layers": 3,
            "vocab_size": 1000,
            "use_bias": True,
            "use_conv_bias": False,
            "time_step_rank": 20,
            "state_size": 8,
            "conv_kernel": 3,
        },
        1_868_672,
    ),
    "falcon-mamba-7b": (
        "falcon_mamba",
        {
            "hidden_size": 4096,
            "num_hidden_layers": 64,
            "vocab_size": 65024,
            "tie_word_embeddings": False,
            "time_step_rank": 256,
            "state_size": 16,
        },
        7_272_665_088,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_counts_what_transformers_builds(shape: str) -> None:
    model_type, overrides, expected = SHAPES[shape]
    spec = spec_from_hf_config({"model_type": model_type, **overrides}, id="m")
    assert total_params(spec) == expected
    assert spec.attention_layers == 0 and spec.mamba1_layers == spec.layers


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_build_is_the_stored_count(shape: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, overrides, expected = SHAPES[shape]
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **overrides))
    assert sum(p.numel() for p in built.parameters()) == expected


def test_the_stepped_scan_backward_holds_four_full_gradients() -> None:
    """mamba-2.8b: I = 5120, N = 16, so four [I, N] fp32 tensors per token (327,680 B)."""
    spec = spec_from_hf_config({"model_type": "mamba", "hidden_size": 2560}, id="m")
    assert scan_backward_bytes_per_token(spec) == 4 * 5120 * 16 * 4
    assert scan_backward_bytes_per_token(spec_from_hf_config({"model_type": "mamba2"}, id="n")) == 0


def test_peft_gets_no_out_proj() -> None:
    spec = spec_from_hf_config({"model_type": "mamba"}, id="m")
    assert peft_target_modules(spec, "all-linear") == ["in_proj", "x_proj", "dt_proj"]


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"hidden_act": "gelu"}, "SiLU"),
        ({"state_size": 0}, "state_size"),
        ({"time_step_rank": "wide"}, "time_step_rank"),
        ({"intermediate_size": -4}, "intermediate_size"),
    ],
)
def test_refusals_are_one_line(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config({"model_type": "mamba", **overrides}, id="m")
    assert phrase in str(err.value) and "\n" not in str(err.value)
