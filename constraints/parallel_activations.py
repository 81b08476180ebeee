"""What the parallel plans people run keep of a layer's activations: torchtitan's per-op
selective checkpointing, and which rows run tensor parallel with sequence parallel."""

from __future__ import annotations

from functools import cache

import numpy as np

from constraints.config import ConfigBatch
from constraints.model_spec import ModelSpec
from constraints.params import inventory


@cache
def op_sac_elements(spec: ModelSpec) -> float:
    """Elements per token per layer that torchtitan's per-op selective checkpointing keeps in the
    compute dtype, besides the layer input (torchtitan/distributed/activation_checkpoint.py
    ``_save_list`` policy): the output of every other matmul of the layer in forward order (the
    1st, 3rd, … ``aten.mm``; the others are recomputed) and the attention output (flash / SDPA
    attention is in the save list). Norms, RoPE and the MLP's elementwise products are recomputed.
    0 for models with experts (not modelled: treated as full checkpointing)."""
    inv = inventory(spec)
    if spec.num_experts or spec.arch != "decoder":
        return 0.0
    mms = [g for g in inv.groups if g.is_linear and g.block and g.role != "router"]
    kept = sum(float(g.d_out) * g.per_block for i, g in enumerate(mms) if i % 2 == 0)
    return kept + float(spec.hidden)


def sequence_parallel(batch: ConfigBatch) -> np.ndarray:
    """Rows that run tensor parallel with sequence parallel: Megatron (--sequence-parallel,
    megatron/core/tensor_parallel/layers.py) and torchtitan-style FSDP2 2-D plans (SequenceParallel
    on the norms, torchtitan/models/llama3/infra/parallelize.py)."""
    from constraints.backends import BACKEND_CODE

    sp_backend = (batch.backend == BACKEND_CODE["megatron"]) | (
        batch.backend == BACKEND_CODE["fsdp2"]
    )
    return (batch.tp > 1) & sp_backend
