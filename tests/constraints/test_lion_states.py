"""Lion as fitplan runs it (HF Trainer's ``lion_32bit``: bitsandbytes' Lion, ``optim_bits=32``,
transformers trainer_optimizer.py) keeps one fp32 state per parameter whatever the parameter's
dtype: bitsandbytes ``Optimizer1State.init_state`` takes float32 when ``optim_bits == 32``. torch's
AdamW, by contrast, allocates its states like the parameter (bf16 on a bf16 model)."""

from __future__ import annotations

import pytest

from constraints.breakdown import explain
from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model


def _parts(**kw: str) -> dict[str, float]:
    cfg = TrainConfig(method="full", backend="single", **kw)
    return explain(catalog_model("llama-3.2-1b"), cfg, resolve_gpu("h100")).breakdown.parts


def test_lion_state_is_fp32_on_a_bf16_model() -> None:
    parts = _parts(optimizer="lion", recipe="bf16-torch")
    params = parts["base_weights"] / 2  # bf16 weights: 2 bytes per parameter
    assert parts["optimizer_states"] == pytest.approx(4 * params)


def test_torch_adamw_states_follow_the_bf16_model() -> None:
    parts = _parts(optimizer="adamw", recipe="bf16-torch")
    assert parts["optimizer_states"] == pytest.approx(2 * parts["base_weights"])


def test_the_emulated_lion_keeps_an_fp32_state() -> None:
    torch = pytest.importorskip("torch")
    from searcher.truth.fake_quant import lion_class

    p = torch.nn.Parameter(torch.zeros(8, 8, dtype=torch.bfloat16))
    p.grad = torch.zeros_like(p)
    opt = lion_class()([p])
    opt.step()
    assert opt.state[p]["exp_avg"].dtype == torch.float32
