"""One tensor of a model (:class:`ParamGroup`) and a model's tensors (:class:`ParamInventory`).

Counts follow ``model.num_parameters()`` of the Hugging Face class: a tied head is counted once,
buffers are not parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from typing import Literal

from constraints.frozen import frozen
from constraints.model_spec import ModelSpec

Kind = Literal["linear", "bias", "embedding", "lm_head", "position", "norm", "router", "other"]
Role = Literal[
    "attention", "mlp", "expert", "shared_expert", "router", "embedding", "head", "norm", "other"
]


@frozen
class ParamGroup:
    """``per_block`` identical tensors in each of the inventory's ``block`` repeats ('' = once),
    each a linear a token passes through ``uses`` times per forward (Gemma 3n's AltUp router:
    twice, to predict and to correct)."""

    name: str
    kind: Kind
    numel: int
    per_block: int = 1
    block: str = ""
    module: str = ""
    role: Role = "other"
    d_in: int = 0
    d_out: int = 0
    uses: int = 1
    #: its forward is recorded by autograd; False where it runs under no_grad (DeepSeek Sparse
    #: Attention's indexer): an adapter on it trains nothing and keeps nothing
    recorded: bool = True

    @property
    def is_linear(self) -> bool:
        """An nn.Linear / Conv1D weight (what PEFT's all-linear and bitsandbytes replace)."""
        return self.kind == "linear" or (self.kind == "router" and self.d_in > 0)


@frozen
class ParamInventory:
    model_id: str
    groups: tuple[ParamGroup, ...]
    blocks: dict[str, int] = field(default_factory=dict)

    def count(self, group: ParamGroup) -> int:
        return group.per_block * (self.blocks[group.block] if group.block else 1)

    def total_of(self, groups: Iterable[ParamGroup]) -> int:
        return sum(g.numel * self.count(g) for g in groups)

    @property
    def total(self) -> int:
        return self.total_of(self.groups)

    @property
    def embedding(self) -> int:
        """Input embeddings, learned positions and token types (not the untied head)."""
        return self.total_of(g for g in self.groups if g.kind in ("embedding", "position"))

    @property
    def lm_head(self) -> int:
        return self.total_of(g for g in self.groups if g.kind == "lm_head")

    @property
    def quantizable(self) -> int:
        """Weights of the linears inside the blocks: what bitsandbytes int8/NF4 replaces."""
        return self.total_of(g for g in self.groups if g.is_linear and g.block)

    @property
    def largest_linear(self) -> int:
        """Elements of the largest single linear weight (its 16-bit copy is the dequant buffer)."""
        return max((g.numel for g in self.groups if g.is_linear), default=0)

    @property
    def layer_params(self) -> dict[str, int]:
        """Parameters of one block of each kind ('dense', 'moe', 'encoder', …)."""
        out: dict[str, int] = {}
        for name in self.blocks:
            out[name] = sum(g.numel * g.per_block for g in self.groups if g.block == name)
        return out

    @property
    def largest_layer(self) -> int:
        return max(self.layer_params.values(), default=0)

    @property
    def non_layer(self) -> int:
        """Embeddings, head, final norms: the FSDP root unit."""
        return self.total_of(g for g in self.groups if not g.block)

    def active(self, experts_per_token: int, num_experts: int) -> int:
        """Parameters one token passes through (routed experts scaled by k/E)."""
        dense = self.total_of(g for g in self.groups if g.role != "expert")
        experts = self.total_of(g for g in self.groups if g.role == "expert")
        if not num_experts:
            return dense + experts
        return dense + experts * experts_per_token // num_experts

    def linear_modules(self) -> dict[str, list[ParamGroup]]:
        """LoRA-targetable modules by leaf name (``q_proj``, ``c_attn``, ``w1`` …)."""
        out: dict[str, list[ParamGroup]] = {}
        for g in self.groups:
            if g.is_linear and g.role != "head":
                out.setdefault(g.module, []).append(g)
        return out


def _norm_numel(spec: ModelSpec, width: int) -> int:
    return {"rmsnorm": width, "layernorm": 2 * width, "nonparam": 0}[spec.norm]


def _linear(
    name: str,
    module: str,
    d_in: int,
    d_out: int,
    *,
    block: str,
    role: Role,
    bias: bool = False,
    per_block: int = 1,
) -> list[ParamGroup]:
    groups = [
        ParamGroup(
            f"{name}.weight",
            "linear",
            d_in * d_out,
            per_block,
            block,
            module,
            role,
            d_in,
            d_out,
        )
    ]
    if bias:
        groups.append(ParamGroup(f"{name}.bias", "bias", d_out, per_block, block, module, role))
    return groups


def _norm(
    name: str, spec: ModelSpec, width: int, block: str, per_block: int = 1
) -> list[ParamGroup]:
    numel = _norm_numel(spec, width)
    return [ParamGroup(name, "norm", numel, per_block, block, "", "norm")] if numel else []


def untied_head(spec: ModelSpec) -> list[ParamGroup]:
    """The output head, where it is its own tensor (a tied head is the embedding, counted once)."""
    if spec.tie_embeddings:
        return []
    h = spec.hidden
    return [ParamGroup("lm_head", "lm_head", spec.vocab * h, role="head", d_in=h, d_out=spec.vocab)]


def attention_projections(
    spec: ModelSpec, prefix: str, block: str, out: str = "o_proj"
) -> list[ParamGroup]:
    """``prefix``.q_proj / k_proj / v_proj and the output projection ``out`` of a plain (GQA)
    attention, with the spec's q/k/v and output biases."""
    h, q, kv, bias = spec.hidden, spec.q_width, spec.kv_width, spec.qkv_bias
    return [
        *_linear(f"{prefix}.q_proj", "q_proj", h, q, block=block, role="attention", bias=bias),
        *_linear(f"{prefix}.k_proj", "k_proj", h, kv, block=block, role="attention", bias=bias),
        *_linear(f"{prefix}.v_proj", "v_proj", h, kv, block=block, role="attention", bias=bias),
        *_linear(f"{prefix}.{out}", out, q, h, block=block, role="attention", bias=spec.o_bias),
    ]


def group_key(spec: ModelSpec, name: str, block: str) -> str:
    """A linear group's key: its name without ``.weight``; T5 keys carry their stack (block)."""
    name = name.removesuffix(".weight")
    return f"{block}:{name}" if spec.family in ("t5", "mt5") else name
