"""Gated DeltaNet, the linear-attention token mixer of Qwen3-Next and Qwen 3.5: its config
fields, its parameters, and what transformers' torch path saves for backward.

Read from transformers 5.25 ``modeling_qwen3_5.py`` (``Qwen3_5GatedDeltaNet``,
``torch_chunk_gated_delta_rule``, ``Qwen3_5RMSNormGated``) and ``modeling_qwen3_next.py``
(the same layer with fused ``in_proj_qkvz`` / ``in_proj_ba``). transformers runs
flash-linear-attention's kernel where the ``fla`` package is installed and the inputs are on a
GPU (integrations/hub_kernels.py ``use_kernel_func_from_hub_with_fallback``), else its own torch
path, which keeps every chunk's fp32 intermediates and recurrent state: :func:`mixer_saved`
lists either, as :attr:`ModelSpec.delta_rule_kernel` says.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field, positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, _linear
from constraints.saved_tensors import Saved, linear_input

#: the types whose decoder layers mix gated DeltaNet and attention, and whether their q/k/v/z
#: and b/a projections are fused (Qwen3-Next) or four linears (Qwen 3.5)
FUSED_PROJECTIONS = {"qwen3_next": True, "qwen3_5_text": False, "qwen3_5_moe_text": False}
#: the config classes' defaults (configuration_qwen3_next.py / configuration_qwen3_5.py)
DEFAULTS = {
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
}
LINEAR, FULL = "linear_attention", "full_attention"
#: torch_chunk_gated_delta_rule's chunk: the sequence is padded to a multiple of it
CHUNK = 64


def read(cfg: dict[str, Any], kwargs: dict[str, Any], where: str, model_type: str) -> None:
    """The mixer of each layer and the gated DeltaNet's widths, into ``kwargs``."""
    layers = kwargs["layers"]
    kinds = cfg.get("layer_types")
    if kinds is None:
        every = positive(
            "full_attention_interval",
            int_field(cfg, "full_attention_interval", where=where, default=4),
            where,
        )
        kinds = [LINEAR if (i + 1) % every else FULL for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {LINEAR, FULL}:
        raise FitplanError(
            f"{where}: layer_types must list '{LINEAR}' or '{FULL}' for each of the "
            f"{layers} layers, got {excerpt(kinds)}"
        )
    kwargs["layer_mixers"] = "".join("l" if k == LINEAR else "a" for k in kinds)
    fields = {
        key: positive(key, int_field(cfg, key, where=where, default=default), where)
        for key, default in DEFAULTS.items()
        if key != "full_attention_interval"
    }
    if fields["linear_num_value_heads"] % fields["linear_num_key_heads"]:
        raise FitplanError(
            f"{where}: linear_num_value_heads {fields['linear_num_value_heads']} is not a "
            f"multiple of linear_num_key_heads {fields['linear_num_key_heads']}"
        )
    kwargs["linear_key_heads"] = fields["linear_num_key_heads"]
    kwargs["linear_value_heads"] = fields["linear_num_value_heads"]
    kwargs["linear_key_head_dim"] = fields["linear_key_head_dim"]
    kwargs["linear_value_head_dim"] = fields["linear_value_head_dim"]
    kwargs["linear_conv_kernel"] = fields["linear_conv_kernel_dim"]
    kwargs["linear_fused_proj"] = FUSED_PROJECTIONS[model_type]
    kwargs["attn_output_gate"] = True


def _widths(spec: ModelSpec) -> tuple[int, int, int]:
    """(key width, value width, the convolution's channels), elements per token."""
    key = spec.linear_key_heads * spec.linear_key_head_dim
    value = spec.linear_value_heads * spec.linear_value_head_dim
    return key, value, 2 * key + value


def param_groups(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """The mixer's tensors in one layer of ``block`` (``linear_attn.*``)."""
    h, heads = spec.hidden, spec.linear_value_heads
    _key, value, conv = _widths(spec)
    p = "linear_attn"
    if spec.linear_fused_proj:
        g = _linear(
            f"{p}.in_proj_qkvz", "in_proj_qkvz", h, conv + value, block=block, role="attention"
        )
        g += _linear(f"{p}.in_proj_ba", "in_proj_ba", h, 2 * heads, block=block, role="attention")
    else:
        g = _linear(f"{p}.in_proj_qkv", "in_proj_qkv", h, conv, block=block, role="attention")
        g += _linear(f"{p}.in_proj_z", "in_proj_z", h, value, block=block, role="attention")
        g += _linear(f"{p}.in_proj_b", "in_proj_b", h, heads, block=block, role="attention")
        g += _linear(f"{p}.in_proj_a", "in_proj_a", h, heads, block=block, role="attention")
    g += [
        # depthwise nn.Conv1d without bias: not an nn.Linear (PEFT's all-linear skips it)
        ParamGroup(
            f"{p}.conv1d.weight",
            "other",
            conv * spec.linear_conv_kernel,
            1,
            block,
            "conv1d",
            "attention",
        ),
        ParamGroup(f"{p}.dt_bias", "other", heads, 1, block, "", "attention"),
        ParamGroup(f"{p}.A_log", "other", heads, 1, block, "", "attention"),
        ParamGroup(f"{p}.norm.weight", "norm", spec.linear_value_head_dim, 1, block, "", "norm"),
    ]
    g += _linear(f"{p}.out_proj", "out_proj", value, h, block=block, role="attention")
    return g


def mixer_saved(spec: ModelSpec) -> list[Saved]:
    """What one gated DeltaNet saves for backward, per token: the projections, convolution and
    gates in torch ops, the delta rule as :attr:`ModelSpec.delta_rule_kernel` runs it, then the
    gated norm (``Qwen3_5RMSNormGated``: fp32 norm, the weight after the cast, · silu(z) in
    fp32) and out_proj."""
    h, hv = spec.hidden, spec.linear_value_heads
    _key, value, conv = _widths(spec)
    qkv_in = (
        ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba")
        if spec.linear_fused_proj
        else (
            "linear_attn.in_proj_qkv",
            "linear_attn.in_proj_z",
            "linear_attn.in_proj_b",
            "linear_attn.in_proj_a",
        )
    )
    rule = _fla_rule(spec) if spec.delta_rule_kernel == "fla" else _torch_rule(spec)
    return [
        linear_input("in_proj input (normed hidden)", h, *qkv_in),
        Saved("conv1d input (q, k, v projections)", conv, "compute"),
        Saved("SiLU input (conv1d output)", conv, "compute"),
        Saved("beta = sigmoid(b) output", hv, "compute"),
        Saved("softplus input and output (fp32 a + dt_bias)", 2 * hv, "fp32"),
        *rule,
        Saved("gated norm: fp32 upcast of the output", value, "fp32"),
        Saved("gated norm: rsqrt per head", hv, "fp32"),
        Saved("gated norm: normalised output cast back (weight multiply)", value, "compute"),
        Saved("gated norm: z upcast and silu(z) (fp32)", 2 * value, "fp32"),
        Saved("gated norm: weighted output (gate multiply)", value, "compute"),
        Saved("out_proj input", value, "compute", inputs_of=("linear_attn.out_proj",)),
    ]


def _torch_rule(spec: ModelSpec) -> list[Saved]:
    """``torch_chunk_gated_delta_rule``: fp32 on every value head (q and k repeated to them)
    over the sequence padded to a multiple of :data:`CHUNK` (``F.pad``); per chunk it keeps
    64 × 64 score-like matrices (``C`` per token and head) and the recurrent state it read
    (``d_k · d_v / C`` per token and head). Counted for a sequence that is a multiple of the
    chunk: another length keeps the "padded" lines for its padded length (up to 63 more
    tokens). Left out: per-call constants (the 64 × 64 causal mask, one value per head) and the
    ``K − 1`` columns the convolution pads."""
    hv, dk, dv, c = (
        spec.linear_value_heads,
        spec.linear_key_head_dim,
        spec.linear_value_head_dim,
        CHUNK,
    )
    return [
        Saved("q and k upcast to fp32 (l2norm input)", 2 * hv * dk, "fp32"),
        Saved("l2norm inverse norms of q and k", 2 * hv, "fp32"),
        Saved("padded v, k and q (fp32)", hv * (dv + 2 * dk), "fp32"),
        Saved("padded beta", hv, "fp32"),
        Saved("k · beta", hv * dk, "fp32"),
        Saved("pairwise decay exp(Δ cumulative g), per chunk", hv * c, "fp32"),
        Saved("k·beta @ kᵀ and q @ kᵀ, per chunk", 2 * hv * c, "fp32"),
        Saved("UT system and intra-chunk attention (decayed)", 2 * hv * c, "fp32"),
        Saved("exp(cumulative decay) factors of k·beta, q and k", 3 * hv, "fp32"),
        Saved("chunk decay", hv / c, "fp32"),
        Saved("new values and k_cumdecay (triangular solves)", hv * (dv + dk), "fp32"),
        Saved("decayed q and k", 2 * hv * dk, "fp32"),
        Saved("recurrent state read by each chunk", hv * dk * dv / c, "fp32"),
        Saved("corrected values v_new, per chunk", hv * dv, "fp32"),
    ]


def _fla_rule(spec: ModelSpec) -> list[Saved]:
    """flash-linear-attention's ``ChunkGatedDeltaRuleFunction`` (fla/ops/gated_delta_rule/
    chunk.py, v0.5.2): ``ctx.save_for_backward(q, q_rstd, k, k_rstd, v, g, beta_raw, beta, A,
    initial_state, ...)`` — q and k L2-normalised in their dtype on the key heads
    (``l2norm_fwd``, fp32 rstd per row), v as ``input_guard`` made it contiguous, g's
    chunk-local cumsum (``chunk_local_cumsum``: fp32), beta itself (the sigmoid's saved output)
    and A, the solved (I + A)⁻¹ of each chunk (``[B, T, HV, 64]`` in k's dtype). The chunk
    states it recomputes in backward are not kept."""
    hk, hv = spec.linear_key_heads, spec.linear_value_heads
    dk, dv = spec.linear_key_head_dim, spec.linear_value_head_dim
    return [
        Saved("fla: q and k after l2norm (key heads)", 2 * hk * dk, "compute"),
        Saved("fla: l2norm rstd of q and k", 2 * hk, "fp32"),
        Saved("fla: v made contiguous", hv * dv, "compute"),
        Saved("fla: chunk-local cumulative g (fp32)", hv, "fp32"),
        Saved("fla: A, the solved (I + A)⁻¹ per chunk", hv * CHUNK, "compute"),
    ]


def delta_rule_flops_per_token(spec: ModelSpec) -> float:
    """Forward FLOPs per token of the chunked delta rule in every gated DeltaNet layer (the
    projections are GEMMs of the inventory): per chunk of C tokens and value head, the k·β kᵀ
    and q kᵀ products (C² d_k each), the two triangular solves (≈ C² d_v and C² d_k), the
    intra-chunk attention over the corrected values (C² d_v) and the three state products (the
    state read by k and q, and kᵀ v_new: C d_k d_v each); 2 FLOPs a multiply-add."""
    c, dk, dv = CHUNK, spec.linear_key_head_dim, spec.linear_value_head_dim
    macs = c * (3 * dk + 2 * dv) + 3 * dk * dv
    return 2.0 * macs * spec.linear_value_heads * spec.linear_layers
