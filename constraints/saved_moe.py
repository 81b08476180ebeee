"""An MoE layer's routed experts as transformers' expert loop saves them (shared by the generic
MoE of the Llama-like families, Jamba and Cohere 2 MoE)."""

from __future__ import annotations

from constraints.model_spec import ModelSpec
from constraints.saved_tensors import Saved, _gated_mlp


def routed_experts(
    spec: ModelSpec, prefix: str, inter: int, per_token: float, readers: tuple[str, ...]
) -> list[Saved]:
    """An MoE's routed experts (transformers' loop over the experts a token picked): each
    token's hidden gathered for its ``per_token`` experts (kept where ``readers``, their
    gate/up, train), their SwiGLU, and their outputs before the routing-weight multiply."""
    h = spec.hidden
    return [
        Saved(
            "tokens gathered for their experts (× top-k)",
            h * per_token,
            "compute",
            inputs_of=readers,
            tp_split=False,
        ),
        *_gated_mlp(spec, prefix, inter, per_token=per_token),
        Saved(
            "expert outputs before routing-weight multiply (× top-k)",
            h * per_token,
            "compute",
            tp_split=False,
        ),
    ]
