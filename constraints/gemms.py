"""The model's linears as GEMM groups (from the parameter inventory): shapes, instances, and the
share of a micro-batch's tokens each multiplies (k/E for a routed expert)."""

from __future__ import annotations

from functools import cache

from constraints.frozen import frozen
from constraints.models import ModelSpec
from constraints.params import group_key, inventory

__all__ = ["Gemm", "model_gemms"]


@frozen
class Gemm:
    """A linear of the model: ``layers × per_layer`` weight instances of d_in × d_out, each
    multiplying ``token_share`` of the micro-batch's tokens (k/E for a routed expert)."""

    key: str
    d_in: int
    d_out: int
    layers: int
    per_layer: int
    token_share: float
    quantizable: bool

    @property
    def instances(self) -> int:
        return self.layers * self.per_layer

    @property
    def in_block(self) -> bool:
        """A linear of the repeated layers (what ``quantizable`` marks: the head and the other
        non-block linears are neither quantised nor checkpointed)."""
        return self.quantizable

    @property
    def params_per_token(self) -> float:
        """Weight elements one token multiplies by in this group."""
        return self.d_in * self.d_out * self.instances * self.token_share


@cache
def model_gemms(spec: ModelSpec) -> tuple[Gemm, ...]:
    inv = inventory(spec)
    if spec.arch == "raw":
        h = max(spec.hidden, 1)
        per_layer = (spec.raw_params or 0) / max(spec.layers, 1)
        return (Gemm("raw", h, max(1, int(per_layer // h)), spec.layers, 1, 1.0, True),)
    out: list[Gemm] = []
    for g in inv.groups:
        if not g.is_linear:
            continue
        layers = inv.blocks[g.block] if g.block else 1
        share = spec.experts_run_per_token / g.per_block if g.role == "expert" else g.uses
        out.append(
            Gemm(
                group_key(spec, g.name, g.block),
                g.d_in,
                g.d_out,
                layers,
                g.per_block,
                share,
                bool(g.block),
            )
        )
    if spec.arch != "encoder":
        out.append(Gemm("lm_head", spec.hidden, spec.vocab, 1, 1, 1.0, False))
    return tuple(out)
