"""What the parallel plans people run keep of a layer's activations: torchtitan's per-op
selective checkpointing, and which rows run tensor parallel with sequence parallel."""

from __future__ import annotations

from functools import cache

import numpy as np

from constraints.config_batch import ConfigBatch
from constraints.model_spec import ModelSpec
from constraints.params import ParamGroup, inventory


def _op_sac_matmuls(spec: ModelSpec) -> list[ParamGroup]:
    """The matmuls of a block, in forward order (the inventory lists them as the modules run)."""
    inv = inventory(spec)
    return [g for g in inv.groups if g.is_linear and g.block and g.role != "router"]


def per_op_sac(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """Rows whose "selective" checkpointing is torchtitan's per-op policy: selective with flash /
    SDPA attention, full fine-tuning, under FSDP2 (elsewhere "selective" is Korthikanti's, which
    drops the s² scores that flash attention never saves)."""
    from constraints.backends import BACKEND_CODE
    from constraints.config import CODE

    return (
        (batch.checkpointing == CODE["checkpointing"]["selective"])
        & (batch.attention != CODE["attention"]["eager"])
        & ~batch.is_lora
        & (batch.backend == BACKEND_CODE["fsdp2"])
        & (op_sac_elements(spec) > 0)
    )


@cache
def op_sac_recomputed_matmuls(spec: ModelSpec) -> frozenset[str]:
    """Group keys of the matmuls torchtitan's per-op policy recomputes in backward: the 2nd, 4th, …
    ``aten.mm`` of each block's forward (``meta["forward_mm_count"] % 2 == 0`` returns
    PREFER_RECOMPUTE in torchtitan/distributed/activation_checkpoint.py); a Llama layer's
    k, o and up (w3) projections. Empty where op SAC is not modelled (experts)."""
    from constraints.params import group_key

    if spec.num_experts or spec.arch != "decoder":
        return frozenset()
    return frozenset(
        group_key(spec, g.name, g.block) for i, g in enumerate(_op_sac_matmuls(spec)) if i % 2 == 1
    )


@cache
def op_sac_elements(spec: ModelSpec) -> float:
    """Elements per token per layer that torchtitan's per-op selective checkpointing keeps in the
    compute dtype, besides the layer input (torchtitan/distributed/activation_checkpoint.py
    ``_save_list`` policy): the output of every other matmul of the layer in forward order (the
    1st, 3rd, … ``aten.mm``; the others are recomputed) and the attention output (flash / SDPA
    attention is in the save list). Norms, RoPE and the MLP's elementwise products are recomputed.
    0 for models with experts (not modelled: treated as full checkpointing)."""
    if spec.num_experts or spec.arch != "decoder":
        return 0.0
    mms = _op_sac_matmuls(spec)
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
