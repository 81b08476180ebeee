"""Which matmuls full activation checkpointing reruns in backward.

Full checkpointing wraps each repeated block (HF ``GradientCheckpointingLayer``, Composer's
``activation_checkpointing_fn`` → ``MPTBlock``, torchtune's and torchtitan's per-layer wrappers):
the embedding, the final norm and the head are outside every checkpointed region, so their
matmuls run forward once and are never recomputed.

Inside a block, PyTorch's non-reentrant checkpoint (``torch.utils.checkpoint`` with
``use_reentrant=False``, what ``checkpoint_wrapper``'s default ``CheckpointImpl.NO_REENTRANT``
runs) stops the recomputation early: its pack hook raises ``_StopRecomputationError`` once the
replay has re-saved as many tensors as the original forward saved (``_recomputation_hook`` in
torch/utils/checkpoint.py; the default since pytorch PR #96866, March 2023, torch 2.1).
Autograd saves a matmul's inputs before it computes (``mm``'s ``self_``/``mat2_`` are
``SavedVariable``\\ s made before the redispatch), so in a pre-norm block whose output is
``residual + down(…)`` — nothing after the MLP's output projection saves a tensor — the replay
stops before that projection's GEMM: a recomputed GPT/MPT block reruns 8 of its 12 h² (qkv,
out, up), a Llama block its attention and gate/up, not down. ``torch.compile``'s partitioner
likewise recomputes only what backward reads (not traced here). Traced with torch's own
checkpoint on Hugging Face layers (tests/constraints/test_recompute_trace.py): a 2-layer Llama
runs 30 matmuls in backward unchecked, 42 non-reentrant (+6 a layer), 44 reentrant (+7).

The projection is rerun where something after it saves a tensor, or where it is not a plain
matmul: residual dropout > 0 (the dropout saves its mask), a post-norm (BERT, OLMo 2; Gemma 2's
post-feed-forward norm), routed experts (the combine saves the routing weights and indices),
a LoRA adapter on it (``lora_B``'s input is saved after the base GEMM), a quantised base or fp8
(bitsandbytes' ``MatMul4Bit``, torchao's float8 matmul and TE are autograd Functions, which save
after their forward has run), and Megatron's recompute (its own reentrant ``CheckpointFunction``).
fitplan's emitted plans all run non-reentrant checkpointing (hf_template.py ``use_reentrant:
False``; accelerate's FSDP and axolotl likewise); reentrant checkpointing (which reruns the whole
block) is not a knob.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from constraints.backends import BACKEND_CODE
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.gemms import Gemm, model_gemms
from constraints.models import ModelSpec
from constraints.parallel_activations import op_sac_recomputed_matmuls

__all__ = ["early_stop_skipped_gemm", "gemm_recompute"]


@cache
def early_stop_skipped_gemm(spec: ModelSpec) -> str | None:
    """Key of the GEMM group whose forward a non-reentrant recomputation never reruns (the dense
    block's MLP output projection), or None where something after it saves a tensor."""
    if spec.arch != "decoder" or spec.is_moe or spec.post_norm or spec.norms_per_layer > 2:
        return None
    if spec.hidden_dropout > 0.0:
        return None
    in_block = [g for g in model_gemms(spec) if g.in_block]
    return in_block[-1].key if in_block else None


def gemm_recompute(
    spec: ModelSpec,
    g: Gemm,
    batch: ConfigBatch,
    ckpt_full: np.ndarray,
    op_sac: np.ndarray,
    in_fp8: np.ndarray,
    targeted: dict[int, set[str]],
) -> np.ndarray:
    """Forward reruns of GEMM group ``g`` per micro-batch, per row: 1 for a checkpointed block's
    matmul under full checkpointing (0 for the head, and for the projection the early stop skips
    where it is a plain matmul: no fp8, no quantised base, no LoRA adapter on it), 1 for the
    matmuls torchtitan's per-op SAC recomputes; 0 otherwise. ``targeted``: LoRA target index →
    the group keys it adapts."""
    full = ckpt_full & g.in_block
    if g.key == early_stop_skipped_gemm(spec):
        adapted = np.isin(batch.targets, [t for t, keys in targeted.items() if g.key in keys])
        plain = ~in_fp8 & (batch.quant == CODE["quant"]["none"]) & ~(batch.is_lora & adapted)
        # Megatron's full recompute is its own autograd Function (tensor_parallel.random.
        # CheckpointFunction, reentrant: the whole layer forward reruns under enable_grad)
        plain = plain & (batch.backend != BACKEND_CODE["megatron"])
        full = full & ~plain
    return np.where((op_sac & (g.key in op_sac_recomputed_matmuls(spec))) | full, 1.0, 0.0)
