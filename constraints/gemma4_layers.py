"""What each kind of Gemma 4 layer saves for backward (constraints/gemma4.py reads the config
and counts the parameters), and the shapes a layer of each inventory block has: its attention's
head width and key/value heads (the global layers' own), its MLP's width.
"""

from __future__ import annotations

import dataclasses as dc
from typing import Any

from constraints.model_spec import ModelSpec
from constraints.saved_tensors import Saved, _attention_core, _gated_mlp, linear_input


def block_shape(spec: ModelSpec, block: str) -> ModelSpec:
    """``spec`` with the head width and key/value heads of ``block``'s attention."""
    if "global" not in block or not spec.global_head_dim:
        return spec
    return spec.model_copy(
        update={"head_dim": spec.global_head_dim, "kv_heads": spec.global_kv_heads}
    )


def mlp_width(spec: ModelSpec, block: str) -> int:
    """The dense MLP's width: twice ``intermediate_size`` in a layer reusing keys and values
    when ``use_double_wide_mlp`` (``Gemma4TextMLP``)."""
    double = spec.shared_kv_double_mlp and block.startswith("shared")
    return spec.intermediate * (2 if double else 1)


def owns_kv(block: str) -> bool:
    return "shared" not in block


def values_are_keys(spec: ModelSpec, block: str) -> bool:
    return spec.global_k_eq_v and "global" in block


def norm_saved(spec: ModelSpec, name: str, width: int, rows: int = 1) -> list[Saved]:
    """``Gemma4RMSNorm``: the fp32 upcast (pow and the multiply keep it), ``mean(x²) + ε`` and
    its ``^-½`` per row (``torch.pow`` keeps its input, the multiply its output), and the fp32
    normalised value the weight's multiply keeps for the weight's gradient."""
    return [
        Saved(f"{name}: fp32 upcast of the input", width, "fp32", tp_split=False),
        Saved(f"{name}: mean(x²) + ε and its ^-½ per row (fp32)", 2 * rows, "fp32", tp_split=False),
        Saved(
            f"{name}: normalised (fp32), for the weight grad",
            width,
            "fp32",
            norm_weight=True,
            tp_split=False,
        ),
    ]


def unweighted_norm(name: str, width: int, rows: int, **how: Any) -> list[Saved]:
    """A ``Gemma4RMSNorm(with_scale=False)`` (the v norm, the router's norm): no weight."""
    return [
        Saved(f"{name}: fp32 upcast of the input", width, "fp32", tp_split=False, **how),
        Saved(f"{name}: mean(x²) + ε and its ^-½ per row (fp32)", 2 * rows, "fp32", **how),
    ]


def attention_saved(spec: ModelSpec, block: str) -> list[Saved]:
    """From the q/k/v projections to o_proj: the q norm; in a layer computing its own K/V, the k
    and v norms; the core, where a layer reusing keys and values keeps no k or v of its own
    under SDPA (the storing layer's are saved; eager attention's repeat_kv copies them per layer
    all the same)."""
    shape = block_shape(spec, block)
    q, kv = shape.q_width, shape.kv_width
    s = norm_saved(spec, "q_norm", q, spec.heads)
    if owns_kv(block):
        s += norm_saved(spec, "k_norm", kv, shape.kv_heads)
        s += unweighted_norm("v_norm", kv, shape.kv_heads)
    core = _attention_core(shape, q, kv, kv, "self_attn.o_proj")
    if owns_kv(block):
        return s + core
    reused = ("k (after rotary)", "v")
    return s + [dc.replace(x, eager_only=True) if x.what in reused else x for x in core]


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What a layer of ``block`` saves: its attention (sliding or global, computing its keys
    and values or reusing another layer's), the MLP (and the MoE beside it), the per-layer
    input's gated projection."""
    h, attn = spec.hidden, "self_attn."
    projections = ("q_proj", "k_proj", "v_proj") if owns_kv(block) else ("q_proj",)
    s = [
        *norm_saved(spec, "input_layernorm", h),
        linear_input("q/k/v projection input (normed hidden)", h, *(attn + p for p in projections)),
        *attention_saved(spec, block),
    ]
    s += norm_saved(spec, "post_attention_layernorm", h)
    s += norm_saved(spec, "pre_feedforward_layernorm", h)
    s.append(
        linear_input("gate/up projection input (normed hidden)", h, "mlp.gate_proj", "mlp.up_proj")
    )
    s += _gated_mlp(spec, "mlp", mlp_width(spec, block))
    if spec.is_moe:
        s += norm_saved(spec, "post_feedforward_layernorm_1", h) + _moe_saved(spec)
    s += norm_saved(spec, "post_feedforward_layernorm", h)
    if spec.per_layer_input:
        s += _per_layer_input_saved(spec)
    return s


def _per_layer_input_saved(spec: ModelSpec) -> list[Saved]:
    """``act(per_layer_input_gate(x)) · per_layer_input`` → ``per_layer_projection`` → norm:
    the multiply keeps the activation's output only where the per-layer inputs need a gradient
    (``per_layer_model_projection`` trains or carries an adapter); the per-layer inputs it keeps
    are one model-level tensor (:func:`model_saved`)."""
    h, p = spec.hidden, spec.per_layer_input
    return [
        linear_input("per_layer_input_gate input (the residual)", h, "per_layer_input_gate"),
        Saved("per-layer gate output (activation input)", p, "compute", tp_split=False),
        Saved(
            "per-layer activation output (× the per-layer input)",
            p,
            "compute",
            grad_through=("per_layer_model_projection",),
            tp_split=False,
        ),
        linear_input(
            "activation × per-layer input (per_layer_projection input)", p, "per_layer_projection"
        ),
        *norm_saved(spec, "post_per_layer_input_norm", h),
    ]


def _moe_saved(spec: ModelSpec) -> list[Saved]:
    """``Gemma4TextRouter`` over the residual (an unweighted norm, × ``scale``, ``proj``, an
    fp32 softmax, top-k renormalised and × ``per_expert_scale``), ``pre_feedforward_layernorm_2``,
    ``Gemma4TextExperts`` (each token gathered per expert, its GeGLU from one gate_up output,
    the outputs × the routing weights), ``post_feedforward_layernorm_2``."""
    h, k, e = spec.hidden, spec.experts_per_token, spec.num_experts
    return [
        *unweighted_norm("router norm", h, 1),
        Saved(
            "router: normed × scale (scale's gradient)",
            h,
            "compute",
            norm_weight=True,
            tp_split=False,
        ),
        linear_input("router proj input", h, "router.proj"),
        Saved("router probabilities (fp32 softmax output)", e, "fp32", tp_split=False),
        # top-k indices (int64: two fp32 widths), the weights and their sum, × per_expert_scale
        Saved(
            "top-k indices, weights, their sum and scaled weights",
            2 * k + 2 * k + 1,
            "fp32",
            tp_split=False,
        ),
        *norm_saved(spec, "pre_feedforward_layernorm_2", h),
        Saved(
            "tokens gathered for their experts (× top-k)",
            h * k,
            "compute",
            inputs_of=("experts.gate_proj", "experts.up_proj"),
            tp_split=False,
        ),
        *_gated_mlp(spec, "experts", spec.moe_intermediate, per_token=k),
        Saved(
            "expert outputs before routing-weight multiply (× top-k)",
            h * k,
            "compute",
            tp_split=False,
        ),
        *norm_saved(spec, "post_feedforward_layernorm_2", h),
    ]


def model_saved(spec: ModelSpec) -> list[Saved]:
    """Outside the layers: the per-layer inputs every layer's multiply keeps (one tensor of
    layers × ``hidden_size_per_layer_input`` per token), and where ``per_layer_model_projection``
    trains or carries an adapter, its input and ``per_layer_projection_norm``'s tensors."""
    if not spec.per_layer_input:
        return []
    lp, proj = spec.layers * spec.per_layer_input, ("per_layer_model_projection",)
    return [
        # the sum with the embedding's lookup: fp32 under autocast (the embedding's dtype)
        Saved(
            "per-layer inputs (every layer's multiply keeps its slice)",
            lp,
            "residual",
            tp_split=False,
        ),
        linear_input(
            "per_layer_model_projection input (the scaled embeddings)", spec.hidden, *proj
        ),
        *unweighted_norm("per_layer_projection_norm", lp, spec.layers, grad_through=proj),
        Saved(
            "per_layer_projection_norm: normalised (fp32), for the weight grad",
            lp,
            "fp32",
            norm_weight=True,
            tp_split=False,
        ),
    ]
