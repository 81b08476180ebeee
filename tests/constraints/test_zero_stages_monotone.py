"""ZeRO stages only shard: the peak per GPU never rises from ZeRO-0 to ZeRO-3 (issue 26, item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.memory import memory_arrays
from constraints.models import catalog_model

LLAMA_1B = catalog_model("llama-3.2-1b")


def _cfg(**kw) -> TrainConfig:
    base = {"method": "lora", "lora_rank": 64, "optimizer": "adafactor", "micro_batch": 1}
    return TrainConfig(**(base | kw))


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
