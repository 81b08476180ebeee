"""``TrainConfig.as_planned``: the adapter dtype fitplan counted, pinned for the tracer and the
measurement, without moving the analytic model."""

from __future__ import annotations

import pytest

from constraints.breakdown import explain
from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model

CASES = [
    ({"method": "lora", "recipe": "bf16-torch"}, "fp32"),  # PEFT's autocast_adapter_dtype=True
    ({"method": "lora", "recipe": "bf16-torch", "backend": "deepspeed"}, "bf16"),  # engine cast
    ({"method": "lora", "recipe": "bf16-master"}, "bf16"),  # DeepSpeed's bf16 mode casts them
    ({"method": "lora", "recipe": "bf16-torch", "model_code": "torchtune"}, "bf16"),
    ({"method": "lora", "recipe": "amp"}, "fp32"),  # amp keeps fp32 weights: fp32 adapters
    ({"method": "lora", "recipe": "fp32"}, "fp32"),
    ({"method": "qlora", "quant": "nf4", "recipe": "bf16-torch"}, "fp32"),  # PEFT's kbit recipe
    ({"method": "qlora", "quant": "nf4", "recipe": "bf16-pure"}, "bf16"),  # the compute dtype
    ({"method": "qlora", "quant": "nf4-dq", "recipe": "amp"}, "fp32"),  # the PEFT kbit recipe
]


@pytest.mark.parametrize(("fields", "expected"), CASES)
def test_unpinned_adapters_take_the_dtype_the_model_counts(
    fields: dict[str, str], expected: str
) -> None:
    cfg = TrainConfig(**fields)
    assert cfg.adapter_dtype is None
    assert cfg.as_planned().adapter_dtype == expected
    spec, gpu = catalog_model("llama-3.1-8b"), resolve_gpu("a100-80gb")
    before, after = (
        explain(spec, cfg, gpu).breakdown,
        explain(spec, cfg.as_planned(), gpu).breakdown,
    )
    assert after.parts == before.parts and after.phase == before.phase


def test_full_fine_tunes_and_pinned_adapters_are_left_alone() -> None:
    full = TrainConfig(method="full")
    pinned = TrainConfig(method="qlora", quant="nf4", adapter_dtype="fp32")
    assert full.as_planned() is full and pinned.as_planned() is pinned
