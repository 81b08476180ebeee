"""Activation memory per configuration: the coefficients of
:mod:`constraints.activation_coefficients` (the tensors each layer saves) times bytes per element,
with checkpointing, LoRA input copies, pipeline stages and the attention transients.
"""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.activation_coefficients import (
    ActivationCoefficients,
    activation_coefficients,
    checkpoint_bias_elements,
    checkpointed_layer_elements,
    layer_bytes_per_token,
)
from constraints.attention_transients import (
    backward_transient_bytes,
    forward_transient_bytes,
    indexer_transient_bytes,
)
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.mamba1 import scan_backward_bytes_per_token
from constraints.model_spec import ModelSpec
from constraints.model_states import model_facts
from constraints.parallel_activations import op_sac_elements, per_op_sac, sequence_parallel
from constraints.params import inventory
from constraints.precision import BNB_4BIT
from constraints.saved_tensors import DKINDS, DKind

__all__ = [
    "ActivationCoefficients",
    "activation_arrays",
    "activation_coefficients",
    "layer_bytes_per_token",
]

# --------------------------------------------------------------------------------------------
# Assembly: the coefficients times bytes per element, per configuration
# --------------------------------------------------------------------------------------------


def activation_arrays(spec: ModelSpec, batch: ConfigBatch) -> dict[str, np.ndarray]:
    """Saved activations, the recomputed layer and the LoRA extras, bytes per micro-batch per GPU."""
    n = len(batch)
    saved = np.zeros(n)
    layer = np.zeros(n)
    core = np.zeros(n)  # selective: one layer's attention core, rebuilt during its backward
    # QLoRA after prepare_model_for_kbit_training: the fp32 embedding output and Linear4bit's
    # cast back to its input dtype keep every activation fp32 (constants.KBIT_PREPARED_BYTES)
    # (PEFT's stack, recognised by its fp32 adapters; 16-bit adapters mean a stack without the
    # upcast, e.g. torchtune's QLoRA)
    kbit = batch.kbit_prepared & ~batch.autocast
    b_c = np.where(kbit, C.KBIT_PREPARED_BYTES, batch.compute_bytes)
    b_r = np.where(batch.autocast | (b_c == 4), 4.0, np.minimum(batch.weight_bytes, 2.0))
    b_r = np.where(batch.weight_bytes >= 4, 4.0, b_r)
    b_soft = np.where(batch.autocast | (b_c == 4), 4.0, b_c)
    kind_bytes: dict[DKind, np.ndarray] = {
        "compute": b_c,
        "residual": b_r,
        "fp32": np.full(n, C.FP32_BYTES),
        "softmax": b_soft,
        "mask": np.ones(n),
        "cast16": np.where(b_c >= 4, 0.0, b_c),
        "autocast16": np.where(batch.autocast & (b_c < 4), b_c, 0.0),
        "matmul32": np.where(batch.autocast, b_c, C.FP32_BYTES),
        "stream32": np.where(batch.autocast | (b_c >= 4), C.FP32_BYTES, 0.0),
        "autocast32": np.where(batch.autocast, C.FP32_BYTES, 0.0),
    }
    tokens = (batch.micro_batch * batch.seq_len).astype(np.float64)
    s = batch.seq_len.astype(np.float64)
    eager = batch.attention == CODE["attention"]["eager"]
    selective = batch.checkpointing == CODE["checkpointing"]["selective"]
    full_ckpt = batch.checkpointing == CODE["checkpointing"]["full"]
    # PEFT's LoRA forward: ``x = self._cast_input_dtype(x, lora_A.weight.dtype)`` then
    # ``lora_B(lora_A(dropout(x)))``: lora_A saves its own input. That is a private copy per
    # adapter when the cast changes the dtype (fp32 adapters on a 16-bit stream: fp32 copies,
    # traced float32[2, 2048, 14336] per down_proj on Llama-3.1-8B), when autocast then casts it
    # back to the compute dtype (a new 16-bit tensor per adapter), or when dropout makes one.
    layer_in = np.where(batch.weight_bytes >= 4, 4.0, b_c)
    copy_elem = np.where(batch.autocast, batch.compute_bytes, batch.adapter_bytes)
    copies = batch.is_lora & (
        batch.lora_dropout | (batch.adapter_bytes != layer_in) | (copy_elem != layer_in)
    )
    lora_extra = np.zeros(n)
    kbit_inputs = np.zeros(n)  # bitsandbytes < 0.43.2: every 4-bit linear's input
    freed_before_core = np.zeros(n)  # what a layer's backward frees before its attention core
    saved_before_core = np.zeros(n)  # what a layer's forward has saved when its core starts
    sp = sequence_parallel(batch)
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
            # sequence parallel also splits what TP replicates (norms, residual, dropout)
            per_tok += kb_sel * np.where(sp[sel], whole / tp_deg, whole - split * (1 - 1 / tp_deg))
            per_layer += kb_sel * (coef.layer_per_token[kind] + s[sel] * coef.layer_s2[kind])
        saved[sel] = tokens[sel] * per_tok
        layer[sel] = tokens[sel] * per_layer / tp_deg
        after_core = sum(
            kind_bytes[kind][sel] * coef.after_core_per_token.get(kind, 0.0) for kind in DKINDS
        )
        freed_before_core[sel] = tokens[sel] * after_core / tp_deg
        before = sum(
            kind_bytes[kind][sel] * coef.before_core_per_token.get(kind, 0.0) for kind in DKINDS
        )
        saved_before_core[sel] = tokens[sel] * before / tp_deg
        if is_sel:
            # selective recomputation rebuilds each layer's attention core in its backward: for
            # that moment one layer holds what no checkpointing would have kept of it
            whole_layer = activation_coefficients(
                spec,
                "lora" if is_lora else "full",
                batch.target_names[t] if is_lora else "",
                "eager" if is_eager else "flash",
                False,
                bool(has_copies),
                tp_deg,
            )
            rebuilt = np.zeros(int(sel.sum()))
            for kind, kb in kind_bytes.items():
                rebuilt += kb[sel] * (
                    whole_layer.layer_per_token[kind]
                    - coef.layer_per_token[kind]
                    + s[sel] * (whole_layer.layer_s2[kind] - coef.layer_s2[kind])
                )
            core[sel] = tokens[sel] * np.maximum(rebuilt, 0.0) / tp_deg
        if is_lora:
            rank_bytes = batch.rank[sel] * coef.lora_rank_elems * copy_elem[sel]
            copy_bytes = (
                coef.lora_copy_elems * (copy_elem[sel] + batch.lora_dropout[sel]) * has_copies
            )
            lora_extra[sel] = tokens[sel] * (rank_bytes + copy_bytes)
            # the first layer's parallel MLP branch, recorded by no graph (its input, the frozen
            # embedding's output, does not require grad: PEFT enables that only with checkpointing)
            lora_extra[sel] -= tokens[sel] * sum(
                kind_bytes[kind][sel] * w for kind, w in coef.first_layer_unrecorded.items()
            )
            kbit_inputs[sel] = tokens[sel] * _quantized_input_bytes(coef, batch, sel, kind_bytes)
            # folded expert stacks (PEFT ParamWrapper): per layer, not per token, in W's dtype
            folded = (
                (coef.folded_weight_elems + batch.rank[sel] * coef.folded_factor_rank_elems)
                * batch.weight_bytes[sel]
                / tp_deg
            )
            lora_extra[sel] += folded
            freed_before_core[sel] += folded / max(coef.layers, 1)
            freed_before_core[sel] += tokens[sel] * (
                batch.rank[sel] * coef.after_core_rank_elems * copy_elem[sel]
                + coef.after_core_copy_elems
                * (copy_elem[sel] + batch.lora_dropout[sel])
                * has_copies
            )
    facts = model_facts(spec)
    layers = float(facts.layers)
    masked = masked_sdpa_bytes_per_layer(spec, batch, b_c)
    sparse = sparse_mask_bytes_per_layer(spec, batch, b_c)
    saved = saved + lora_extra + spec.sliding_layers * masked + spec.layers * sparse
    layer = layer + masked + sparse
    uncheckpointed = saved  # what the forward writes, whatever is kept (elementwise traffic)
    # AutoGPTQ's training path (qlinear_cuda_old.QuantLinear.forward: ``weight = scales *
    # (weight - zeros)`` in torch ops, then ``torch.matmul(x.half(), weight)``): the matmul's
    # autograd saves the fp16 weight for the input's gradient, so every forward keeps each
    # quantised linear's 16-bit weight until its backward (bitsandbytes and AWQ dequantise again
    # in backward and save only the packed weight)
    gptq_weights = np.where(
        batch.quant == CODE["quant"]["gptq"],
        facts.quantizable * C.FP16_BYTES / batch.tp.astype(np.float64),
        0.0,
    )
    saved = saved + gptq_weights
    layer = layer + gptq_weights / max(layers, 1.0)
    blocks = inventory(spec).blocks or {"dense": int(layers)}
    # every checkpointed layer keeps its input; T5's position bias is one tensor per stack that
    # all its layers share (HF T5Stack: "the first layer stores them"; traced with reentrant
    # checkpointing: 3 bias storages in an encoder-decoder, whatever the depth)
    kept = sum(
        n * checkpointed_layer_elements(spec, block, tokens, s)
        - (n - 1) * checkpoint_bias_elements(spec, block, s)
        for block, n in blocks.items()
    )
    ckpt_saved = kept * b_r
    if spec.residual_fp32:
        # every layer after the first is given the fp32 stream; the first, the embedding's output
        ckpt_saved = ckpt_saved + (kept - tokens * spec.hidden) * (C.FP32_BYTES - b_r)
    # sequence parallel: each rank keeps its 1/tp slice of the checkpointed layer inputs
    ckpt_saved = np.where(sp, ckpt_saved / batch.tp, ckpt_saved)
    saved = np.where(full_ckpt, ckpt_saved, saved)
    # the indexer runs as a layer's attention starts: of what that layer saves, only what comes
    # before its attention core exists
    indexer = indexer_transient_bytes(spec, batch, b_c)
    at_indexer = np.where(indexer > 0, saved_before_core + indexer, 0.0)
    recompute = np.where(
        full_ckpt,
        np.maximum(layer, at_indexer) + (lora_extra + kbit_inputs) / layers,
        np.where(selective, core, 0.0),
    )
    # selective with flash / SDPA attention under FSDP2 is torchtitan's per-op policy; elsewhere
    # "selective" is Korthikanti's (drops the s² scores, which flash attention never saves)
    op_sac = per_op_sac(spec, batch)
    op_kept = ckpt_saved + tokens * layers * op_sac_elements(spec) * b_c / np.where(sp, batch.tp, 1)
    saved = np.where(op_sac, np.minimum(op_kept, saved), saved)
    recompute = np.where(op_sac, layer, recompute)
    # pipeline: the first stage holds its layers' activations for min(pp, accumulation)
    # micro-batches in flight (1F1B); other terms scale with layers per stage
    pp = batch.pp.astype(np.float64)
    in_flight = np.minimum(pp, batch.grad_accum)
    saved = saved * in_flight / pp
    # MatMul4Bit keeps its input as a ctx attribute, not a saved tensor: non-reentrant
    # checkpointing cannot drop it and backward does not release it; it lives until the graph does
    return {
        "saved": saved + kbit_inputs,
        "recompute": recompute,
        "end": saved / max(layers, 1.0) + kbit_inputs,
        "forward": (
            forward_transient_bytes(spec, batch, b_c, b_soft)
            + np.maximum(at_indexer - np.where(full_ckpt, 0.0, layer), 0.0)
        )
        * in_flight
        / pp,
        # the eager core's backward transients, beyond what the layer's backward held when it
        # started: by the core, the nodes after it (out projection, norm, MLP; their LoRA input
        # copies) have run and released their saved tensors (the autograd engine frees a node's
        # saved variables once it has run, without retain_graph)
        "attention_backward": np.maximum(
            backward_transient_bytes(spec, batch, b_c, b_soft) - freed_before_core, 0.0
        ),
        "written": uncheckpointed + kbit_inputs,
        # the last Mamba layer's scan gradients, once the nodes after its scan have run
        "scan_backward": np.maximum(
            tokens * scan_backward_bytes_per_token(spec) - freed_before_core, 0.0
        ),
    }


#: PyTorch's memory-efficient kernel reads a mask whose rows are aligned to 16 elements
#: (attention.cpp ``preprocess_mask``, ``mem_eff_alignment = 16``)
MEM_EFFICIENT_MASK_ALIGN = 16


def masked_sdpa_bytes_per_layer(spec: ModelSpec, batch: ConfigBatch, b_c: np.ndarray) -> np.ndarray:
    """What one windowed layer saves under SDPA beyond the unmasked kernel, bytes per micro-batch.

    Once the sequence reaches the window, transformers hands SDPA a mask (masking_utils.py
    ``_ignore_causal_mask_sdpa``: ``kv_length >= local_attention_size``), so it expands K and V
    to every query head itself (sdpa_attention.py ``use_gqa_in_sdpa`` is false with a mask:
    ``repeat_kv``), and the CUDA dispatcher picks the memory-efficient kernel (flash takes no
    mask), which converts the boolean mask to the query's dtype (attention.cpp
    ``convert_boolean_attn_mask``, one new [b, 1, s, s] tensor per call) and keeps it for its
    backward (``_scaled_dot_product_efficient_attention_backward`` reads ``attn_bias``). The
    flash-attn kernel (``attention="flash"``) takes the window itself, and eager attention
    already counts its expanded K and V."""
    if not spec.sliding_layers or not spec.sliding_window or not spec.sdpa_supported:
        return np.zeros(len(batch))
    s = batch.seq_len.astype(np.float64)
    tokens = batch.micro_batch.astype(np.float64) * s
    tp = batch.tp.astype(np.float64)
    on = (batch.attention == CODE["attention"]["sdpa"]) & (s >= spec.sliding_window)
    expanded = 2.0 * (spec.heads - spec.kv_heads) * spec.head_dim / tp
    return np.where(on, tokens * (expanded + _mask_row(s)) * b_c, 0.0)


def _mask_row(s: np.ndarray) -> np.ndarray:
    """Elements of one query's row of the mask the memory-efficient kernel keeps."""
    return np.ceil(s / MEM_EFFICIENT_MASK_ALIGN) * MEM_EFFICIENT_MASK_ALIGN


def sparse_mask_bytes_per_layer(spec: ModelSpec, batch: ConfigBatch, b_c: np.ndarray) -> np.ndarray:
    """What one layer of DeepSeek Sparse Attention keeps under SDPA, bytes per micro-batch: its
    top-k selection is folded into a boolean [b, 1, s, s] mask (modeling_deepseek_v32.py
    ``DeepseekV32Attention.forward``), which the memory-efficient kernel converts to the query's
    dtype and keeps for its backward (as a windowed layer's, :func:`masked_sdpa_bytes_per_layer`);
    eager attention adds it to the scores it already keeps."""
    if not spec.index_heads:
        return np.zeros(len(batch))
    s = batch.seq_len.astype(np.float64)
    on = batch.attention == CODE["attention"]["sdpa"]
    return np.where(on, batch.micro_batch * s * _mask_row(s) * b_c, 0.0)


def _quantized_input_bytes(
    coef: ActivationCoefficients,
    batch: ConfigBatch,
    sel: np.ndarray,
    kind_bytes: dict[DKind, np.ndarray],
) -> np.ndarray:
    """Bytes per token that bitsandbytes < 0.43.2 keeps of its 4-bit linears' inputs
    (``TrainConfig.kbit_saves_input``; ActivationCoefficients.quantized_inputs): the inputs
    themselves where they reach ``Linear4bit`` in its compute dtype (the plan's), else one copy
    per linear, cast by ``x.to(self.compute_dtype)`` (the fp32 stream of a kbit-prepared model)."""
    old = batch.kbit_saves_input[sel] & np.isin(
        batch.quant[sel], [CODE["quant"][q] for q in BNB_4BIT]
    )
    shared = sum(kind_bytes[kind][sel] * w for kind, w in coef.quantized_inputs.items())
    compute = batch.compute_bytes[sel]
    private = coef.quantized_input_copies * compute
    return old * np.where(kind_bytes["compute"][sel] != compute, private, shared)
