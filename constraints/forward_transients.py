"""The forward moment of a fully checkpointed step: one layer's forward tensors on top of the
checkpointed inputs of all layers.

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
"""

from __future__ import annotations

import numpy as np

from constraints.config import CODE, ConfigBatch
from constraints.model_spec import ModelSpec

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
    s = batch.seq_len.astype(np.float64)
    # score elements of one layer: micro-batch × heads × s² (heads split by tensor parallelism)
    scores = batch.micro_batch * s * s * spec.heads / batch.tp.astype(np.float64)
    per_element = (
        compute_bytes  # T1: q @ kᵀ, scaled in place
        + softmax_bytes  # T2: T1 + mask
        + softmax_bytes  # T3: the softmax output
        + softmax_bytes  # the previous layer's T3, held in the layer loop's ``outputs``
    )
    return np.where(eager & full_ckpt, scores * per_element, 0.0)
