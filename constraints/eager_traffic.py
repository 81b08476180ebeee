"""Eager elementwise traffic by model code and family, traced from the frameworks' own code.

``K_ELEMENTWISE`` (constraints/throughput_constants.py) was fitted to llm-foundry's MPT rows, whose
LayerNorm and GELU each run as one kernel. Other layers launch more: Hugging Face's Llama RMSNorm
upcasts to fp32 and runs pow, mean, add, rsqrt, mul, the cast back and the weight's mul as separate
kernels, its RoPE runs rotate_half's neg and cat, four muls and two adds, its SwiGLU two kernels;
torchtune's RoPE runs in fp32, torchtitan's as a complex multiply, and torchtitan's
``norm_type=fused_rmsnorm`` is one Triton kernel each way. ``tools/trace_elementwise.py`` runs one
decoder layer of each (code, family) forward and backward on the meta device under a
TorchDispatchMode and adds up the bytes every non-GEMM, non-attention aten op reads and writes, at
three shapes, which fix the bytes per token per layer as ``a·hidden + b·intermediate +
c·kv_width`` (constraints/data/eager_elementwise.json, with the torch / transformers versions and
the torchtune / torchtitan commits).

The eager factor of a traced layer is its traffic over the bytes the memory model says the layer
writes (what the factor multiplies, constraints/activations.py ``layer_bytes_per_token``), at the
bandwidth unfused eager kernels reach (ETA_EAGER_BANDWIDTH, measured from Liger-Kernel's
benchmark of Hugging Face's RMSNorm). The reference layer (Hugging Face's GPT-2 block, which
fitplan builds for the MPT rows) and untraced families keep the fitted K_ELEMENTWISE: the MPT rows'
fit is 2.4× the traced GPT-2 traffic at that bandwidth, costs of llm-foundry's runs (amp_bf16
autocast casts, torch 2.1, FSDP1) that are not a property of the layer code.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from constraints.activations import layer_bytes_per_token
from constraints.config import MODEL_CODES
from constraints.model_spec import ModelSpec
from constraints.params import inventory
from constraints.throughput_constants import ETA_EAGER_BANDWIDTH

__all__ = [
    "eager_elementwise_factors",
    "eager_recompute_shares",
    "traced_bytes_per_token",
    "traced_layers",
]

_DATA = Path(__file__).with_name("data") / "eager_elementwise.json"
#: bytes per element of each dtype kind in the bf16 trace
_BF16_KINDS = {"compute": 2.0, "residual": 2.0, "fp32": 4.0, "softmax": 2.0, "mask": 1.0}


@cache
def _table() -> tuple[tuple[str, str], dict[tuple[str, str], dict[str, float]]]:
    doc = json.loads(_DATA.read_text())
    coefs = {
        (code, family): {
            **{k: float(v) for k, v in entry["bytes_per_token_per_layer"].items()},
            "forward_share": entry["traces"][0]["forward_bytes_per_token"]
            / entry["traces"][0]["bytes_per_token"],
        }
        for code, families in doc["codes"].items()
        for family, entry in families.items()
    }
    code, family = doc["reference"]
    return (str(code), str(family)), coefs


def traced_layers() -> tuple[tuple[str, str], ...]:
    """The (model code, family) pairs the data file holds a trace of."""
    return tuple(_table()[1])


def traced_bytes_per_token(spec: ModelSpec, code: str) -> float | None:
    """Eager elementwise bytes one layer of ``spec`` reads and writes per token, forward and
    backward, under ``code``'s implementation; None when that pair was not traced."""
    coef = _table()[1].get((code, spec.family))
    if coef is None:
        return None
    kv_width = spec.kv_heads * spec.head_dim
    return (
        coef["hidden"] * spec.hidden
        + coef["intermediate"] * spec.intermediate
        + coef["kv_width"] * kv_width
    )


@cache
def eager_elementwise_factors(spec: ModelSpec, k_fitted: float) -> tuple[float, ...]:
    """The eager stack's elementwise factor for each model code (MODEL_CODES order): traced
    bytes / written bytes / ETA_EAGER_BANDWIDTH, or ``k_fitted`` for the reference layer and an
    untraced one."""
    reference, _ = _table()
    out = []
    block = next(iter(inventory(spec).blocks or {"dense": 1}))
    written = layer_bytes_per_token(
        spec, block, attention="flash", checkpointing="none", kind_bytes=_BF16_KINDS, seq_len=2048
    )
    for code in MODEL_CODES:
        traced = traced_bytes_per_token(spec, code)
        if traced is None or (code, spec.family) == reference or written <= 0:
            out.append(k_fitted)
        else:
            out.append(traced / written / ETA_EAGER_BANDWIDTH)
    return tuple(out)


@cache
def eager_recompute_shares(spec: ModelSpec, default: float) -> tuple[float, ...]:
    """Share of a traced layer's eager elementwise traffic its forward moves (what a recomputed
    forward repeats; 0.29-0.39 in the traces, backward's kernels read and write more), per model
    code; ``default`` (ELEMENTWISE_RECOMPUTE_SHARE) for the reference layer and untraced ones."""
    reference, coefs = _table()
    out = []
    for code in MODEL_CODES:
        coef = coefs.get((code, spec.family))
        traced = coef is not None and (code, spec.family) != reference
        out.append(coef["forward_share"] if coef is not None and traced else default)
    return tuple(out)
