"""Cohere 2 MoE (``model_type`` cohere2_moe) as transformers 5.25 builds it
(modeling_cohere2_moe.py): its config.json read, its parameters tensor by tensor, and what each
kind of layer saves.

Cohere 2's parallel layer (constraints/cohere.py): one input norm (CohereLayerNorm, or Llama's
RMSNorm where ``rms_norm_eps`` is set) whose output feeds the attention (sliding and global
layers, ``layer_types``) and, beside it, the layer's MLP: a dense SwiGLU of
``prefix_dense_intermediate_size`` on the ``mlp_layer_types`` "dense" prefix, else the MoE: a
router Parameter (``mlp.gate``: top-k of its logits, then softmax over them in fp32 or sigmoid),
Mixtral's fused expert stacks, and ``num_shared_experts`` × ``intermediate_size`` of shared
SwiGLU summed or averaged in.
"""

from __future__ import annotations

from typing import Any

from constraints import cohere
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.param_mlp import gated_mlp
from constraints.saved_moe import routed_experts
from constraints.saved_tensors import (
    Saved,
    _attention_core,
    _gated_mlp,
    in_parallel_branch,
)
from constraints.saved_tensors import _norm as _shared_norm

#: the layer's MLP readers of the shared norm output, by block
READERS = {
    "dense": ("mlp.gate_proj", "mlp.up_proj"),
    "moe": ("mlp.gate", "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
}
SELECTION = ("softmax", "sigmoid")


def _dense_prefix(cfg: dict[str, Any], layers: int, where: str) -> int:
    """Layers before the MoE ones: ``mlp_layer_types`` (dense ones first), else
    ``first_k_dense_replace`` (Cohere2MoeConfig.__post_init__), else none."""
    kinds = cfg.get("mlp_layer_types")
    if kinds is None:
        return min(_int(cfg, "first_k_dense_replace", where=where, default=0), layers)
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {"dense", "sparse"}:
        raise FitplanError(
            f"{where}: mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} "
            f"layers, got {excerpt(kinds)}"
        )
    dense = kinds.count("dense")
    if kinds[:dense] != ["dense"] * dense:
        raise FitplanError(
            f"{where}: mlp_layer_types: fitplan models the dense layers as a prefix (every "
            "published Cohere 2 MoE), got them among the sparse ones",
            "pass raw numbers (--params …)",
        )
    return dense


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Cohere2MoeConfig's fields (its defaults where a key is absent): Cohere 2's, then the
    experts'."""
    base = cohere.read(cfg, common, where, "cohere2")
    layers = base.layers
    experts = _positive("num_experts", _int(cfg, "num_experts", where=where, default=8), where)
    top_k = _positive(
        "num_experts_per_tok", _int(cfg, "num_experts_per_tok", where=where, default=2), where
    )
    if top_k > experts:
        raise FitplanError(f"{where}: num_experts_per_tok {top_k} exceeds num_experts {experts}")
    for key, allowed, default in (
        ("expert_selection_fn", SELECTION, "softmax"),
        ("shared_expert_combination_strategy", ("sum", "average"), "average"),
    ):
        if cfg.get(key, default) not in allowed:
            raise FitplanError(
                f"{where}: {key} {excerpt(cfg.get(key))} must be one of {', '.join(allowed)} "
                "(transformers raises in the forward)"
            )
    shared = _int(cfg, "num_shared_experts", where=where, default=0)
    prefix = cfg.get("prefix_dense_intermediate_size")
    dense_width = (
        base.intermediate
        if prefix is None
        else _positive(
            "prefix_dense_intermediate_size",
            _int(cfg, "prefix_dense_intermediate_size", where=where),
            where,
        )
    )
    rms = cfg.get("rms_norm_eps") is not None
    return base.model_copy(
        update={
            "family": model_type,
            "num_experts": experts,
            "experts_per_token": top_k,
            "moe_intermediate": base.intermediate,
            "intermediate": dense_width,
            "first_dense_layers": _dense_prefix(cfg, layers, where),
            "shared_experts": 1 if shared else 0,
            "shared_expert_intermediate": base.intermediate * shared,
            "router_linear": False,
            "norm_weight_fp32": not rms,
        }
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, q, kv, bias = spec.hidden, spec.q_width, spec.kv_width, spec.qkv_bias
    blocks = {"dense": spec.first_dense_layers, "moe": spec.layers - spec.first_dense_layers}
    blocks = {b: n for b, n in blocks.items() if n}
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("input_layernorm", spec, h, b)
        groups += _linear("self_attn.q_proj", "q_proj", h, q, block=b, role="attention", bias=bias)
        groups += _linear("self_attn.k_proj", "k_proj", h, kv, block=b, role="attention", bias=bias)
        groups += _linear("self_attn.v_proj", "v_proj", h, kv, block=b, role="attention", bias=bias)
        groups += _linear(
            "self_attn.o_proj", "o_proj", q, h, block=b, role="attention", bias=spec.o_bias
        )
        if b == "dense":
            groups += gated_mlp(spec, "mlp", spec.intermediate, b, "mlp")
            continue
        e = spec.num_experts
        groups.append(ParamGroup("mlp.gate.weight", "router", e * h, 1, b, "gate", "router"))
        groups += gated_mlp(spec, "mlp.experts", spec.moe_intermediate, b, "expert", per_block=e)
        if spec.shared_experts:
            groups += gated_mlp(
                spec, "mlp.shared_experts", spec.shared_expert_intermediate, b, "shared_expert"
            )
    groups += _norm("norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def norm_saved(spec: ModelSpec, name: str, width: int, rows: int = 1) -> list[Saved]:
    """CohereLayerNorm's tensors, or Llama's RMSNorm's where the config sets ``rms_norm_eps``."""
    if spec.norm_weight_fp32:
        return cohere.norm_saved(spec, name, width, rows)
    return _shared_norm(spec, name, width, rows)


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """The shared norm, the attention, and beside it the layer's dense MLP or MoE."""
    h, q, kv = spec.hidden, spec.q_width, spec.kv_width
    s = norm_saved(spec, "input_layernorm", h)
    attention = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    s.append(
        Saved(
            "q/k/v and MLP input (input_layernorm output, shared)",
            h,
            "compute",
            inputs_of=attention + READERS[block],
            tp_split=False,
        )
    )
    s += _attention_core(spec, q, kv, kv, "self_attn.o_proj")
    mlp = _gated_mlp(spec, "mlp", spec.intermediate) if block == "dense" else _moe_saved(spec)
    return s + in_parallel_branch(mlp, READERS[block][0])


def _moe_saved(spec: ModelSpec) -> list[Saved]:
    """``Cohere2MoeSparseMoeBlock``: the top-k scores' softmax (fp32) or sigmoid, each token's
    hidden gathered for its experts, their fused gate/up → SiLU · up → down, scaled; the shared
    experts' SwiGLU beside them."""
    k = spec.experts_per_token
    experts = "mlp.experts"
    s = [
        Saved("top-k scores (softmax in fp32 / sigmoid)", k, "fp32", tp_split=False),
        *routed_experts(
            spec, experts, spec.moe_intermediate, k, (f"{experts}.gate_proj", f"{experts}.up_proj")
        ),
    ]
    if spec.shared_experts:
        s += _gated_mlp(spec, "mlp.shared_experts", spec.shared_expert_intermediate)
    return s
