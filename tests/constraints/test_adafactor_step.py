"""Adafactor's step transient: the bytes transformers' ``Adafactor.step`` holds for its largest
tensor, counted from the source (transformers/optimization.py), not from fitplan's constants:
``grad.float()`` of a 16-bit gradient (4 B/element), ``p.float()`` of a 16-bit parameter kept until
``p.copy_`` (4), and the update with its square (``grad**2 + eps``, ``_approx_sq_grad``: 2 × 4).
Falcon-7B's largest tensor is its 65024 × 4544 embedding; the step tracer measured the bf16
full fine-tune's step at 16 B per element of it above weights and gradients
(benchmarks/results/trace_sweep*.csv: 30.20 GiB traced, 8 × 256)."""

from __future__ import annotations

import pytest

from constraints.breakdown import explain
from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model

EMBEDDING = 65024 * 4544


@pytest.mark.parametrize(
    ("recipe", "per_element"),
    [
        ("bf16-torch", 4 + 4 + 8),  # bf16 parameter and gradient, each copied to fp32
        ("fp32", 8),  # the tensors themselves: the update and its square only
        ("amp", 8),  # fp32 weights and gradients under autocast
    ],
)
def test_adafactor_step_holds_the_largest_tensors_fp32_copies(
    recipe: str, per_element: int
) -> None:
    cfg = TrainConfig(method="full", optimizer="adafactor", recipe=recipe, backend="single")
    parts = explain(catalog_model("falcon-7b"), cfg, resolve_gpu("h100")).breakdown.parts
    assert parts["optimizer_step_transient"] == pytest.approx(per_element * EMBEDDING)


@pytest.mark.parametrize(
    ("rank", "targets", "widest"), [(16, "all-linear", 8192), (8, "attention", 2048)]
)
def test_adafactor_steps_lora_one_adapter_matrix_at_a_time(
    rank: int, targets: str, widest: int
) -> None:
    """Under LoRA the tensors Adafactor steps are the adapters: its update is as large as the
    largest adapter matrix, rank × the wider side of a targeted linear (Llama-3.2-1B's config:
    hidden 2048, intermediate 8192: B of gate/up_proj is 8192 × r, A of down_proj r × 8192),
    not as large as all the adapters together (11.3M elements at r16 all-linear)."""
    from constraints.config_batch import ConfigBatch
    from constraints.model_states import model_share, optimizer_parts, trainable_params

    spec = catalog_model("llama-3.2-1b")
    cfg = TrainConfig(
        method="lora", lora_rank=rank, lora_targets=targets, optimizer="adafactor",
        recipe="bf16-torch", adapter_dtype="fp32", backend="single",
    )  # fmt: skip
    batch = ConfigBatch.from_configs([cfg])
    p_train = trainable_params(spec, batch)
    parts = optimizer_parts(spec, batch, p_train, model_share(spec, batch))
    # fp32 adapters and gradients: the update and its square, 8 B per element
    assert parts["optimizer_step_transient"][0] == pytest.approx(8 * rank * widest)
