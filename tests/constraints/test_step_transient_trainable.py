"""The optimizer step's transient is sized by the tensors the optimizer steps: under LoRA the
largest adapter matrix, never the frozen embedding (issue 26, item 6).

Golden shapes from Llama-3.2-1B's published config.json (hidden 2048, intermediate 8192,
vocab 128256): with all-linear targets at rank 64 the widest adapter matrix is down_proj's
lora_A, 64 x 8192 = 524,288 elements; the embedding is 128256 x 2048 = 262,668,288."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.memory import memory_arrays
from constraints.model_states import largest_trainable_tensor
from constraints.models import catalog_model

LLAMA_1B = catalog_model("llama-3.2-1b")


def _cfg(**kw) -> TrainConfig:
    base = {"method": "lora", "lora_rank": 64, "optimizer": "adafactor", "micro_batch": 1}
    return TrainConfig(**(base | kw))


def test_largest_trainable_tensor_of_lora_is_the_widest_adapter_matrix():
    batch = ConfigBatch.from_configs([_cfg(), _cfg(lora_rank=8), _cfg(method="full")])
    got = largest_trainable_tensor(LLAMA_1B, batch)
    assert got.tolist() == [64 * 8192, 8 * 8192, 128256 * 2048]


@pytest.mark.parametrize("model", ["llama-3.2-1b", "t5-base"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("optimizer", ["adamw", "adafactor"])
def test_peak_does_not_grow_from_zero_0_to_zero_3(model, method, optimizer):
    """Each ZeRO stage shards more of the same states (Rajbhandari et al. 2020): at a fixed
    backend and layout the peak per GPU can only fall or stay."""
    spec = catalog_model(model)
    gpu = resolve_gpu("a100-80gb")
    cfgs = [
        TrainConfig(
            method=method,
            lora_rank=16,
            optimizer=optimizer,
            micro_batch=1,
            dp=4,
            zero=z,
            backend="deepspeed",
        )
        for z in (0, 1, 2, 3)
    ]
    peaks = np.asarray(memory_arrays(spec, ConfigBatch.from_configs(cfgs), gpu)["total"])
    assert all(np.diff(peaks) <= 0.0), peaks
