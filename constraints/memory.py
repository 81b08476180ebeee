"""The memory model: peak bytes per GPU of a training configuration, term by term.

The model states follow the source documents' byte table, per parameter:

    weights      P_total     × B_weight        (quantised base: B_quant on the block linears)
    gradients    P_trainable × B_grad
    optimizer    P_trainable × B_state × N_state  (+ fp32 master copy, 4 B, where the recipe has one)

sharded as Rajbhandari et al. (ZeRO, 2020): stage 1 divides optimizer states by the data-parallel
degree N, stage 2 also gradients, stage 3 also weights; tensor parallelism divides everything
inside the layers, pipeline parallelism divides the layers. Activations come from
:mod:`constraints.activations`.

A training step does not hold every term at once. With ``zero_grad(set_to_none=True)`` (the
default of torch, HF Trainer, torchtune) gradients exist from the backward pass until the
optimizer step, while activations are freed layer by layer as the backward runs. So the peak is
the largest of four moments, each reported with the terms alive at it:

    A  loss backward:    weights + states + (gradients if accumulating) + all activations + logits
    B  last layer bwd:   weights + states + (gradients if accumulating) + all activations + 1 layer recomputed
    C  end of backward:  weights + states + all gradients + the first layer's activations
    D  optimizer step:   weights + states + all gradients + the step's transient

Every function here takes a :class:`ConfigBatch` and returns numpy arrays: one code path for one
configuration and for a million.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from constraints import constants as C
from constraints.activations import DKind, activation_coefficients, checkpoint_bias_elements
from constraints.config import CODE, OPTIMIZER_NAMES, QUANT_NAMES, ConfigBatch
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.params import ParamGroup, inventory, lora_target_groups
from constraints.precision import BNB_MIN_8BIT_SIZE, BNB_OPTIM_BLOCK, OPTIMIZERS, QUANTS

#: The five terms of the breakdown, and the parts that make up each (in display order).
TERMS: dict[str, tuple[str, ...]] = {
    "weights": (
        "base_weights",
        "adapter_weights",
        "gathered_weights",
        "dequant_buffer",
        "autocast_weight_copies",
    ),
    "gradients": ("gradient_tensors", "grad_buckets"),
    "optimizer": ("optimizer_states", "master_weights", "optimizer_step_transient"),
    "activations": ("saved_activations", "recompute_layer", "logits_and_loss", "workspace"),
    "overhead": ("cuda_context", "allocator_slack"),
}
PARTS: tuple[str, ...] = tuple(p for parts in TERMS.values() for p in parts)
PHASES = ("loss backward", "backward (recompute)", "end of backward", "optimizer step")

PART_DOC = {
    "base_weights": "model weights resident on this GPU (quantised linears + 16-bit rest)",
    "adapter_weights": "LoRA adapter weights (A and B)",
    "gathered_weights": "ZeRO-3/FSDP all-gathered working set (live layers + root unit)",
    "dequant_buffer": "16-bit copy of one quantised weight during its matmul",
    "autocast_weight_copies": "16-bit copies of fp32 weights that autocast keeps for backward",
    "gradient_tensors": "gradients alive at this moment (per GPU, after sharding)",
    "grad_buckets": "DDP gradient buckets / ZeRO reduce buckets",
    "optimizer_states": "optimizer states (Adam m and v, momentum, 8-bit blocks …)",
    "master_weights": "fp32 master copy of the trainable weights",
    "optimizer_step_transient": "temporaries of the optimizer step (fp32 grad partition …)",
    "saved_activations": "tensors saved for backward, all layers",
    "recompute_layer": "one layer recomputed during backward (checkpointing) ",
    "logits_and_loss": "logits, their fp32 log-softmax and its gradient",
    "workspace": "cuBLAS workspace",
    "cuda_context": "CUDA context, kernels, NCCL buffers (outside the PyTorch allocator)",
    "allocator_slack": "caching-allocator slack (reserved − allocated)",
}


@dataclass(frozen=True)
class ModelFacts:
    """Numbers of one model that the memory model uses, computed once from the inventory."""

    total: int
    quantizable: int
    quant_row_scales: int
    non_layer: int
    embedding: int
    lm_head_params: int
    head_matmul_params: int
    largest_layer: int
    largest_linear: int
    largest_tensor: int
    layers: int
    small_params_full: int
    factored_elems_full: int


@cache
def model_facts(spec: ModelSpec) -> ModelFacts:
    inv = inventory(spec)
    if spec.raw_params is not None:
        p = spec.raw_params
        return ModelFacts(p, p, 0, 0, 0, 0, 0, p // max(1, spec.layers), 0, 0, spec.layers, 0, 0)
    quantizable = [g for g in inv.groups if g.is_linear and g.block]
    small = sum(g.numel * inv.count(g) for g in inv.groups if g.numel < BNB_MIN_8BIT_SIZE)
    factored = 0
    for g in inv.groups:
        if g.d_in and g.d_out:
            factored += (g.d_in + g.d_out) * inv.count(g)
        elif g.kind in ("embedding", "position", "lm_head"):
            factored += (g.numel // spec.hidden + spec.hidden) * inv.count(g)
        else:
            factored += g.numel * inv.count(g)
    head = inv.lm_head or (
        spec.vocab * spec.hidden if spec.arch in ("decoder", "encoder-decoder") else 0
    )
    return ModelFacts(
        total=inv.total,
        quantizable=inv.total_of(quantizable),
        quant_row_scales=sum(g.d_out * inv.count(g) for g in quantizable),
        non_layer=inv.non_layer,
        embedding=inv.embedding,
        lm_head_params=inv.lm_head,
        head_matmul_params=head,
        largest_layer=inv.largest_layer,
        largest_linear=inv.largest_linear,
        largest_tensor=max((g.numel for g in inv.groups), default=0),
        layers=spec.total_layers,
        small_params_full=small,
        factored_elems_full=factored,
    )


def _lora_groups(spec: ModelSpec, targets: str) -> list[tuple[ParamGroup, int]]:
    inv = inventory(spec)
    return [(g, inv.count(g)) for g in lora_target_groups(spec, targets)]


def trainable_params(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """Trainable parameters of each configuration: all of them, or the LoRA adapters."""
    facts = model_facts(spec)
    out = np.full(len(batch), float(facts.total))
    lora = batch.is_lora
    if not lora.any():
        return out
    if spec.raw_params is not None:
        if spec.raw_trainable_params is None:
            raise FitplanError("with --params, LoRA needs --trainable-params (the adapter size)")
        out[lora] = spec.raw_trainable_params
        return out
    for t, name in enumerate(batch.target_names):
        sel = lora & (batch.targets == t)
        if sel.any():
            dims = sum((g.d_in + g.d_out) * n for g, n in _lora_groups(spec, name))
            out[sel] = batch.rank[sel] * dims
    return out


def _small_trainable(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """Trainable elements in tensors under bitsandbytes' min_8bit_size (kept in 32-bit state)."""
    facts = model_facts(spec)
    out = np.full(len(batch), float(facts.small_params_full))
    lora = batch.is_lora
    if spec.raw_params is not None:
        out[lora] = 0.0
        return out
    for t, name in enumerate(batch.target_names):
        sel = lora & (batch.targets == t)
        if not sel.any():
            continue
        r = batch.rank[sel].astype(np.float64)
        acc = np.zeros_like(r)
        for g, n in _lora_groups(spec, name):
            a, b = r * g.d_in, r * g.d_out
            acc += n * (
                np.where(a < BNB_MIN_8BIT_SIZE, a, 0) + np.where(b < BNB_MIN_8BIT_SIZE, b, 0)
            )
        out[sel] = acc
    return out


def _factored_trainable(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """Adafactor state elements: rows + columns of each trainable matrix, all of a vector."""
    facts = model_facts(spec)
    out = np.full(len(batch), float(facts.factored_elems_full or facts.total))
    lora = batch.is_lora
    if spec.raw_params is not None:
        return np.where(lora, 0.0, out)
    for t, name in enumerate(batch.target_names):
        sel = lora & (batch.targets == t)
        if sel.any():
            r = batch.rank[sel].astype(np.float64)
            out[sel] = sum(n * (2 * r + g.d_in + g.d_out) for g, n in _lora_groups(spec, name))
    return out


def _optimizer_table(column: str) -> np.ndarray:
    return np.array([getattr(OPTIMIZERS[name], column) for name in OPTIMIZER_NAMES])


_OPT_STATES = _optimizer_table("states").astype(np.float64)
_OPT_EIGHT = _optimizer_table("eight_bit").astype(bool)
_OPT_FACTORED = _optimizer_table("factored").astype(bool)
_OPT_PAGED = _optimizer_table("paged").astype(bool)
_QUANT_BYTES = np.array([QUANTS[q].bytes_per_weight for q in QUANT_NAMES])
_QUANT_ROW_SCALE = np.array([QUANTS[q].per_row_fp32_scale for q in QUANT_NAMES])


def _activation_arrays(spec: ModelSpec, batch: ConfigBatch) -> dict[str, np.ndarray]:
    """Saved activations, the recomputed layer and the LoRA extras, bytes per micro-batch per GPU."""
    n = len(batch)
    saved = np.zeros(n)
    layer = np.zeros(n)
    b_c = batch.compute_bytes
    b_r = np.where(batch.autocast | (b_c == 4), 4.0, np.minimum(batch.weight_bytes, 2.0))
    b_r = np.where(batch.weight_bytes >= 4, 4.0, b_r)
    b_soft = np.where(batch.autocast | (b_c == 4), 4.0, b_c)
    kind_bytes: dict[DKind, np.ndarray] = {
        "compute": b_c,
        "residual": b_r,
        "fp32": np.full(n, 4.0),
        "softmax": b_soft,
        "mask": np.ones(n),
    }
    tokens = (batch.micro_batch * batch.seq_len).astype(np.float64)
    s = batch.seq_len.astype(np.float64)
    eager = batch.attention == CODE["attention"]["eager"]
    selective = batch.checkpointing == CODE["checkpointing"]["selective"]
    full_ckpt = batch.checkpointing == CODE["checkpointing"]["full"]
    copies = batch.is_lora & (batch.lora_dropout | (batch.adapter_bytes != b_c))
    lora_extra = np.zeros(n)
    # one coefficient set per distinct (trainability, attention, checkpointing, copies, tp)
    key = batch.is_lora.astype(np.int64)
    for column, size in (
        (np.where(batch.is_lora, batch.targets, 0), max(len(batch.target_names), 1)),
        (eager.astype(np.int64), 2),
        (selective.astype(np.int64), 2),
        (copies.astype(np.int64), 2),
        (batch.tp, 1 << 20),
    ):
        key = key * size + column
    uniq, inverse = np.unique(key, return_inverse=True)
    for j in range(len(uniq)):
        sel = inverse == j
        i0 = int(np.flatnonzero(sel)[0])
        is_lora, t, is_eager, is_sel, has_copies, tp_deg = (
            int(batch.is_lora[i0]),
            int(batch.targets[i0]),
            int(eager[i0]),
            int(selective[i0]),
            int(copies[i0]),
            int(batch.tp[i0]),
        )
        coef = activation_coefficients(
            spec,
            "lora" if is_lora else "full",
            batch.target_names[t] if is_lora else "",
            "eager" if is_eager else "flash",
            bool(is_sel),
            bool(has_copies),
            tp_deg,
        )
        per_tok = np.zeros(int(sel.sum()))
        per_layer = np.zeros(int(sel.sum()))
        for kind, kb in kind_bytes.items():
            kb_sel = kb[sel]
            split = coef.tp_per_token[kind] + s[sel] * coef.tp_s2[kind]
            whole = coef.per_token[kind] + s[sel] * coef.s2[kind]
            per_tok += kb_sel * (whole - split * (1 - 1 / tp_deg))
            per_layer += kb_sel * (coef.layer_per_token[kind] + s[sel] * coef.layer_s2[kind])
        saved[sel] = tokens[sel] * per_tok
        layer[sel] = tokens[sel] * per_layer / tp_deg
        if is_lora:
            rank_bytes = batch.rank[sel] * coef.lora_rank_elems * b_c[sel]
            copy_bytes = coef.lora_copy_elems * (b_c[sel] + batch.lora_dropout[sel]) * has_copies
            lora_extra[sel] = tokens[sel] * (rank_bytes + copy_bytes)
    layers = float(model_facts(spec).layers)
    saved = saved + lora_extra
    uncheckpointed = saved  # what the forward writes, whatever is kept (elementwise traffic)
    ckpt_saved = tokens * layers * b_r * spec.hidden + lora_extra / layers
    if spec.family in ("t5", "mt5"):
        # each checkpointed T5 layer also keeps the (1, heads, s, s) position bias it was given
        bias = sum(
            n * checkpoint_bias_elements(spec, block, 1)
            for block, n in inventory(spec).blocks.items()
        )
        ckpt_saved = ckpt_saved + bias * s * s * b_r
    saved = np.where(full_ckpt, ckpt_saved, saved)
    recompute = np.where(full_ckpt, layer + lora_extra / layers, 0.0)
    # pipeline: the first stage holds its layers' activations for min(pp, accumulation)
    # micro-batches in flight (1F1B); other terms scale with layers per stage
    pp = batch.pp.astype(np.float64)
    in_flight = np.minimum(pp, batch.grad_accum)
    saved = saved * in_flight / pp
    return {
        "saved": saved,
        "recompute": recompute,
        "end": saved / max(layers, 1.0),
        "written": uncheckpointed,
    }


def _logits_bytes(spec: ModelSpec, batch: ConfigBatch, full_ft: np.ndarray) -> np.ndarray:
    if spec.arch == "encoder" or spec.vocab <= 1:
        return np.zeros(len(batch))  # encoders are costed as classifiers: no vocabulary logits
    tokens = (batch.micro_batch * batch.seq_len).astype(np.float64)
    vocab = spec.vocab / batch.tp
    per_vocab = np.select(
        [batch.loss == CODE["loss"][x] for x in ("standard", "chunked", "fused")],
        [C.LOSS_BYTES_PER_VOCAB[x] for x in ("standard", "chunked", "fused")],
    )
    fused = batch.loss == CODE["loss"]["fused"]
    fused_bytes = (
        tokens * spec.hidden * (batch.compute_bytes + 4.0 * C.FUSED_CE_CHUNK_FP32_PER_HIDDEN)
    )
    # full fine-tuning: the output head's weight gradient is the first gradient of the backward
    # and is allocated while the logits' gradient (16-bit, 2 B per entry) still feeds it
    head_grad = np.where(
        full_ft, model_facts(spec).head_matmul_params * batch.grad_bytes / batch.tp, 0.0
    )
    logits = tokens * vocab
    standard = np.maximum(logits * per_vocab, logits * C.LOSS_GRAD_BYTES_PER_VOCAB + head_grad)
    chunked = logits * per_vocab + head_grad
    is_chunked = batch.loss == CODE["loss"]["chunked"]
    return np.where(fused, fused_bytes + head_grad, np.where(is_chunked, chunked, standard))


def memory_arrays(spec: ModelSpec, batch: ConfigBatch, gpu: GpuSpec) -> dict[str, np.ndarray]:
    """Peak memory per GPU of every configuration in ``batch``: parts, terms, phase, extras.

    Returns arrays keyed by the names in ``PARTS`` and ``TERMS``, plus ``total``, ``phase``
    (index into ``PHASES``), ``static`` (weights + gradients + optimizer states + master, per GPU,
    the source documents' "static"), ``paged_optimizer`` (bitsandbytes paged states, outside the
    device total), ``cpu_bytes`` (host RAM per GPU rank for offload), ``trainable``.
    """
    n = len(batch)
    f = model_facts(spec)
    P = float(f.total)
    tp, pp, dp = (
        batch.tp.astype(np.float64),
        batch.pp.astype(np.float64),
        batch.dp.astype(np.float64),
    )
    z = batch.zero
    full_ft = ~batch.is_lora
    p_train = trainable_params(spec, batch)
    b_w = batch.weight_bytes

    # share of the model on this GPU: tensor parallel splits everything, pipeline the layers
    layer_params = P - f.non_layer
    worst_stage_nonlayer = np.where(
        pp > 1, max(f.embedding, f.non_layer - f.embedding), f.non_layer
    )
    frac = np.where(pp > 1, (layer_params / pp + worst_stage_nonlayer) / P, 1.0) / tp

    # ---- weights ----
    is_q = batch.quant != CODE["quant"]["none"]
    q_bytes = _QUANT_BYTES[batch.quant]
    row_scales = np.where(_QUANT_ROW_SCALE[batch.quant], 4.0 * f.quant_row_scales, 0.0)
    base_unsharded = (
        np.where(is_q, f.quantizable * q_bytes + (P - f.quantizable) * b_w + row_scales, P * b_w)
        * frac
    )
    adapter_unsharded = np.where(batch.is_lora, p_train * batch.adapter_bytes, 0.0) * frac
    shard_w = (z == 3) & (dp > 1)
    offload_all = batch.offload == CODE["offload"]["all"]
    base_w = np.where(offload_all, 0.0, np.where(shard_w, base_unsharded / dp, base_unsharded))
    adapter_w = np.where(
        offload_all, 0.0, np.where(shard_w, adapter_unsharded / dp, adapter_unsharded)
    )
    avg_w = base_unsharded / np.maximum(P * frac, 1.0)
    working = (C.FSDP_LIVE_LAYERS * f.largest_layer + f.non_layer) * avg_w / tp
    gathered = np.where(offload_all, working, np.where(shard_w, working * (1 - 1 / dp), 0.0))
    dequant = np.where(is_q, f.largest_linear * 2.0 / tp, 0.0)
    autocast_copies = np.where(
        batch.autocast & (b_w >= 4), 2.0 * (f.quantizable + f.head_matmul_params) * frac, 0.0
    )

    # ---- gradients ----
    grad_unsharded = p_train * batch.grad_bytes * frac
    offload_opt = batch.offload != CODE["offload"]["none"]
    grads = np.where(
        offload_opt, 0.0, np.where((z >= 2) & (dp > 1), grad_unsharded / dp, grad_unsharded)
    )
    grads = np.where(batch.opt_in_bwd, grads / max(f.layers, 1), grads)
    bucket = np.minimum(grad_unsharded, float(spec.hidden) ** 2 * batch.grad_bytes)
    n_buckets = np.where(z == 3, C.ZERO_REDUCE_BUCKETS_STAGE3, C.ZERO_REDUCE_BUCKETS_STAGE12)
    grad_buckets = np.where(
        dp > 1,
        np.where(z == 0, grad_unsharded, n_buckets * bucket),  # DDP: gradient_as_bucket_view=False
        0.0,
    )
    grad_buckets = np.where(
        offload_opt,
        # the staging buffer of the largest trainable tensor (an adapter matrix under LoRA)
        np.maximum(grad_buckets, np.minimum(f.largest_tensor, p_train) * batch.grad_bytes / tp),
        grad_buckets,
    )

    # ---- optimizer ----
    opt = batch.optimizer
    trainable_bytes = np.where(batch.is_lora, batch.adapter_bytes, b_w)
    small = np.minimum(_small_trainable(spec, batch), p_train)
    eight = _OPT_EIGHT[opt]
    states = _OPT_STATES[opt]
    per_param_32 = states * batch.state_bytes
    eight_bytes = states * ((p_train - small) * (1.0 + 4.0 / BNB_OPTIM_BLOCK) + small * 4.0)
    state_bytes = np.where(eight, eight_bytes, p_train * per_param_32)
    state_bytes = (
        np.where(_OPT_FACTORED[opt], _factored_trainable(spec, batch) * 4.0, state_bytes) * frac
    )
    master_bytes = np.where(trainable_bytes < 4, p_train * batch.master_bytes, 0.0) * frac
    shard_s = (z >= 1) & (dp > 1)
    state_bytes = np.where(shard_s, state_bytes / dp, state_bytes)
    master_bytes = np.where(shard_s, master_bytes / dp, master_bytes)
    paged = _OPT_PAGED[opt] & ~offload_opt
    paged_states = np.where(paged, state_bytes, 0.0)
    # CPU offload steps the optimizer on the CPU in fp32 whatever the GPU recipe (DeepSpeedCPUAdam,
    # FSDP CPUOffload): an fp32 master copy, fp32 gradients and fp32 states per trainable parameter
    cpu_per_param = 4.0 + 4.0 + states * 4.0
    cpu_bytes = np.where(
        offload_opt, p_train * cpu_per_param * frac / np.where(shard_s, dp, 1.0), 0.0
    )
    cpu_bytes = cpu_bytes + np.where(
        offload_all,
        np.where(
            shard_w, (base_unsharded + adapter_unsharded) / dp, base_unsharded + adapter_unsharded
        ),
        0.0,
    )
    state_gpu = np.where(offload_opt | paged, 0.0, state_bytes)
    master_gpu = np.where(offload_opt, 0.0, master_bytes)
    # DeepSpeed-style master weights: gradients are upcast into an fp32 partition at the step;
    # Adafactor builds an fp32 update the size of one tensor at a time
    step_fp32_grads = np.where(
        (master_bytes > 0) & ~offload_opt,
        np.where(shard_s, p_train * 4.0 * frac / dp, p_train * 4.0 * frac),
        0.0,
    )
    step_adafactor = np.where(
        _OPT_FACTORED[opt], 8.0 * np.minimum(f.largest_tensor, p_train) / tp, 0.0
    )
    step_transient = np.where(
        batch.opt_in_bwd,
        (step_fp32_grads + step_adafactor) / max(f.layers, 1),
        step_fp32_grads + step_adafactor,
    )

    # ---- activations ----
    act = _activation_arrays(spec, batch)
    logits = _logits_bytes(spec, batch, full_ft)
    sm = gpu.sm or 0.0
    workspace = np.full(
        n, float(C.CUBLAS_WORKSPACE_HOPPER if sm >= 9.0 else C.CUBLAS_WORKSPACE_OLDER)
    )
    if spec.arch == "raw" and spec.raw_params is not None and spec.hidden <= 1:
        act = {k: np.zeros(n) for k in act}
        logits = np.zeros(n)

    # ---- the four moments of a step ----
    accumulating = (batch.grad_accum > 1) & ~batch.opt_in_bwd
    grads_held = np.where(accumulating, grads, 0.0)
    zeros = np.zeros(n)
    phase_parts = []
    for phase in range(4):
        before_end = phase < 2
        parts = {
            "base_weights": base_w,
            "adapter_weights": adapter_w,
            "gathered_weights": gathered,
            "dequant_buffer": dequant if phase < 3 else zeros,
            "autocast_weight_copies": autocast_copies if before_end else zeros,
            "gradient_tensors": grads_held if before_end else grads,
            "grad_buckets": grad_buckets,
            "optimizer_states": state_gpu,
            "master_weights": master_gpu,
            "optimizer_step_transient": step_transient if phase == 3 else zeros,
            "saved_activations": act["saved"]
            if before_end
            else (act["end"] if phase == 2 else zeros),
            "recompute_layer": act["recompute"] if phase in (1, 2) else zeros,
            "logits_and_loss": logits if phase == 0 else zeros,
            "workspace": workspace,
        }
        dynamic = sum(
            parts[k]
            for k in (
                "dequant_buffer",
                "autocast_weight_copies",
                "gradient_tensors",
                "grad_buckets",
                "optimizer_step_transient",
                "saved_activations",
                "recompute_layer",
                "logits_and_loss",
            )
        )
        parts["cuda_context"] = np.where(
            batch.gpus > 1, C.CUDA_CONTEXT_BYTES + C.NCCL_BUFFER_BYTES, float(C.CUDA_CONTEXT_BYTES)
        )
        parts["allocator_slack"] = np.asarray(C.ALLOCATOR_SLACK_FRACTION * dynamic)
        phase_parts.append(parts)
    totals = np.stack([sum(p.values()) for p in phase_parts])
    phase = np.argmax(totals, axis=0)
    out: dict[str, np.ndarray] = {}
    for name in PARTS:
        out[name] = np.choose(phase, [p[name] for p in phase_parts])
    for term, parts_of in TERMS.items():
        out[term] = np.sum([out[p] for p in parts_of], axis=0)
    out["total"] = np.sum([out[t] for t in TERMS], axis=0)
    out["phase"] = phase
    # the source documents' "static" memory: model states per GPU, whatever the moment
    out["static_weights"] = base_w + adapter_w
    out["static_gradients"] = np.where(
        offload_opt, 0.0, np.where((z >= 2) & (dp > 1), grad_unsharded / dp, grad_unsharded)
    )
    out["static_optimizer"] = state_gpu + master_gpu + paged_states
    out["static"] = out["static_weights"] + out["static_gradients"] + out["static_optimizer"]
    out["paged_optimizer"] = paged_states
    out["activations_saved_all_layers"] = act["saved"]
    out["activations_written"] = act["written"]
    out["activations_recompute"] = act["recompute"]
    out["logits_peak"] = logits
    out["cpu_bytes"] = cpu_bytes + paged_states
    out["trainable"] = p_train
    return out
