"""Dequantisation of a quantised base by library (constraints/dequant.py), against the sizes and
call sequences in the libraries' own source."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.config import CODE, TrainConfig
from constraints.dequant import DEQUANT_KERNELS, dequant_bytes_per_weight
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.precision import QUANTS
from constraints.speed import speed_of


@pytest.mark.parametrize("name", ["gptq", "awq"])
def test_group128_storage_matches_the_libraries_buffers(name: str) -> None:
    """A 4096×4096 linear quantised to 4 bits with group size 128 holds (AutoGPTQ
    qlinear_cuda_old.QuantLinear.__init__ / AutoAWQ WQLinear_GEMM.__init__ buffer shapes):
    qweight int32 [4096, 4096/8], qzeros int32 [4096/128, 4096/8], scales fp16 [4096/128, 4096]."""
    d = 4096
    qweight = d * (d // 8) * 4
    qzeros = (d // 128) * (d // 8) * 4
    scales = (d // 128) * d * 2
    assert QUANTS[name].bytes_per_weight * d * d == qweight + qzeros + scales


def _bytes(quant: str, *, recompute: float, micro_batch: int = 1) -> float:
    codes = np.array([CODE["quant"][quant]])
    return float(dequant_bytes_per_weight(codes, np.array([recompute]), np.array([micro_batch]))[0])


def test_bitsandbytes_dequantises_in_forward_and_backward() -> None:
    """MatMul4Bit saves nothing and calls dequantize_4bit again in backward: 2 dequantisations a
    step, 3 with the recomputed forward."""
    once = DEQUANT_KERNELS["nf4"].forward_bytes_per_weight
    assert _bytes("nf4", recompute=0.0) == pytest.approx(2 * once)
    assert _bytes("nf4", recompute=1.0) == pytest.approx(3 * once)


def test_gptq_backward_reuses_the_saved_dequantised_weight() -> None:
    """AutoGPTQ's torch path builds the fp16 weight from int tensors and calls torch.matmul, whose
    autograd saves that weight: only forwards (first and recomputed) dequantise."""
    once = DEQUANT_KERNELS["gptq"].forward_bytes_per_weight
    assert _bytes("gptq", recompute=0.0) == pytest.approx(once)
    assert _bytes("gptq", recompute=1.0) == pytest.approx(2 * once)


def test_gptq_unfused_unpacking_costs_several_bitsandbytes_kernels() -> None:
    """Issue 12 measured the GPTQ-based QLoRA dequantisation at about 8× bitsandbytes' kernel; the
    op-by-op count of AutoGPTQ's unpacking gives 16.5 B against 2.5 B per weight."""
    ratio = (
        DEQUANT_KERNELS["gptq"].forward_bytes_per_weight
        / DEQUANT_KERNELS["nf4-dq"].forward_bytes_per_weight
    )
    assert 5.0 < ratio < 10.0


def test_awq_backward_grows_with_the_sequences_of_a_micro_batch() -> None:
    """WQLinearMMFunction.backward repeats the transposed weight once per sequence for its bmm;
    bitsandbytes' backward does not depend on the batch."""
    assert _bytes("awq", recompute=0.0, micro_batch=4) > _bytes("awq", recompute=0.0, micro_batch=1)
    assert _bytes("nf4", recompute=0.0, micro_batch=4) == _bytes(
        "nf4", recompute=0.0, micro_batch=1
    )


def test_a_gptq_base_steps_slower_than_a_bitsandbytes_one() -> None:
    spec, gpu = catalog_model("llama-3.1-8b"), resolve_gpu("rtx-4090")
    base = {"method": "qlora", "micro_batch": 2, "seq_len": 2048, "checkpointing": "full"}
    bnb = speed_of(spec, TrainConfig(**base, quant="nf4-dq"), gpu)
    gptq = speed_of(spec, TrainConfig(**base, quant="gptq"), gpu)
    assert gptq.parts["dequant_s"] > 3.0 * bnb.parts["dequant_s"]
    assert gptq.step_time_s > bnb.step_time_s


def test_gptq_keeps_every_dequantised_weight_saved_without_checkpointing() -> None:
    """AutoGPTQ's ``torch.matmul(x.half(), weight)`` saves the fp16 weight for the input's
    gradient (qlinear_cuda_old.QuantLinear.forward), bitsandbytes' MatMul4Bit saves only the
    packed one: without checkpointing a GPTQ base holds one 16-bit copy of every quantised
    linear. Llama-3.1-8B by hand (config.json): 32 layers × (2·4096² + 2·4096·1024 + 3·4096·14336)
    = 6,979,321,856 weights, × 2 B."""
    from constraints.activations import activation_arrays
    from constraints.config_batch import ConfigBatch

    spec = catalog_model("llama-3.1-8b")
    saved = {}
    for quant in ("nf4", "gptq"):
        for ckpt in ("none", "full"):
            cfg = TrainConfig(method="qlora", quant=quant, checkpointing=ckpt, seq_len=2048)
            saved[quant, ckpt] = activation_arrays(spec, ConfigBatch.from_configs([cfg]))["saved"][
                0
            ]
    by_hand = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2
    assert saved["gptq", "none"] - saved["nf4", "none"] == pytest.approx(by_hand, rel=1e-6)
    assert saved["gptq", "full"] == pytest.approx(saved["nf4", "full"], rel=1e-6)
