"""What each backend allocates beyond the generic model-state terms, bytes per GPU.

:func:`apply_backend` takes the parts of :mod:`constraints.model_states` (computed as the ZeRO
paper's byte table) and replaces, row by row, the terms a backend allocates differently. Each
term names the framework source whose behaviour it follows.
"""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.backends import BACKEND_CODE
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.model_spec import ModelSpec
from constraints.model_states import fsdp_working_bytes

Arrays = dict[str, np.ndarray]

#: DeepSpeed bucket sizes in elements as fitplan's JSON sets them (searcher/emitters/
#: deepspeed_json.py writes exactly these; they are the HF integration's "auto" values,
#: transformers/integrations/deepspeed.py: reduce_bucket_size = hidden², stage3_prefetch_bucket_size
#: = 0.9 hidden², stage3_param_persistence_threshold = 10 hidden). allgather_bucket_size only
#: chunks the all-gather into the bf16 parameters themselves (stage_1_and_2.py all_gather_dp_groups):
#: no buffer of its own.
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000  # DeepSpeed default (runtime/zero/config.py)


def deepspeed_buckets(hidden: int) -> dict[str, int]:
    """The zero_optimization bucket keys fitplan writes, in elements."""
    h2 = int(hidden) * int(hidden)
    return {
        "reduce_bucket_size": h2,
        "allgather_bucket_size": h2,
        "stage3_prefetch_bucket_size": int(0.9 * h2),
        "stage3_param_persistence_threshold": 10 * int(hidden),
        "stage3_max_live_parameters": STAGE3_MAX_LIVE_PARAMETERS,
    }


#: overlap_comm=True (written by fitplan at every stage >= 1) keeps two reduce buffers:
#: deepspeed/runtime/zero/stage_1_and_2.py allocates ipg_buffer[0] and, with overlap_comm,
#: ipg_buffer[1] of reduce_bucket_size elements; stage3.py double-buffers the same way.
DEEPSPEED_REDUCE_BUFFERS_OVERLAP = 2

#: FSDP2's MixedPrecisionPolicy as torchtitan and accelerate set it on fp32 parameters:
#: param_dtype bf16, reduce_dtype fp32 (torchtitan config: mixed_precision_reduce = float32).
FSDP_REDUCE_BYTES_FP32_PARAMS = 4.0


def unsynced_gradients(
    batch: ConfigBatch, p_here: np.ndarray, fsdp_multi: np.ndarray, reduce_bytes: np.ndarray
) -> np.ndarray:
    """Gradients held unsharded through the micro-batches that run under FSDP's ``no_sync``
    (``grad_sync`` last-micro-batch), bytes per GPU; 0 where they are reduced every micro-batch.

    FSDP1 (torch/distributed/fsdp/_runtime_utils.py ``_post_backward_hook``): without
    ``_sync_gradients`` the hook returns before the reduce-scatter and ``flat_param.grad`` stays
    the unsharded gradient, which the next micro-batch accumulates into; ``_finalize_params``
    keeps it ("``.grad`` remains the unsharded gradient from prior ``no_sync()`` iterations").
    On the last micro-batch ``_reduce_grad`` sets ``flat_param.grad = None`` before each unit's
    reduce-scatter, so only sharded gradients reach the optimizer step. FSDP2
    (_fully_shard/_fsdp_param_group.py ``post_backward`` with ``reduce_grads`` False) keeps each
    parameter's unsharded gradient, upcast to the reduce dtype (_fsdp_param.py
    ``to_accumulated_grad_if_needed``). So from the second micro-batch's forward to the last
    micro-batch's backward every trainable parameter's gradient is whole on every GPU: P_trainable
    (this GPU's tensor/pipeline share) × the bytes it is held in, not ÷ dp. Only where gradients
    are sharded (zero ≥ 2: FULL_SHARD / SHARD_GRAD_OP) and accumulated; DeepSpeed reduces every
    micro-batch (transformers Trainer syncs under DeepSpeed; accelerate's no_sync is a no-op at
    ZeRO ≥ 2). Measured with torch's FSDP1 and FSDP2 on 2 gloo ranks (tools/measure_no_sync.py,
    tests/truth/test_no_sync_gloo.py): P × 4 B held after each no_sync micro-batch, P × 4 / 2
    after the synced one."""
    held_bytes = np.where(batch.backend == BACKEND_CODE["fsdp2"], reduce_bytes, batch.grad_bytes)
    applies = (
        fsdp_multi
        & batch.sync_last
        & (batch.zero >= 2)
        & (batch.grad_accum > 1)
        & ~batch.opt_in_bwd
    )
    return np.where(applies, p_here * held_bytes, 0.0)


def apply_backend(
    spec: ModelSpec,
    batch: ConfigBatch,
    p_train: np.ndarray,
    frac: np.ndarray,
    facts_largest_layer: int,
    facts_layers: int,
    facts_non_layer: int,
    facts_head_params: int,
    weights: Arrays,
    grads: Arrays,
    opt: Arrays,
) -> dict[str, np.ndarray]:
    """Replace the backend-specific terms in place; returns the per-row labels of what changed."""
    dp, tp = batch.dp.astype(np.float64), batch.tp.astype(np.float64)
    z = batch.zero
    be = batch.backend
    offload_opt = batch.offload != CODE["offload"]["none"]
    multi = dp > 1
    p_here = p_train * frac  # trainable parameters on this GPU before data-parallel sharding
    has_master = opt["master_weights"] > 0
    ds = be == BACKEND_CODE["deepspeed"]

    # ---- DeepSpeed BF16_Optimizer (stage 0 with bf16): deepspeed/runtime/bf16_optimizer.py
    # keeps an fp32 gradient accumulation buffer the size of all trainable parameters
    # (fp32_groups_gradients_flat, allocated at init) and partitions the fp32 master and the
    # optimizer states over data parallel (fp32_groups_flat_partition); the bf16 .grad of each
    # parameter is folded into the fp32 buffer by its hook and freed.
    bf16_opt = ds & (z == 0) & has_master & ~batch.compute_is_fp16
    fp32_grad_buffer = p_here * C.FP32_BYTES
    for key in ("optimizer_states", "master_weights", "paged"):
        opt[key] = np.where(bf16_opt, opt[key] / dp, opt[key])
    grads["grad_buckets"] = np.where(bf16_opt, fp32_grad_buffer, grads["grad_buckets"])
    grads["gradient_tensors"] = np.where(bf16_opt, 0.0, grads["gradient_tensors"])
    grads["static"] = np.where(bf16_opt, fp32_grad_buffer, grads["static"])
    opt["optimizer_step_transient"] = np.where(bf16_opt, 0.0, opt["optimizer_step_transient"])

    # ---- DeepSpeed ZeRO 1-3 reduce buckets, as the emitted JSON sets them (overlap_comm on)
    reduce_elems = float(spec.hidden) ** 2
    ds_buckets = np.minimum(
        p_here * batch.grad_bytes,
        DEEPSPEED_REDUCE_BUFFERS_OVERLAP * reduce_elems * batch.grad_bytes,
    )
    zero_ds = ds & (z >= 1) & multi & ~offload_opt
    grads["grad_buckets"] = np.where(zero_ds, ds_buckets, grads["grad_buckets"])

    # ---- DeepSpeed ZeRO-3 working set: deepspeed/runtime/zero/partitioned_param_coordinator.py
    # gathers the sub-module being run plus prefetch_bucket_size elements ahead, capped by
    # max_live_parameters; the embedding and the head are gathered while used (the head at the
    # loss), not held for the step like FSDP's root unit
    buckets = deepspeed_buckets(spec.hidden)
    live = np.minimum(
        float(facts_largest_layer)
        + buckets["stage3_prefetch_bucket_size"]
        + float(facts_head_params),
        float(buckets["stage3_max_live_parameters"]),
    )
    ds3 = ds & (z == 3) & multi & (batch.offload != CODE["offload"]["all"])
    weights["gathered_weights"] = np.where(
        ds3, live * batch.weight_bytes / tp * (1.0 - 1.0 / dp), weights["gathered_weights"]
    )
    weights["gathered_at_ends"] = np.where(ds3, 0.0, weights["gathered_at_ends"])

    # ---- FSDP2 / FSDP1: one unit's reduce-scatter. torch/distributed/fsdp/_fully_shard/
    # _fsdp_collectives.py foreach_reduce: the unit's unsharded gradients are copied into one
    # reduce-scatter input of world × shard elements in the reduce dtype (fp32 under the usual
    # MixedPrecisionPolicy on fp32 parameters), and the output shard beside it.
    fsdp = (be == BACKEND_CODE["fsdp2"]) | (be == BACKEND_CODE["fsdp1"])
    unit_train = np.minimum(float(facts_largest_layer), p_train / max(facts_layers, 1)) / tp
    reduce_bytes = np.where(
        (be == BACKEND_CODE["fsdp2"]) & (batch.weight_bytes >= 4),
        FSDP_REDUCE_BYTES_FP32_PARAMS,
        batch.grad_bytes,
    )
    # alive only while the backward runs (not at the loss, not at the optimizer step): the
    # phases of constraints/memory.py add ``backward_buckets`` at "backward" and "end of backward"
    rs = unit_train * (batch.grad_bytes + reduce_bytes * (1.0 + 1.0 / dp))
    grads["backward_buckets"] = np.where(fsdp & multi, rs, 0.0)
    grads["unsynced_gradients"] = unsynced_gradients(batch, p_here, fsdp & multi, reduce_bytes)
    # blocks other streams' pools cache (the caching allocator never lends a block to another
    # stream; constraints/allocator.py): FSDP2 allocates each unit's all-gather buffer on the
    # all-gather copy-in stream (_fsdp_collectives.py foreach_all_gather: all_gather_output,
    # world × shard = the unsharded unit in the param dtype) and copies out into parameters
    # on the compute stream; the reduce-scatter output shard on the reduce-scatter stream
    # (foreach_reduce: reduce_output). FSDP1 all-gathers on its unshard stream the same way.
    unit_gathered = float(facts_largest_layer) / tp * batch.compute_bytes
    weights["other_stream_cached"] = np.where(
        fsdp & multi & (z == 3), unit_gathered + unit_train * reduce_bytes / dp, 0.0
    )
    # fp32 sharded parameters under a bf16 MixedPrecisionPolicy (torchtitan): the "master" is the
    # parameter itself and its gradient arrives in fp32 (reduce dtype): no upcast at the step
    opt["optimizer_step_transient"] = np.where(
        fsdp & has_master, 0.0, opt["optimizer_step_transient"]
    )
    # fp32 parameters with bf16 compute under FSDP2 are a MixedPrecisionPolicy(param_dtype=bf16)
    # (torchtitan, accelerate fsdp_version 2): the all-gather casts each unit to bf16
    # (_fsdp_param.py init_all_gather_outputs in param_dtype), so the gathered working set is
    # bf16 and autocast finds bf16 weights (no fp32 -> bf16 weight cache)
    mp = (
        (be == BACKEND_CODE["fsdp2"])
        & multi
        & (batch.weight_bytes >= 4)
        & (batch.compute_bytes < 4)
    )
    mid, ends = fsdp_working_bytes(spec, batch, batch.compute_bytes, batch.compute_bytes)
    weights["gathered_weights"] = np.where(mp & (z == 3), mid / tp, weights["gathered_weights"])
    weights["gathered_at_ends"] = np.where(
        mp & (z == 3), (ends - mid) / tp, weights["gathered_at_ends"]
    )
    weights["autocast_weight_copies"] = np.where(mp, 0.0, weights["autocast_weight_copies"])
    weights["autocast_layer_copies"] = np.where(mp, 0.0, weights["autocast_layer_copies"])
    grads["grad_buckets"] = np.where(fsdp & multi, 0.0, grads["grad_buckets"])

    # ---- Megatron: megatron/core/distributed/param_and_grad_buffer.py keeps every gradient in
    # one fp32 main_grad buffer (grad_dtype fp32 with bf16 training); gradient_accumulation_fusion
    # writes the weight gradients into it (no bf16 .grad). The distributed optimizer
    # (core/optimizer/distrib_optimizer.py, zero 1) shards the fp32 master and states:
    # 2 + 4 + 12/d bytes per parameter; the reduce-scatter runs in place in the buffer.
    mg = be == BACKEND_CODE["megatron"]
    main_grad = p_here * C.FP32_BYTES
    grads["grad_buckets"] = np.where(mg, main_grad, grads["grad_buckets"])
    grads["gradient_tensors"] = np.where(mg, 0.0, grads["gradient_tensors"])
    grads["static"] = np.where(mg, main_grad, grads["static"])
    opt["optimizer_step_transient"] = np.where(mg, 0.0, opt["optimizer_step_transient"])
    return {"bf16_optimizer": bf16_opt, "megatron": mg}
