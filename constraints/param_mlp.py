"""The MLP tensors of the Llama-like layers: gated (SwiGLU / GeGLU, experts stacked), plain
(up, act, down), and Granite MoE's fused shared MLP."""

from __future__ import annotations

from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, Role, _linear


def gated_mlp(
    spec: ModelSpec,
    prefix: str,
    inter: int,
    block: str,
    role: Role,
    per_block: int = 1,
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
) -> list[ParamGroup]:
    h = spec.hidden
    gate, up, down = names
    if spec.fused_gate_up and role == "mlp":
        return _linear(
            f"{prefix}.gate_up_proj",
            "gate_up_proj",
            h,
            2 * inter,
            block=block,
            role=role,
            bias=spec.mlp_bias,
            per_block=per_block,
        ) + _linear(
            f"{prefix}.{down}",
            down,
            inter,
            h,
            block=block,
            role=role,
            bias=spec.mlp_bias,
            per_block=per_block,
        )
    return (
        _linear(
            f"{prefix}.{gate}",
            gate,
            h,
            inter,
            block=block,
            role=role,
            bias=spec.mlp_bias,
            per_block=per_block,
        )
        + _linear(
            f"{prefix}.{up}",
            up,
            h,
            inter,
            block=block,
            role=role,
            bias=spec.mlp_bias,
            per_block=per_block,
        )
        + _linear(
            f"{prefix}.{down}",
            down,
            inter,
            h,
            block=block,
            role=role,
            bias=spec.mlp_bias,
            per_block=per_block,
        )
    )


def fused_shared_mlp(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """Granite MoE's shared MLP: ``output_linear(act(x₁) · x₂)`` with x₁, x₂ the halves of one
    ``input_linear`` (modeling_granitemoeshared.py ``GraniteMoeSharedMLP``)."""
    h, inter = spec.hidden, spec.shared_expert_intermediate
    up = _linear(
        "mlp.shared_experts.gate_up_proj",
        "input_linear",
        h,
        2 * inter,
        block=block,
        role="shared_expert",
    )
    down = _linear(
        "mlp.shared_experts.down_proj",
        "output_linear",
        inter,
        h,
        block=block,
        role="shared_expert",
    )
    return up + down


def up_down_mlp(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """An MLP without a gate: ``down(act(up(x)))`` (Arcee's up/down_proj, Starcoder2's c_fc/c_proj)."""
    h, inter = spec.hidden, spec.intermediate
    up, down = spec.mlp_up, spec.mlp_down
    act: list[ParamGroup] = []
    if spec.activation == "xielu":
        # transformers' XIELUActivation: two learned scalars (alpha_p, alpha_n), each shape (1,)
        act = [ParamGroup("mlp.act_fn.alpha_p/alpha_n", "other", 1, 2, block, "act_fn", "mlp")]
    return (
        _linear(f"mlp.{up}", up, h, inter, block=block, role="mlp", bias=spec.mlp_bias)
        + _linear(f"mlp.{down}", down, inter, h, block=block, role="mlp", bias=spec.mlp_bias)
        + act
    )
