"""LFM2 (Liquid AI's LFM2-350M … 2.6B) as transformers 5.25 builds it (modeling_lfm2.py): its
config.json read, its parameters tensor by tensor, and the tensors each kind of layer saves.

A layer: ``operator_norm`` → a mixer → added to the residual; ``ffn_norm`` → ``feed_forward``
(SwiGLU: ``w2(silu(w1 x) · w3 x)``) → added. The mixer is either attention (``self_attn``:
q/k/v, per-head ``q_layernorm`` / ``k_layernorm``, ``out_proj``) or a gated short convolution
(``conv``, ``Lfm2ShortConv``): ``in_proj`` (hidden → 3 · hidden) split into B, C, x; a depthwise
causal ``nn.Conv1d`` (``conv_L_cache`` taps) over B · x; C · that; ``out_proj``. Llama's RMSNorm
(the weight after the cast), the final norm named ``embedding_norm``, a tied head by default.
"""

from __future__ import annotations

import math
from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _linear,
    _norm,
    attention_projections,
    untied_head,
)
from constraints.param_mlp import gated_mlp
from constraints.saved_tensors import (
    Saved,
    _gated_mlp,
    linear_input,
    norm_output_read_by,
    projected_attention,
)
from constraints.saved_tensors import _norm as _norm_saved

#: the MLP's linears (gate, up, down) and the attention's output projection, by their names
MLP_NAMES = ("w1", "w3", "w2")
CONV, ATTENTION = "conv", "full_attention"
#: the config classes' hidden_size (Lfm2Config, Lfm2MoeConfig); their other defaults agree
HIDDEN_DEFAULT = {"lfm2": 2560, "lfm2_moe": 2048}


def _ffn_width(cfg: dict[str, Any], where: str) -> int:
    """``Lfm2MLP``'s width: with ``block_auto_adjust_ff_dim`` two thirds of intermediate_size,
    times ``block_ffn_dim_multiplier`` and rounded up to ``block_multiple_of`` when a multiplier
    is set (configuration_lfm2.py: ``block_ff_dim`` is intermediate_size's old name)."""
    width = _int(cfg, "intermediate_size", "block_ff_dim", where=where, default=12288)
    if not cfg.get("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    multiplier = cfg.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is None:
        return width
    if (
        isinstance(multiplier, bool)
        or not isinstance(multiplier, int | float)
        or not math.isfinite(multiplier)
        or multiplier <= 0
    ):
        raise FitplanError(
            f"{where}: block_ffn_dim_multiplier must be a positive number, got {excerpt(multiplier)}"
        )
    multiple = _positive(
        "block_multiple_of", _int(cfg, "block_multiple_of", where=where, default=256), where
    )
    width = int(multiplier * width)
    return multiple * ((width + multiple - 1) // multiple)


def _mixers(cfg: dict[str, Any], layers: int, where: str, model_type: str) -> str:
    kinds = cfg.get("layer_types")
    if kinds is None and model_type == "lfm2_moe":
        # Lfm2MoeConfig derives no layer_types: its decoder layers index the list
        raise FitplanError(
            f"{where}: lfm2_moe needs layer_types ('conv' or 'full_attention' per layer)",
            "transformers builds no LFM2-MoE without them: add the checkpoint's list",
        )
    if kinds is None:
        idxs = cfg.get("full_attn_idxs")
        if idxs is None:
            return "a" * layers
        if not isinstance(idxs, list) or not all(isinstance(i, int) for i in idxs):
            raise FitplanError(
                f"{where}: full_attn_idxs must list layer indices, got {excerpt(idxs)}"
            )
        kinds = [ATTENTION if i in idxs else CONV for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {CONV, ATTENTION}:
        raise FitplanError(
            f"{where}: layer_types must list '{CONV}' or '{ATTENTION}' for each of the "
            f"{layers} layers, got {excerpt(kinds)}"
        )
    return "".join("c" if k == CONV else "a" for k in kinds)


def _moe_fields(cfg: dict[str, Any], layers: int, where: str) -> dict[str, Any]:
    """Lfm2MoeConfig (configuration_lfm2_moe.py): the first ``num_dense_layers`` with an MLP
    ``intermediate_size`` wide (no width adjustment), the others a sparse block of
    ``num_experts`` experts ``moe_intermediate_size`` wide, ``num_experts_per_tok`` per token,
    routed by a bare Parameter (``Lfm2MoeTopKRouter.weight``) through a sigmoid; the expert bias
    is a buffer, not a parameter."""
    experts = _positive("num_experts", _int(cfg, "num_experts", where=where, default=32), where)
    per_token = _positive(
        "num_experts_per_tok", _int(cfg, "num_experts_per_tok", where=where, default=4), where
    )
    dense = _int(cfg, "num_dense_layers", where=where, default=2)
    if not 0 <= dense <= layers:
        raise FitplanError(f"{where}: num_dense_layers {dense} is not between 0 and {layers}")
    return {
        "intermediate": _int(cfg, "intermediate_size", where=where, default=7168),
        "num_experts": experts,
        "experts_per_token": per_token,
        "moe_intermediate": _positive(
            "moe_intermediate_size",
            _int(cfg, "moe_intermediate_size", where=where, default=1792),
            where,
        ),
        "first_dense_layers": dense,
        "router_linear": False,
    }


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Lfm2Config's fields (configuration_lfm2.py defaults where a key is absent)."""
    default_hidden = HIDDEN_DEFAULT[model_type]
    hidden = _positive(
        "hidden_size", _int(cfg, "hidden_size", where=where, default=default_hidden), where
    )
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=32), where
    )
    kv_heads = _positive(
        "num_key_value_heads", _int(cfg, "num_key_value_heads", where=where, default=8), where
    )
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    layers = _positive(
        "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=32), where
    )
    tie = cfg.get("tie_word_embeddings", cfg.get("tie_embedding", True))
    moe = _moe_fields(cfg, layers, where) if model_type == "lfm2_moe" else {}
    ffn = moe.pop("intermediate") if moe else _ffn_width(cfg, where)
    return ModelSpec(
        **common,
        **moe,
        family=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=ffn,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=65536), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=128000),
        tie_embeddings=bool(tie),
        qk_norm="head",
        layer_mixers=_mixers(cfg, layers, where, model_type),
        linear_conv_kernel=_positive(
            "conv_L_cache", _int(cfg, "conv_L_cache", where=where, default=3), where
        ),
        mixer_bias=bool(cfg.get("conv_bias", False)),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, d = spec.hidden, spec.head_dim
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks: dict[str, int] = {
        b: kinds.count(b) for b in ("dense", "conv-dense", "moe", "conv-moe") if b in kinds
    }
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("operator_norm/ffn_norm", spec, h, b, per_block=2)
        groups += _ffn_groups(spec, b)
        if not b.startswith("conv"):
            groups += [
                *attention_projections(spec, "self_attn", b, "out_proj"),
                *_norm("self_attn.q_layernorm/k_layernorm", spec, d, b, per_block=2),
            ]
            continue
        groups += short_conv_groups(spec, b)
    groups += _norm("embedding_norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def short_conv_groups(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """The gated short convolution's tensors (``conv``: LFM2's and LFM3's)."""
    h, k, bias = spec.hidden, spec.linear_conv_kernel, spec.mixer_bias
    groups = [
        *_linear("conv.in_proj", "in_proj", h, 3 * h, block=block, role="attention", bias=bias),
        *_linear("conv.out_proj", "out_proj", h, h, block=block, role="attention", bias=bias),
        # depthwise nn.Conv1d: not an nn.Linear (PEFT's all-linear skips it)
        ParamGroup("conv.conv.weight", "other", h * k, 1, block, "conv", "attention"),
    ]
    if bias:
        groups.append(ParamGroup("conv.conv.bias", "bias", h, 1, block, "conv", "attention"))
    return groups


def short_conv_saved(spec: ModelSpec) -> list[Saved]:
    """What the gated short convolution saves after ``operator_norm``."""
    h = spec.hidden
    return [
        norm_output_read_by("conv.in_proj", "operator_norm", h),
        # B, C and x are views of in_proj's output: B · x and C · conv keep all of it
        Saved("in_proj output (B, C, x: the multiplies' views)", 3 * h, "compute"),
        Saved("B · x (conv input)", h, "compute"),
        Saved("conv output (C multiply input)", h, "compute"),
        Saved(
            "C · conv, made contiguous (out_proj input)",
            h,
            "compute",
            inputs_of=("conv.out_proj",),
        ),
    ]


def _ffn_groups(spec: ModelSpec, block: str) -> list[ParamGroup]:
    if not block.endswith("moe"):
        return gated_mlp(spec, "feed_forward", spec.intermediate, block, "mlp", names=MLP_NAMES)
    e, h = spec.num_experts, spec.hidden
    return [
        # Lfm2MoeTopKRouter: F.linear(hidden, weight), a Parameter
        ParamGroup("feed_forward.gate.weight", "router", e * h, 1, block, "gate", "router"),
        # Lfm2MoeExperts: gate_up_proj (E, 2I, H) and down_proj (E, H, I) Parameters
        *gated_mlp(
            spec, "feed_forward.experts", spec.moe_intermediate, block, "expert", per_block=e
        ),
    ]


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What a layer of ``block`` saves: attention ('dense', 'moe') or the short convolution
    ('conv-dense', 'conv-moe'), then the MLP or the sparse block."""
    h = spec.hidden
    s = _norm_saved(spec, "operator_norm", h)
    if not block.startswith("conv"):
        s += projected_attention(spec, "self_attn", "out_proj", ("q_layernorm", "k_layernorm"))
    else:
        s += short_conv_saved(spec)
    s += _norm_saved(spec, "ffn_norm", h)
    if block.endswith("moe"):
        return s + _moe_saved(spec)
    s.append(linear_input("w1/w3 input (normed hidden)", h, "feed_forward.w1", "feed_forward.w3"))
    return s + _gated_mlp(spec, "feed_forward", spec.intermediate, down_name="w2")


def _moe_saved(spec: ModelSpec) -> list[Saved]:
    """``Lfm2MoeSparseMoeBlock``: the router's logits through a sigmoid (in the compute dtype),
    the top-k weights normalised, each token's hidden gathered for its experts, their SwiGLU,
    the outputs scaled by the routing weights."""
    h, k, e = spec.hidden, spec.experts_per_token, spec.num_experts
    return [
        Saved(
            "router input (normed hidden)",
            h,
            "compute",
            inputs_of=("feed_forward.gate",),
            tp_split=False,
        ),
        Saved("router sigmoid output", e, "compute", tp_split=False),
        Saved(
            "top-k routing weights and their sum (normalisation)", k + 1, "compute", tp_split=False
        ),
        Saved(
            "tokens gathered for their experts (× top-k)",
            h * k,
            "compute",
            inputs_of=("feed_forward.experts.gate_proj", "feed_forward.experts.up_proj"),
            tp_split=False,
        ),
        *_gated_mlp(spec, "feed_forward.experts", spec.moe_intermediate, per_token=k),
        Saved(
            "expert outputs before routing-weight multiply (× top-k)",
            h * k,
            "compute",
            tp_split=False,
        ),
    ]
