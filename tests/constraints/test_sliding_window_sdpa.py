"""Windowed layers under SDPA: which layers have a window, and what a masked layer saves.

Golden figures by hand from the framework code: transformers 5.25 hands SDPA a mask once the
sequence reaches the window (masking_utils.py ``_ignore_causal_mask_sdpa``: ``kv_length >=
local_attention_size``), then expands K and V to every head itself (sdpa_attention.py
``use_gqa_in_sdpa`` is false with a mask); PyTorch's memory-efficient kernel (flash takes no
mask) keeps the mask converted to the query's dtype (attention.cpp
``convert_boolean_attn_mask``), one [b, 1, s, s] tensor per layer. The layer patterns are the
config classes' ``__post_init__`` (configuration_gemma2.py: every other layer; gemma3: 5 of 6;
qwen2: the layers from max_window_layers on).
"""

from __future__ import annotations

import numpy as np
import pytest

from constraints.activations import masked_sdpa_bytes_per_layer
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config

SMALL = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
}


@pytest.mark.parametrize(
    ("cfg", "sliding"),
    [
        ({"model_type": "mistral", "sliding_window": 64}, 12),
        ({"model_type": "mistral"}, 0),
        ({"model_type": "gemma2", "sliding_window": 64}, 6),
        ({"model_type": "gemma3_text", "sliding_window": 64}, 10),
        ({"model_type": "gemma3_text", "sliding_window": 64, "sliding_window_pattern": 3}, 8),
        ({"model_type": "exaone4", "sliding_window": 64, "sliding_window_pattern": "LLLG"}, 9),
        (
            {
                "model_type": "qwen2",
                "sliding_window": 64,
                "use_sliding_window": True,
                "max_window_layers": 4,
            },
            8,
        ),
        ({"model_type": "qwen2", "sliding_window": 64}, 0),  # use_sliding_window false
        (
            {
                "model_type": "mistral",
                "sliding_window": 64,
                "layer_types": ["sliding_attention", "full_attention"] * 6,
            },
            6,
        ),
    ],
)
def test_windowed_layers_by_type(cfg: dict[str, object], sliding: int) -> None:
    assert spec_from_hf_config({**SMALL, **cfg}, id="t").sliding_layers == sliding


def test_layer_types_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(FitplanError, match="layer_types must list one attention type per layer"):
        spec_from_hf_config(
            {**SMALL, "model_type": "mistral", "sliding_window": 64, "layer_types": ["x"]}, id="t"
        )


def _masked(spec_cfg: dict[str, object], **config: object) -> float:
    spec = spec_from_hf_config({**SMALL, **spec_cfg}, id="t")
    base = {"method": "lora", "micro_batch": 2, "seq_len": 256, "recipe": "bf16-torch"}
    batch = ConfigBatch.from_configs([TrainConfig(**{**base, **config})])
    return float(masked_sdpa_bytes_per_layer(spec, batch, batch.compute_bytes)[0])


def test_a_masked_layer_keeps_expanded_k_v_and_a_16_bit_bias() -> None:
    # b = 2, s = 256: K and V at 8 heads instead of 2 (2 · 6 · 32 elements per token) and one
    # bf16 bias row of 256 per token
    expected = 2 * 256 * (2 * (8 - 2) * 32 + 256) * 2
    mistral = {"model_type": "mistral", "sliding_window": 64}
    assert _masked(mistral, attention="sdpa") == expected
    assert _masked({**mistral, "sliding_window": 256}, attention="sdpa") == expected  # s ≥ window
    assert _masked({**mistral, "sliding_window": 257}, attention="sdpa") == 0  # no mask
    assert _masked(mistral, attention="flash") == 0  # flash-attn takes the window itself
    assert _masked(mistral, attention="eager") == 0  # eager counts its own expansion
    # Gemma 2 has no SDPA path (soft-capping): transformers runs it eager
    assert _masked({"model_type": "gemma2", "sliding_window": 64}, attention="sdpa") == 0


def test_the_saved_activations_grow_by_the_windowed_layers() -> None:
    from constraints.gpus import resolve_gpu
    from constraints.memory import memory_arrays

    def saved(window: int) -> float:
        spec = spec_from_hf_config(
            {**SMALL, "model_type": "mistral", "sliding_window": window}, id="t"
        )
        cfg = TrainConfig(method="lora", micro_batch=2, seq_len=256, attention="sdpa")
        arrays = memory_arrays(spec, ConfigBatch.from_configs([cfg]), resolve_gpu("h100"))
        return float(np.asarray(arrays["activations_saved_all_layers"])[0])

    per_layer = 2 * 256 * (2 * (8 - 2) * 32 + 256) * 2
    assert saved(64) - saved(4096) == pytest.approx(12 * per_layer, rel=0.02)
