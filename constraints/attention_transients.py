"""Eager attention's score-sized tensors that are alive without being saved: one layer's forward
under full checkpointing, and one layer's attention backward.

Forward. The forward moment of a fully checkpointed step is one layer's forward tensors on top
of the checkpointed inputs of all layers.

Under full (non-reentrant) checkpointing a layer's forward keeps none of its saved tensors, but
the tensors it computes are alive while it runs, and the largest of them at long sequences are
eager attention's score tensors (× heads · s² per sequence). Which are alive at once is a fact of
the model's code, read from transformers 5.24:

- Falcon (``modeling_falcon.FalconAttention.forward``, rotary path)::

      attention_scores = query_layer @ key_layer.transpose(-1, -2)        # T1, compute dtype
      attention_scores /= math.sqrt(self.head_dim)                        # in place
      attention_scores = F.softmax(attention_scores + attention_mask,     # T2 = T1 + mask
                                   dim=-1, dtype=hidden_states.dtype)     # T3
      ...
      return attn_output, attention_scores

  so T1, T2 and T3 are alive inside ``softmax``; and the decoder layer returns its
  probabilities (``return output, attn_weights``) into ``outputs = block(...)`` of
  ``FalconModel.forward``, which holds them until the next block has returned: the previous
  layer's T3 is alive too. T2 takes the promoted dtype of the scores and the mask (the
  model's dtype: fp32 under amp) and T3 the hidden states' dtype, i.e. the softmax dtype of
  :mod:`constraints.saved_tensors` (fp32 under autocast, else compute).

  Traced (fake tensors, falcon-7b, 4 × 16384, 71 heads, full checkpointing, peak in forward):
  fp32 16.1, amp 14.1, bf16 8.05 bytes per score element beyond the checkpointed inputs;
  ``T1 + 3 · softmax`` gives 16, 14 and 8.

Other catalog families' decoder layers drop their attention weights inside the layer (``hidden_states,
_ = self.self_attn(...)``), and their traced peaks under full checkpointing are in the backward;
they get no forward moment here.

Backward. A layer's attention backward walks the chain back from ``probs @ v``: the probability
gradient (``grad_out @ vᵀ``, a new score tensor) meets the saved softmax output in
``_softmax_backward_data``, whose output (the scores' gradient) is a third. Where HF runs
``softmax(scores, dtype=float32).to(query.dtype)`` (Llama-style families, OPT), the PV matmul's
saved 16-bit copy is released with its node, ``ToCopyBackward`` makes the gradient fp32, the
softmax's saved output is fp32, and so is the scores' gradient except for fp16 scores on CUDA
(ATen's fused half_to_float softmax; bf16 scores are converted to fp32 first): 12 bytes per
score element, 10 with fp16 scores. Elsewhere (GPT-2, Falcon …): softmax output, its gradient and the scores' gradient, all
in the softmax dtype, plus the 1-byte dropout mask where attention dropout runs. The analytic
layer already counts the score tensors it saves; the term is the excess of this peak over them.
Traced (Qwen2.5-0.5B LoRA fp32 eager full checkpointing 4 × 16384, peak in the last layer's
backward): three float32[4, 14, 16384, 16384] temporaries at the peak, 12 bytes per element;
the layer's saved score tensors are 4 (fp32 softmax output; the cast is a no-op in fp32).
"""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.model_spec import ModelSpec
from constraints.saved_tensors import fp32_eager_softmax

#: families whose decoder layer returns its attention probabilities to the model's layer loop
#: (kept there until the next layer returns: transformers ``modeling_falcon.py``)
RETURNS_ATTENTION_WEIGHTS = frozenset({"falcon"})


def forward_transient_bytes(
    spec: ModelSpec, batch: ConfigBatch, compute_bytes: np.ndarray, softmax_bytes: np.ndarray
) -> np.ndarray:
    """Bytes per micro-batch alive in one checkpointed layer's forward beyond its inputs.

    ``compute_bytes``/``softmax_bytes``: bytes per element of the scores' matmul output and of
    the softmax output (the activation kinds ``compute`` and ``softmax``).
    """
    n = len(batch)
    if spec.family not in RETURNS_ATTENTION_WEIGHTS:
        return np.zeros(n)
    eager = batch.attention == CODE["attention"]["eager"]
    full_ckpt = batch.checkpointing == CODE["checkpointing"]["full"]
    scores = _scores(spec, batch)
    per_element = (
        compute_bytes  # T1: q @ kᵀ, scaled in place
        + softmax_bytes  # T2: T1 + mask
        + softmax_bytes  # T3: the softmax output
        + softmax_bytes  # the previous layer's T3, held in the layer loop's ``outputs``
    )
    return np.where(eager & full_ckpt, scores * per_element, 0.0)


def _scores(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """Score elements of one layer: micro-batch × heads × s² (heads split by tensor parallelism)."""
    s = batch.seq_len.astype(np.float64)
    return batch.micro_batch * s * s * spec.heads / batch.tp.astype(np.float64)


def backward_transient_bytes(
    spec: ModelSpec, batch: ConfigBatch, compute_bytes: np.ndarray, softmax_bytes: np.ndarray
) -> np.ndarray:
    """Bytes per micro-batch of one layer's eager attention backward beyond its saved scores."""
    n = len(batch)
    if not spec.attention_layers:
        return np.zeros(n)  # a state-space model (Mamba, Mamba-2): no scores to differentiate
    eager = batch.attention == CODE["attention"]["eager"]
    cast16 = np.where(compute_bytes >= 4, 0.0, compute_bytes)  # .to(query.dtype): no-op in fp32
    dropout = 1.0 if spec.attention_dropout > 0 else 0.0
    if fp32_eager_softmax(spec):
        # softmax(x, dtype=float32) (ATen SoftMax.cpp): only a CUDA fp16 x takes the fused
        # half_to_float kernel, whose backward writes the fp16 gradient directly; any other x is
        # converted to fp32 first, so the scores' gradient is fp32 before ToCopyBackward casts
        # it (traced, bf16: _softmax_backward_data -> float32, then _to_copy -> bfloat16)
        fp16_scores = batch.compute_is_fp16 & ~batch.autocast & (compute_bytes == 2)
        peak = (
            C.FP32_BYTES  # the saved fp32 softmax output
            + C.FP32_BYTES  # its gradient (ToCopyBackward of the 16-bit copy's gradient)
            + np.where(fp16_scores, compute_bytes, C.FP32_BYTES)  # the scores' gradient
        )
        saved = C.FP32_BYTES + cast16
    else:
        peak = 3 * softmax_bytes + dropout  # output, its gradient, the scores' gradient; mask
        saved = softmax_bytes + dropout * (1.0 + compute_bytes)  # + mask, dropped probabilities
    if spec.attn_softcap:
        saved = saved + compute_bytes  # the soft-cap tanh output (saved_tensors.py)
    extra = np.maximum(peak - saved, 0.0) + np.zeros(n)
    return np.where(eager, _scores(spec, batch) * extra, 0.0)


def indexer_transient_bytes(
    spec: ModelSpec, batch: ConfigBatch, compute_bytes: np.ndarray
) -> np.ndarray:
    """Bytes per micro-batch that DeepSeek Sparse Attention's indexer holds in one layer's
    forward (modeling_deepseek_v32.py ``DeepseekV32Indexer.forward``, under no_grad): its
    fp32 scores ``matmul(q.float(), k.float())`` [b, s, heads, s] and their ReLU, alive
    together, beside its queries: wq_b's output (its unrotated half is a view of it), the
    rotated and concatenated copy, and that copy's fp32 cast; 0 without an indexer."""
    if not spec.index_heads:
        return np.zeros(len(batch))
    s = batch.seq_len.astype(np.float64)
    tokens = batch.micro_batch * s
    heads = spec.index_heads
    scores = 2 * heads * s * C.FP32_BYTES  # the scores and their ReLU, per query token
    queries = heads * spec.index_head_dim * (2 * compute_bytes + C.FP32_BYTES)
    return tokens * (scores + queries)
