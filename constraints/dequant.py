"""Dequantisation cost of a quantised frozen base, by the library whose kernels run it.

A QLoRA step multiplies activations by 16-bit weights that the base stores packed. How many bytes
that unpacking moves, how often it runs and how many kernels it launches depends on the library,
read from its source (each row below names the function):

- **bitsandbytes** NF4 / int8 (``Linear4bit`` → ``MatMul4Bit``; ``Linear8bitLt``): one fused CUDA
  kernel reads the packed weight and its block constants and writes the 16-bit weight, in forward
  and again in backward (``MatMul4Bit.backward`` calls ``dequantize_4bit``; nothing is saved).
- **GPTQ** (AutoGPTQ ``qlinear_cuda_old.QuantLinear.forward``, the path transformers/PEFT train
  through with ``use_exllama=False``; above ``kernel_switch_threshold`` = 128 rows, i.e. every
  training micro-batch): unpacking in plain torch ops — ``bitwise_right_shift`` of the int32
  words expanded 8× (writes int32), ``.to(int8)``, ``bitwise_and``, ``weight - zeros``,
  ``scales * (…)`` (writes fp16), then ``torch.matmul``. The matmul's autograd saves the
  dequantised weight, so backward does not dequantise again (only a recomputed forward does).
- **AWQ** (AutoAWQ ``modules/linear/gemm.py`` ``WQLinearMMFunction``): one fused CUDA kernel
  (``awq_ext.dequantize_weights_cuda``) forward and again in backward, where the weight is also
  transposed and ``repeat``-ed once per sequence of the micro-batch for a ``bmm``.

Bytes are per weight element per dequantisation; the GEMM that follows reads the 16-bit weight
once, which the GEMM model already counts (constraints/throughput.py).
"""

from __future__ import annotations

import numpy as np

from constraints.config import QUANT_NAMES
from constraints.frozen import frozen
from constraints.precision import QUANTS

__all__ = ["DEQUANT_KERNELS", "DequantKernel", "dequant_bytes_per_weight", "dequant_launches"]

#: 16-bit weight written by a dequantisation (and read by the next op of an unfused chain)
_HALF = 2.0
#: AutoGPTQ unpacks each 4-bit weight in torch ops (qlinear_cuda_old.py, bits = 4), bytes per
#: weight, read + write, in the order the source runs them:
GPTQ_UNFUSED_BYTES_PER_WEIGHT = (
    QUANTS[
        "gptq"
    ].bytes_per_weight  # bitwise_right_shift reads the packed int32 words (+ constants)
    + 4.0  # … and writes one int32 per weight (the words are expanded 32 // bits = 8×)
    + 4.0
    + 1.0  # .to(torch.int8): read int32, write int8
    + 1.0
    + 1.0  # bitwise_and(…, 15, out=weight): read, write int8 in place
    + 1.0
    + 1.0  # weight - zeros: int8 in, int8 out (zeros are per group: negligible)
    + 1.0
    + _HALF  # scales * (…): int8 in, fp16 out
)  # = 16.5 B; bitsandbytes' one kernel moves 0.52 + 2 B: ≈ 6.5× per dequantisation
#: kernels AutoGPTQ launches per linear per dequantisation: zeros (shift, cast, and, + 1), weight
#: (shift, cast, and), subtract, scale, and the input's ``x.half()`` cast
GPTQ_UNFUSED_LAUNCHES = 10.0


@frozen
class DequantKernel:
    """How one library turns a packed weight into the 16-bit weight its GEMM reads."""

    quant: str
    #: bytes moved per weight per forward dequantisation
    forward_bytes_per_weight: float
    #: bytes per weight per backward dequantisation (0: backward reuses a saved 16-bit weight)
    backward_bytes_per_weight: float
    #: extra bytes per weight per backward per sequence of the micro-batch (AWQ's repeat + bmm)
    backward_bytes_per_weight_per_sequence: float
    #: kernels per quantised linear per forward / per backward
    forward_launches: float
    backward_launches: float


def _fused(q: str, launches: float = 1.0) -> DequantKernel:
    """One kernel reads the packed weight and its constants and writes 16-bit, forward and
    backward (bitsandbytes dequantize_4bit / int8 CB·SCB; AutoAWQ dequantize_weights_cuda)."""
    moved = QUANTS[q].bytes_per_weight + _HALF
    return DequantKernel(q, moved, moved, 0.0, launches, launches)


DEQUANT_KERNELS: dict[str, DequantKernel] = {
    "none": DequantKernel("none", 0.0, 0.0, 0.0, 0.0, 0.0),
    "int8": _fused("int8"),
    "nf4": _fused("nf4"),
    # the double-quantised absmax are themselves dequantised first: one more (small) kernel
    "nf4-dq": _fused("nf4-dq", launches=2.0),
    "gptq": DequantKernel(
        "gptq", GPTQ_UNFUSED_BYTES_PER_WEIGHT, 0.0, 0.0, GPTQ_UNFUSED_LAUNCHES, 0.0
    ),
    # AutoAWQ backward: weights.transpose(0, 1).unsqueeze(0).repeat(batch, 1, 1) reads the
    # weight (2 B) and writes it once per sequence (2 B each), and the bmm reads every copy
    # where one GEMM reads one: 2 + 2b + 2(b − 1) = 4b bytes beyond the dequantisation
    "awq": DequantKernel(
        "awq",
        QUANTS["awq"].bytes_per_weight + _HALF,
        QUANTS["awq"].bytes_per_weight + _HALF,
        2.0 * _HALF,
        3.0,  # x.half(), dequantise, out.to(input dtype)
        2.0,  # dequantise, repeat
    ),
}
assert tuple(DEQUANT_KERNELS) == QUANT_NAMES


def _column(codes: np.ndarray, attr: str) -> np.ndarray:
    return np.array([getattr(DEQUANT_KERNELS[q], attr) for q in QUANT_NAMES])[codes]


def dequant_bytes_per_weight(
    codes: np.ndarray, recompute: np.ndarray, micro_batch: np.ndarray
) -> np.ndarray:
    """Bytes moved per quantised weight per micro-batch step: forward (+ the recomputed forward
    under full checkpointing) and backward. ``codes`` = ConfigBatch.quant."""
    forward = _column(codes, "forward_bytes_per_weight") * (1.0 + recompute)
    backward = _column(codes, "backward_bytes_per_weight") + _column(
        codes, "backward_bytes_per_weight_per_sequence"
    ) * micro_batch.astype(np.float64)
    return forward + backward


def dequant_launches(codes: np.ndarray, recompute: np.ndarray) -> np.ndarray:
    """Kernels per quantised linear per micro-batch step (forward, recomputed forward, backward)."""
    return _column(codes, "forward_launches") * (1.0 + recompute) + _column(
        codes, "backward_launches"
    )
