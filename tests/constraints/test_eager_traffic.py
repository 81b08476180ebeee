"""Eager elementwise traffic by model code (constraints/eager_traffic.py, issue 12).

The light tests hold the data file to what reading each framework's source says about its kernels
(which layer moves more bytes than which) and the throughput model to using it only under the
eager stack; the heavy ones re-trace layers with tools/trace_elementwise.py and compare with hand
counts from the source and with the stored coefficients at a shape they were not solved from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from constraints.config import MODEL_CODES, TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.eager_traffic import (
    eager_elementwise_factors,
    eager_recompute_shares,
    traced_bytes_per_token,
    traced_layers,
)
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.throughput import throughput_arrays
from constraints.throughput_constants import ELEMENTWISE_RECOMPUTE_SHARE, K_ELEMENTWISE

DATA = Path(__file__).resolve().parents[2] / "constraints" / "data" / "eager_elementwise.json"
LLAMA_8B = catalog_model("llama-3.1-8b")


def _factor(spec, code: str) -> float:
    return eager_elementwise_factors(spec, K_ELEMENTWISE)[MODEL_CODES.index(code)]


def test_every_model_code_is_traced_for_llama():
    assert {(code, "llama") for code in MODEL_CODES} <= set(traced_layers())


def test_stored_coefficients_reproduce_each_stored_trace():
    doc = json.loads(DATA.read_text())
    for families in doc["codes"].values():
        for entry in families.values():
            c = entry["bytes_per_token_per_layer"]
            for t in entry["traces"]:
                s = t["shape"]
                kv = s["kv_heads"] * s["head_dim"]
                linear = c["hidden"] * s["hidden"] + c["intermediate"] * s["intermediate"]
                assert linear + c["kv_width"] * kv == pytest.approx(t["bytes_per_token"], rel=1e-6)


def test_the_fused_rmsnorm_moves_fewer_bytes_than_the_unfused_chain():
    # torchtitan norms.py: RMSNorm is x.float(), pow, mean, add, rsqrt, mul, type_as, weight mul;
    # FusedRMSNorm one Triton kernel each way; everything else in the block is the same code
    fused = traced_bytes_per_token(LLAMA_8B, "torchtitan-fused-rmsnorm")
    unfused = traced_bytes_per_token(LLAMA_8B, "torchtitan")
    assert fused is not None and unfused is not None
    assert fused < 0.6 * unfused


def test_torchtunes_fp32_rope_moves_more_than_hfs_bf16_rope():
    # same RMSNorm chain and SwiGLU; torchtune's RotaryPositionalEmbeddings runs x.float(), four
    # fp32 muls, two adds and a stack; HF's apply_rotary_pos_emb runs in the model dtype
    tt = traced_bytes_per_token(LLAMA_8B, "torchtune")
    hf = traced_bytes_per_token(LLAMA_8B, "hf")
    assert tt is not None and hf is not None and tt > hf


def test_reference_and_untraced_layers_keep_the_fitted_factor():
    gpt2 = catalog_model("gpt2")
    assert _factor(gpt2, "hf") == K_ELEMENTWISE
    opt = catalog_model("opt-1.3b")
    assert opt.family not in {f for _, f in traced_layers()}
    assert all(k == K_ELEMENTWISE for k in eager_elementwise_factors(opt, K_ELEMENTWISE))
    assert eager_recompute_shares(opt, ELEMENTWISE_RECOMPUTE_SHARE) == (
        ELEMENTWISE_RECOMPUTE_SHARE,
    ) * len(MODEL_CODES)


def test_hf_llama_moves_more_per_saved_byte_than_mpts_reference():
    assert _factor(LLAMA_8B, "hf") > K_ELEMENTWISE
    assert _factor(LLAMA_8B, "torchtune") > _factor(LLAMA_8B, "hf")
    assert _factor(LLAMA_8B, "torchtitan-fused-rmsnorm") < _factor(LLAMA_8B, "torchtitan")


def _elementwise(kernels: str, code: str) -> float:
    cfg = TrainConfig(micro_batch=2, seq_len=4096, kernels=kernels, model_code=code)
    out = throughput_arrays(LLAMA_8B, ConfigBatch.from_configs([cfg]), resolve_gpu("a100-80gb"))
    return float(out["elementwise_s"][0])


def test_the_model_code_moves_the_eager_stack_only():
    eager = {code: _elementwise("eager", code) for code in MODEL_CODES}
    assert eager["torchtune"] > eager["hf"] > eager["torchtitan-fused-rmsnorm"]
    compiled = {code: _elementwise("compile", code) for code in MODEL_CODES}
    assert len(set(compiled.values())) == 1


# ---- heavy: re-trace with the tool -------------------------------------------------------------


@pytest.mark.heavy
def test_hf_rmsnorm_forward_is_36_bytes_per_element():
    """By hand from LlamaRMSNorm.forward, bytes per element of a bf16 input: to(float32) 2 + 4,
    pow 4 + 4, mean 4 (+ one per row), the add and rsqrt per row only, x * rsqrt 4 + 4,
    to(bf16) 4 + 2, weight * x 2 + 2 = 36."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from tools.trace_elementwise import Counter

    counter = Counter()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            counter.record(func.overloadpacket.__name__, args, kwargs or {}, out)
            return out

    rows, hidden = 4096, 4096
    with torch.device("meta"):
        norm = LlamaRMSNorm(hidden).to(torch.bfloat16)
        x = torch.empty(rows, hidden, dtype=torch.bfloat16)
        with Mode():
            norm(x)
    per_element = (counter.read + counter.written) / (rows * hidden)
    assert per_element == pytest.approx(36.0, rel=0.01)


@pytest.mark.heavy
def test_stored_hf_llama_coefficients_predict_a_fresh_trace_at_another_shape():
    """Llama 3.2 3B's widths (hidden 3072, MLP 8192, 8 kv heads of 128) are not among the three
    shapes the coefficients were solved from."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tools.trace_elementwise import hf_layer, trace_layer

    shape = {"hidden": 3072, "intermediate": 8192, "heads": 24, "kv_heads": 8, "head_dim": 128}
    traced = trace_layer(lambda s, n: hf_layer("llama", s, n), shape, 512)["bytes_per_token"]
    spec = catalog_model("llama-3.2-3b")
    assert (spec.hidden, spec.intermediate, spec.kv_heads) == (3072, 8192, 8)
    assert traced_bytes_per_token(spec, "hf") == pytest.approx(traced, rel=0.01)
    assert np.isfinite(traced)
