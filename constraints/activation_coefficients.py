"""Activation coefficients: the tensors autograd saves for backward, per layer, per token.

Each family's layer is written out as the list of tensors its Hugging Face implementation saves
(one :class:`Saved` per line, with its width in elements per token and its dtype), following
Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models": for a
GPT layer with plain GeLU and dropout this list sums to s·b·h·(34 + 5·a·s/h) bytes in 16-bit, and a
unit test holds it to that. What a tensor costs depends on the run:

- ``compute``: matmul inputs/outputs in the compute dtype (bf16/fp16, or fp32 for fp32 training);
- ``residual``: the residual stream, in the dtype of the weights (fp32 under AMP autocast);
- ``fp32``: RMSNorm's upcast copy, softmax in fp32, log-sum-exp, LayerNorm mean/rstd;
- ``softmax``: attention probabilities of eager attention, fp32 under autocast else compute;
- ``mask``: dropout masks, 1 byte per element.

Which tensors are saved depends on what trains: a linear saves its input only if its weight
trains (full fine-tuning) or if a LoRA adapter on it reads that input (with ``lora_dropout`` > 0
the adapter saves a dropped copy plus its mask instead); a norm saves its normalised input only if
its weight trains. Flash / memory-efficient attention saves q, k, v, the output and the fp32
log-sum-exp; eager attention adds the s² scores. Selective recomputation (Korthikanti) drops the
s² terms; full checkpointing keeps each layer's input and recomputes one layer at a time.

:func:`activation_coefficients` turns a layer list into a handful of numbers per model so that
the memory model is plain numpy arithmetic over millions of candidate configurations.
"""

from __future__ import annotations

from dataclasses import field
from functools import cache
from typing import TypeVar

import numpy as np

from constraints import constants as C
from constraints.frozen import frozen
from constraints.lora_targets import fused_expert_lora_extra
from constraints.model_spec import ModelSpec
from constraints.params import ParamGroup, group_key, inventory, lora_target_groups
from constraints.saved_layers import layer_saved, model_level_saved
from constraints.saved_tensors import DKINDS, DKind, Saved

#: A count: one number, or one per configuration.
Num = TypeVar("Num", float, np.ndarray)

# --------------------------------------------------------------------------------------------
# Coefficients: the layer lists reduced to numbers for vectorised evaluation
# --------------------------------------------------------------------------------------------


@frozen
class ActivationCoefficients:
    """Saved elements per token of the whole model for one (trainability, attention) setting.

    ``per_token[kind]`` multiplies bytes-per-element of that dtype kind; ``s2[kind]`` further
    multiplies the sequence length (eager attention scores). ``layer_*`` are the same for the
    largest single layer (full checkpointing recomputes one layer) and ``layer_input`` is what
    full checkpointing keeps per layer. ``lora_rank_elems`` is elements per token per unit of LoRA
    rank (the A outputs the B matmul saves); ``lora_copy_elems`` elements per token of private adapter
    input copies (used when the adapters need them). ``tp_*`` give the part that tensor parallelism splits.
    """

    per_token: dict[DKind, float]
    s2: dict[DKind, float]
    tp_per_token: dict[DKind, float]
    tp_s2: dict[DKind, float]
    layer_per_token: dict[DKind, float]
    layer_s2: dict[DKind, float]
    layers: int
    lora_rank_elems: float = 0.0
    lora_copy_elems: float = 0.0
    #: of the largest layer, what its backward frees before it reaches the attention core (the
    #: tensors saved after the scores: the out projection's input, the post-attention norm, the
    #: MLP), per token by dtype kind, and the LoRA A outputs / input copies of those linears
    after_core_per_token: dict[DKind, float] = field(default_factory=dict)
    #: what the largest layer saves before its attention core starts, elements per token
    before_core_per_token: dict[DKind, float] = field(default_factory=dict)
    after_core_rank_elems: float = 0.0
    after_core_copy_elems: float = 0.0
    #: LoRA on fused expert stacks (PEFT ``ParamWrapper``): elements of the folded weights
    #: W + B·A the experts' matmuls save, and of the 16-bit factor casts baddbmm saves per unit
    #: rank, over the whole model (:func:`_expert_keys`)
    folded_weight_elems: float = 0.0
    folded_factor_rank_elems: float = 0.0
    #: of the first layer, what its parallel MLP branch does not save when nothing in it trains
    #: (Saved.parallel_branch), per token by dtype kind
    first_layer_unrecorded: dict[DKind, float] = field(default_factory=dict)
    #: what bitsandbytes < 0.43.2 keeps of its 4-bit linears' inputs (``MatMul4Bit.forward``:
    #: ``ctx.tensors = (A, B)``, A the input after ``Linear4bit``'s cast to its compute dtype),
    #: over the whole model, elements per token: the inputs that reach the linears uncast and that
    #: nothing else saves, by dtype kind (one tensor however many linears read it); and one cast
    #: copy per linear application (the input's dtype is not the compute dtype). Every linear
    #: inside a layer is a ``Linear4bit`` (transformers' bitsandbytes integration skips the head;
    #: the fused expert stacks of transformers 5 are parameters, not linears)
    quantized_inputs: dict[DKind, float] = field(default_factory=dict)
    quantized_input_copies: float = 0.0
    lines: tuple[tuple[str, float, str, bool], ...] = field(default=())


def _trainable_keys(spec: ModelSpec, method: str, lora_targets: str) -> tuple[bool, frozenset[str]]:
    """(all base weights train?, LoRA-targeted linear group keys)."""
    if method == "full":
        return True, frozenset()
    if spec.arch == "raw":
        return False, frozenset()  # raw numbers: no modules to target; the generic layer applies
    groups = lora_target_groups(spec, lora_targets)
    return False, frozenset(group_key(spec, g.name, g.block) for g in groups)


def _linear_widths(spec: ModelSpec) -> dict[str, tuple[int, float]]:
    """Group key -> (d_in, applications per token per layer of its block)."""
    return {key: width for (_, key), width in _block_linear_widths(spec).items()}


def _block_linear_widths(spec: ModelSpec) -> dict[tuple[str, str], tuple[int, float]]:
    """(block, group key) -> (d_in, applications per token per layer of that block): a linear
    of one name can read a different width in each block (Gemma 4's o_proj in its global
    layers); block '' is a model-level linear, applied once per token."""
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for g in inventory(spec).groups:
        if not g.is_linear or not g.recorded:
            continue
        per_token = float(g.per_block * g.uses)
        if g.role == "expert":
            per_token = float(spec.experts_run_per_token)
        out[g.block, group_key(spec, g.name, g.block)] = (g.d_in, per_token)
    return out


@cache
def activation_coefficients(
    spec: ModelSpec,
    method: str,
    lora_targets: str,
    attention: str,
    selective: bool,
    lora_input_copies: bool,
    tp: int = 1,
) -> ActivationCoefficients:
    """Reduce the layer lists of ``spec`` to per-dtype element counts (see the class docstring).

    ``attention`` is 'flash' (flash or memory-efficient SDPA) or 'eager'. ``lora_input_copies``:
    each adapter keeps a private copy of its input (lora_dropout > 0 makes a dropped copy; an
    adapter dtype other than the compute dtype makes PEFT cast the input per adapter).
    """
    full_ft, targets = _trainable_keys(spec, method, lora_targets)
    widths = _linear_widths(spec)
    block_widths = _block_linear_widths(spec)
    eager = attention == "eager"

    def keeps(x: Saved, block: str) -> bool:
        return _keeps(spec, x, block, full_ft, targets, widths, eager, selective, lora_input_copies)

    per_token = dict.fromkeys(DKINDS, 0.0)
    s2 = dict.fromkeys(DKINDS, 0.0)
    tp_pt = dict.fromkeys(DKINDS, 0.0)
    tp_s2 = dict.fromkeys(DKINDS, 0.0)
    layer_pt: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    layer_s2: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    lines: list[tuple[str, float, str, bool]] = []
    inv = inventory(spec)
    blocks = inv.blocks or {"dense": spec.layers}
    largest_bytes = -1.0
    rank_elems = 0.0
    copy_elems = 0.0
    after_pt: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    before_pt: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    after_rank = 0.0
    after_copy = 0.0
    experts = _expert_keys(spec)
    folded = folded_factors = 0.0
    quantized = {
        group_key(spec, g.name, g.block)
        for g in inv.groups
        if g.is_linear and g.block and g.role != "expert"
    }
    q_inputs = dict.fromkeys(DKINDS, 0.0)
    q_copies = 0.0
    for block, n_layers in blocks.items():
        pt = dict.fromkeys(DKINDS, 0.0)
        ps = dict.fromkeys(DKINDS, 0.0)
        block_saved = layer_saved(spec, block)
        after = _after_core(block_saved)
        apt = dict.fromkeys(DKINDS, 0.0)
        after_linears = {
            _qualify(spec, m, block)
            for x in block_saved[len(block_saved) - len(after) :]
            for m in x.inputs_of
        }
        a_rank = a_copy = 0.0
        for x in block_saved:
            readers = {_qualify(spec, m, block) for m in x.inputs_of} & quantized
            exists = _keeps(spec, x, block, True, targets, widths, eager, selective, False)
            if readers and exists and not keeps(x, block):
                q_inputs[x.dtype] += x.width * n_layers
            if not keeps(x, block):
                continue
            target = ps if x.s2 else pt
            target[x.dtype] += x.width
            if x.tp_split and tp > 1:
                (tp_s2 if x.s2 else tp_pt)[x.dtype] += x.width * n_layers
            lines.append((x.what, x.width * n_layers, x.dtype, x.s2))
        for x in after:
            if keeps(x, block) and not x.s2:
                apt[x.dtype] += x.width
        bpt = dict.fromkeys(DKINDS, 0.0)
        for x in _before_core(block_saved):
            if keeps(x, block) and not x.s2:
                bpt[x.dtype] += x.width
        # LoRA: each targeted linear saves its A output (r elements per application) and, when it
        # needs a private copy of its input, that copy (d_in elements per application)
        for key in targets:
            if key in experts and _block_of(spec, key, block):
                # PEFT's ParamWrapper folds the adapter into the whole expert stack per forward
                # (peft/tuners/lora/layer.py: _LoraFactorsProxy, baddbmm(W, lhs, rhs)): the
                # experts' matmuls save the folded (E, d_out, d_in) weight for the input's
                # gradient and baddbmm saves the factors cast to W's dtype; the experts read
                # their bf16 input itself, no per-expert fp32 copy
                g = experts[key]
                folded += g.numel * g.per_block * n_layers
                folded_factors += (g.d_in + g.d_out) * g.per_block * n_layers
                continue
            if (block, key) in block_widths:
                d_in, apps = block_widths[block, key]
                rank_elems += apps * n_layers
                copy_elems += d_in * apps * n_layers
                if key in after_linears:
                    a_rank += apps
                    a_copy += d_in * apps
        q_copies += n_layers * sum(
            d_in * apps
            for key in quantized
            for d_in, apps in [block_widths.get((block, key), (0, 0.0))]
        )
        for kind in DKINDS:
            per_token[kind] += pt[kind] * n_layers
            s2[kind] += ps[kind] * n_layers
        size = sum(pt.values()) + sum(ps.values()) * 1024
        if size > largest_bytes:
            largest_bytes = size
            layer_pt, layer_s2 = dict(pt), dict(ps)
            after_pt, after_rank, after_copy = apt, a_rank, a_copy
            before_pt = bpt
    for (block, key), (d_in, apps) in block_widths.items():
        if not block and key in targets and key not in experts:  # a model-level linear: once
            rank_elems += apps
            copy_elems += d_in * apps
    first = dict.fromkeys(DKINDS, 0.0)
    if not full_ft:
        # the first layer reads the frozen embedding's output, which requires no grad: its input
        # norm (what a layer saves before its first linear reads) records nothing, nor does a
        # parallel MLP branch whose linears do not train
        block0 = next(iter(blocks))
        leading = True
        for x in layer_saved(spec, block0):
            leading = leading and not x.inputs_of and not x.s2
            branch = _qualify(spec, x.parallel_branch, block0) if x.parallel_branch else ""
            unrecorded = branch and branch not in targets and not x.inputs_of and not x.s2
            if (unrecorded or leading) and keeps(x, block0):
                first[x.dtype] += x.width
    for x in model_level_saved(spec):
        if keeps(x, ""):
            per_token[x.dtype] += x.width
            lines.append((x.what, x.width, x.dtype, False))
    return ActivationCoefficients(
        per_token=per_token,
        s2=s2,
        tp_per_token=tp_pt,
        tp_s2=tp_s2,
        layer_per_token=layer_pt,
        layer_s2=layer_s2,
        layers=spec.total_layers,
        lora_rank_elems=rank_elems,
        lora_copy_elems=copy_elems,
        after_core_per_token=after_pt,
        before_core_per_token=before_pt,
        after_core_rank_elems=after_rank,
        after_core_copy_elems=after_copy,
        folded_weight_elems=folded,
        folded_factor_rank_elems=folded_factors
        + (fused_expert_lora_extra(spec, lora_targets) if method != "full" and experts else 0.0),
        lines=tuple(lines),
        first_layer_unrecorded=first,
        quantized_inputs=q_inputs,
        quantized_input_copies=q_copies,
    )


@cache
def _expert_keys(spec: ModelSpec) -> dict[str, ParamGroup]:
    """Group key -> group of the routed experts' linears: in transformers ≥ 5 one 3-D parameter
    stack per MoE layer (``@use_experts_implementation``), which PEFT targets as a parameter."""
    return {
        group_key(spec, g.name, g.block): g
        for g in inventory(spec).groups
        if g.is_linear and g.role == "expert"
    }


@cache
def _parameter_routers(spec: ModelSpec) -> frozenset[str]:
    """Group keys of the routers that are a bare Parameter (DeepSeek's, GLM-4.5's: no nn.Linear),
    which keep their fp32 input when their weight trains (full fine-tuning; under PEFT's adapter
    on the weight the trace shows no such copy)."""
    return frozenset(
        group_key(spec, g.name, g.block)
        for g in inventory(spec).groups
        if g.role == "router" and not g.is_linear
    )


def _before_core(saved: list[Saved]) -> list[Saved]:
    """The tensors a layer saves before its attention core (the first ``core_start`` entry);
    all of them for a layer without one."""
    first = next((i for i, x in enumerate(saved) if x.core_start), len(saved))
    return saved[:first]


def _after_core(saved: list[Saved]) -> list[Saved]:
    """The tensors a layer saves after its attention scores (the last ``s2`` entry) or its
    scan (``core_end``): a layer's backward runs its nodes in reverse, so it frees these (their
    nodes run first) before the core's backward starts. Empty for a layer without either."""
    last = max((i for i, x in enumerate(saved) if x.s2 or x.core_end), default=len(saved) - 1)
    return saved[last + 1 :]


def _keeps(
    spec: ModelSpec,
    x: Saved,
    block: str,
    full_ft: bool,
    targets: frozenset[str],
    widths: dict[str, tuple[int, float]],
    eager: bool,
    selective: bool,
    lora_input_copies: bool,
) -> bool:
    """Whether tensor ``x`` of a ``block`` layer is saved in this setting."""
    if x.eager_only and not eager:
        return False
    if x.flash_only and eager:
        return False
    if x.s2 and selective:
        return False
    if x.recomputed_by_selective and selective and eager:
        return False
    if x.flash_or_selective and eager and not selective:
        return False
    if x.norm_weight and not full_ft:
        return False
    if x.grad_through:
        trained = {_qualify(spec, m, block) for m in x.grad_through} & set(widths)
        if not trained or not (full_ft or trained & targets):
            return False
    if x.inputs_of:
        readers = [
            r
            for r in (_qualify(spec, m, block) for m in x.inputs_of)
            if r in widths or r in _parameter_routers(spec)
        ]
        if full_ft and "lm_head" in x.inputs_of:
            return True  # a tied head trains with the embedding
        if full_ft:
            return bool(readers)
        # a LoRA adapter reads the shared input itself only when it needs no private copy; the
        # experts' matmuls on a folded stack save their input whatever the adapter dtype
        if any(r in targets and r in _expert_keys(spec) for r in readers):
            return True
        return any(r in targets for r in readers) and not lora_input_copies
    return True


def checkpoint_bias_elements(spec: ModelSpec, block: str, seq_len: Num) -> Num:
    """Elements a checkpointed layer keeps besides its input, per layer (not per token).

    T5 passes its relative position bias, a (1, heads, s, s) tensor, from layer to layer; a
    checkpointed layer keeps it as an input (traced: one per self-attention, and the decoder's
    cross-attention bias too). Other families keep only the hidden state.
    """
    if spec.family not in ("t5", "mt5"):
        return 0.0 * seq_len  # same shape as seq_len
    per_attention = float(spec.heads) * seq_len * seq_len
    return per_attention * (2 if block == "decoder" else 1)


def checkpointed_layer_elements(spec: ModelSpec, block: str, tokens: Num, seq_len: Num) -> Num:
    """Elements one fully checkpointed ``block`` layer keeps for ``tokens`` tokens of sequences of
    ``seq_len``: its input, the residual stream (tokens × hidden, in the residual dtype), plus the
    T5 position bias it was given (:func:`checkpoint_bias_elements`, one per layer, not per token).
    """
    return tokens * float(spec.hidden) + checkpoint_bias_elements(spec, block, seq_len)


def layer_bytes_per_token(
    spec: ModelSpec,
    block: str,
    *,
    attention: str,
    checkpointing: str,
    kind_bytes: dict[str, float],
    seq_len: int,
    batch: int = 1,
    method: str = "full",
    lora_targets: str = "",
) -> float:
    """Bytes one ``block`` layer saves per token (what ``fitplan trace`` measures).

    ``checkpointing`` 'full' keeps the layer's input (the residual stream) and, for T5, the
    position bias; 'selective' drops the attention-score tensors; ``kind_bytes`` gives bytes per
    element of each dtype kind.
    """
    if checkpointing == "full":
        tokens = batch * seq_len
        kept = checkpointed_layer_elements(spec, block, tokens, seq_len)
        stream = C.FP32_BYTES if spec.residual_fp32 else kind_bytes["residual"]
        return kept * stream / tokens
    full_ft, targets = _trainable_keys(spec, method, lora_targets)
    widths = _linear_widths(spec)
    eager = attention == "eager"
    selective = checkpointing == "selective"
    total = 0.0
    for x in layer_saved(spec, block):
        if _keeps(spec, x, block, full_ft, targets, widths, eager, selective, False):
            # autocast16 exists only under autocast, which a per-layer measurement names by giving it
            total += x.width * (seq_len if x.s2 else 1) * kind_bytes.get(x.dtype, 0.0)
    return total


def _qualify(spec: ModelSpec, module: str, block: str) -> str:
    if spec.family in ("t5", "mt5") and ":" not in module:
        return f"{block}:{module}"
    return module


def _block_of(spec: ModelSpec, key: str, block: str) -> bool:
    """Whether linear group ``key`` lives in ``block`` (T5 keys carry their stack); a key of
    both blocks of a dense-first MoE (its attention) lives in each."""
    inv = inventory(spec)
    first = next(iter(inv.blocks), "")
    return any(
        g.block == block or (not g.block and block == first)
        for g in inv.groups
        if g.is_linear and group_key(spec, g.name, g.block) == key
    )
