"""Gradients held unsharded through gradient accumulation under FSDP's ``no_sync``.

Golden numbers from Llama-3.1-8B's published shapes (hidden 4096, MLP 14336, 32 query and 8
key/value heads of 128, 32 layers, vocabulary 128256, untied head), not from the code: one decoder
layer is 2·4096² (q, o) + 2·4096·1024 (k, v) + 3·4096·14336 (MLP) + 2·4096 (norms) = 218,112,000
parameters; with the embedding, the head (128256·4096 each) and the final norm 8,030,261,248, the
count Hugging Face publishes. FSDP1's ``no_sync`` keeps ``flat_param.grad`` unsharded on every
rank (torch/distributed/fsdp/_runtime_utils.py ``_post_backward_hook`` returns before the
reduce-scatter), so from the second micro-batch on each GPU holds P × 2 bytes of bf16 gradients,
not P × 2 / dp; the last micro-batch's ``_reduce_grad`` frees each unsharded gradient
(``flat_param.grad = None``) before the optimizer step.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.memory import PHASES, memory_arrays
from constraints.models import resolve_model

LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
PARAMS = 32 * LAYER + 2 * 128256 * 4096 + 4096
BF16 = 2


def _peak(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        method="full",
        recipe="bf16-torch",
        zero=3,
        dp=4,
        backend="fsdp1",
        micro_batch=1,
        seq_len=512,
        grad_accum=4,
        checkpointing="full",
    )
    cfg = TrainConfig(**{**base, **kw})
    out = memory_arrays(
        resolve_model("llama-3.1-8b"), ConfigBatch.from_configs([cfg]), resolve_gpu("h100")
    )
    return {k: v[0] for k, v in out.items()}


def test_shapes_are_the_published_ones() -> None:
    assert LAYER == 218_112_000
    assert PARAMS == 8_030_261_248


def test_no_sync_holds_every_gradient_unsharded() -> None:
    synced = _peak()
    unsynced = _peak(grad_sync="last-micro-batch")
    assert PHASES[int(unsynced["phase"])] != "optimizer step"
    assert unsynced["gradient_tensors"] == pytest.approx(PARAMS * BF16, rel=1e-9)
    assert synced["gradient_tensors"] <= PARAMS * BF16 / 4 * (1 + 1e-9)
    # no reduce-scatter runs in a no_sync backward: its buffers are not added on top
    assert unsynced["grad_buckets"] == 0.0
    assert unsynced["total"] - synced["total"] >= PARAMS * BF16 * (1 - 1 / 4) * 0.9


@pytest.mark.parametrize(
    "kw",
    [
        dict(grad_accum=1),  # nothing to accumulate: every backward syncs
        dict(backend="deepspeed"),  # DeepSpeed reduces every micro-batch
        dict(zero=1, recipe="bf16-master"),  # gradients are not sharded: no_sync changes nothing
        dict(dp=1, zero=0, backend="single", recipe="bf16-master"),
    ],
)
def test_no_sync_changes_nothing_where_gradients_are_not_sharded_or_accumulated(
    kw: dict[str, Any],
) -> None:
    assert _peak(grad_sync="last-micro-batch", **kw)["total"] == _peak(**kw)["total"]


def test_fsdp2_holds_them_in_the_reduce_dtype() -> None:
    # fp32 parameters (amp) under a bf16 MixedPrecisionPolicy (reduce_dtype fp32): _fsdp_param.py
    # to_accumulated_grad_if_needed upcasts the unsharded gradient to fp32 and keeps it
    out = _peak(backend="fsdp2", recipe="amp", grad_sync="last-micro-batch")
    assert out["gradient_tensors"] == pytest.approx(PARAMS * 4, rel=1e-9)
