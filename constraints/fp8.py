"""fp8 training as recipes: which GEMMs run at the fp8 rate, and what the scaling costs.

torchao float8 and Transformer Engine convert the transformer's linears only: the output head,
attention (``softmax(QKᵀ)V``) and the elementwise work stay bf16 (torchao
docs/source/workflows/training.md: ``convert_to_float8_training`` swaps ``nn.Linear``; torchtitan
leaves ``output`` out; TE's ``fp8_autocast`` covers TE linears, and its DotProductAttention runs
bf16 unless ``fp8_dpa``). Each fp8 GEMM operand is scaled and cast per pass: an amax (read the
16-bit tensor) and a cast (read 16-bit, write 8-bit); the weight-gradient GEMM needs the
transposed operands, which a tensorwise scale lets the kernel re-read as a transposed fp8 copy
(read + write 1 B) and a rowwise or block scale must re-scale along the other axis (a second
amax + cast). Traffic per operand element per pass, bytes::

    tensorwise (torchao dynamic), TE current scaling:  amax 2 + cast 3 = 5, transpose 2
    TE delayed scaling:  the amax comes from a history, cast fused into the producer: 3, transpose 2
    rowwise, MXFP8:  5 forward layout + 5 transposed layout

fp8 weight all-gather (torchtitan ``enable_fsdp_float8_all_gather``) gathers 1-byte weights.
"""

from __future__ import annotations

import numpy as np

from constraints.config import FP8_RECIPES
from constraints.frozen import frozen
from constraints.throughput_constants import FP8_ROWWISE_GEMM_SHARE

__all__ = ["FP8", "Fp8Recipe", "fp8_column"]


@frozen
class Fp8Recipe:
    name: str
    #: bytes moved per activation / gradient element of each fp8 GEMM operand, per pass
    cast_bytes_per_element: float
    #: bytes moved per element to give the weight-gradient GEMM its transposed operands
    transpose_bytes_per_element: float
    #: the fp8 GEMM's rate against a tensorwise-scaled one (scales applied in the epilogue)
    gemm_share: float
    #: FSDP all-gathers the weights in fp8
    fp8_all_gather: bool


FP8: dict[str, Fp8Recipe] = {
    "tensorwise": Fp8Recipe("tensorwise", 5.0, 2.0, 1.0, True),
    "rowwise": Fp8Recipe("rowwise", 5.0, 5.0, FP8_ROWWISE_GEMM_SHARE, False),
    "te-delayed": Fp8Recipe("te-delayed", 3.0, 2.0, 1.0, False),
    "te-current": Fp8Recipe("te-current", 5.0, 2.0, 1.0, False),
    "mxfp8": Fp8Recipe("mxfp8", 5.0, 5.0, 1.0, False),
}
assert tuple(FP8) == FP8_RECIPES


def fp8_column(codes: np.ndarray, attr: str) -> np.ndarray:
    """A recipe attribute for every row of a batch (``codes`` = ConfigBatch.fp8_recipe)."""
    values = np.array([float(getattr(FP8[r], attr)) for r in FP8_RECIPES])
    return values[codes]
