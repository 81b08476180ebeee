"""The activation model against Korthikanti et al. (2022), 'Reducing Activation Recomputation in
Large Transformer Models', eq. (1): a GPT layer in 16-bit with dropout saves
s·b·h·(34 + 5·a·s/h) bytes; flash attention removes the 5·a·s/h term; selective recomputation
removes it too; full checkpointing keeps 2·s·b·h per layer."""

from __future__ import annotations

import numpy as np

from constraints.activations import activation_coefficients
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.memory import memory_arrays
from constraints.models import spec_from_hf_config

H, A, L = 1024, 16, 4
GPT = spec_from_hf_config(
    {
        "model_type": "gpt2",
        "n_embd": H,
        "n_head": A,
        "n_layer": L,
        "vocab_size": 1000,
        "n_positions": 4096,
        "activation_function": "gelu",
    },  # torch's fused GeLU: saves its input only, as the paper assumes
    id="gpt-korthikanti",
)


def _layer_bytes_per_token(attention: str, selective: bool, s: int) -> float:
    c = activation_coefficients(GPT, "full", "", attention, selective, False)
    bytes_of = {"compute": 2, "residual": 2, "fp32": 4, "softmax": 2, "mask": 1, "cast16": 2}
    return sum((c.layer_per_token[k] + c.layer_s2[k] * s) * b for k, b in bytes_of.items())


def test_eager_gpt_layer_is_34h_plus_5as() -> None:
    s = 2048
    got = _layer_bytes_per_token("eager", False, s)
    # + 2 LayerNorms × (mean, rstd) fp32 = 16 bytes, which the paper folds away
    assert got == 34 * H + 5 * A * s + 16


def test_flash_removes_the_s2_term() -> None:
    got = _layer_bytes_per_token("flash", False, 2048)
    # flash keeps the output (same 2h as the out-projection input) and the fp32 log-sum-exp per head
    assert got == 34 * H + 16 + 4 * A


def test_selective_recomputation_drops_the_attention_scores() -> None:
    assert _layer_bytes_per_token("eager", True, 2048) == 34 * H + 16


def test_full_checkpointing_keeps_2sbh_per_layer() -> None:
    gpu = resolve_gpu("h100-sxm")
    cfgs = [
        TrainConfig(recipe="bf16-pure", micro_batch=1, seq_len=1024, checkpointing=c)
        for c in ("none", "full")
    ]
    arr = memory_arrays(GPT, ConfigBatch.from_configs(cfgs), gpu)
    none_saved, full_saved = arr["activations_saved_all_layers"]
    assert np.isclose(full_saved, 1024 * L * 2 * H)
    assert full_saved < none_saved
