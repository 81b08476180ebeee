"""The optimizer step's transient is sized by the tensors the optimizer steps: under LoRA the
largest adapter matrix, never the frozen embedding (issue 26, item 6).

Golden shapes from Llama-3.2-1B's published config.json (hidden 2048, intermediate 8192,
vocab 128256): with all-linear targets at rank 64 the widest adapter matrix is down_proj's
lora_A, 64 x 8192 = 524,288 elements; the embedding is 128256 x 2048 = 262,668,288."""

from __future__ import annotations

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
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
