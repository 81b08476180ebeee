"""Nemotron-H (NVIDIA Nemotron-H, Nemotron Nano 2 / 3) as transformers 5.25 builds it
(modeling_nemotron_h.py): its config.json read, its parameters, and what each block saves.

Every block is ``norm`` (RMSNorm with its weight multiplied in fp32) then one mixer, added to
the residual: a Mamba-2 mixer (``mixer.*``: constraints/mamba2.py), attention without rotary
(``mixer.q/k/v/o_proj``), an MLP (``mixer.up_proj`` → relu² → ``mixer.down_proj``) or an MoE
(an fp32 sigmoid router with a correction-bias buffer, non-gated up/down experts, a shared
MLP, optional latent projections around the experts). ``layers_block_type`` lists them
(``hybrid_override_pattern``'s M / * / - / E too); ``norm_f`` is the final norm.
"""

from __future__ import annotations

from typing import Any

from constraints import mamba2
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
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
from constraints.saved_tensors import (
    Saved,
    _plain_mlp,
    linear_input,
    projected_attention,
)
from constraints.saved_tensors import _norm as _norm_saved

#: block type -> layer_mixers letter (transformers' names, and the legacy pattern's characters)
LETTERS = {"linear_attention": "m", "full_attention": "a", "mlp": "f", "moe": "e"}
PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _mixers(cfg: dict[str, Any], where: str) -> str:
    kinds = cfg.get("layers_block_type", cfg.get("layer_types"))
    pattern = cfg.get("hybrid_override_pattern")
    if kinds is None and pattern is not None:
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(PATTERN):
            raise FitplanError(
                f"{where}: hybrid_override_pattern must be a string of M, *, - and E, "
                f"got {excerpt(pattern)}"
            )
        kinds = [PATTERN[c] for c in pattern]
    if kinds is None:
        kinds = ["linear_attention", "moe", "full_attention", "mlp"]  # NemotronHConfig's
    if not isinstance(kinds, list) or not kinds or not set(kinds) <= set(LETTERS):
        raise FitplanError(
            f"{where}: layers_block_type must list 'linear_attention', 'full_attention', 'mlp' "
            f"or 'moe' per block, got {excerpt(kinds)}"
        )
    return "".join(LETTERS[k] for k in kinds)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """NemotronHConfig's fields (configuration_nemotron_h.py defaults where a key is absent; the
    blocks' list decides the depth, num_hidden_layers is deprecated there)."""

    def field(key: str, default: int, *aliases: str) -> int:
        return _positive(key, _int(cfg, key, *aliases, where=where, default=default), where)

    hidden = field("hidden_size", 4096)
    heads = field("num_attention_heads", 32)
    kv_heads = field("num_key_value_heads", 8)
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    mixers = _mixers(cfg, where)
    moe: dict[str, Any] = {}
    if "e" in mixers:
        routed = field("n_routed_experts", 8, "num_local_experts")
        moe = {
            "num_experts": routed,
            "experts_per_token": field("num_experts_per_tok", 2),
            "moe_intermediate": field("moe_intermediate_size", 7688),
            "shared_experts": _int(cfg, "n_shared_experts", where=where, default=1),
            "shared_expert_intermediate": field("moe_shared_expert_intermediate_size", 7688),
            "router_linear": False,
            "router_fp32_input": True,
            "moe_every": 1,
        }
        if moe["experts_per_token"] > routed:
            raise FitplanError(
                f"{where}: num_experts_per_tok {moe['experts_per_token']} exceeds the {routed} experts"
            )
        latent = cfg.get("moe_latent_size")
        if latent is not None:
            moe["moe_latent"] = field("moe_latent_size", 0)
    return ModelSpec(
        **common,
        **moe,
        family="nemotron_h",
        hidden=hidden,
        layers=len(mixers),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=field("head_dim", 128),
        intermediate=field("intermediate_size", 21504),
        vocab=field("vocab_size", 131072),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=4096),
        # NemotronHForCausalLM._tied_weights_keys = {}: the head is its own, whatever
        # tie_word_embeddings says
        tie_embeddings=False,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        gated_mlp=False,
        activation=str(cfg.get("mlp_hidden_act", "relu2")),
        norm_weight_fp32=True,
        layer_mixers=mixers,
        ssm_heads=field("mamba_num_heads", 128),
        ssm_head_dim=field("mamba_head_dim", 64),
        ssm_groups=field("n_groups", 8, "mamba_n_groups"),
        ssm_state=field("ssm_state_size", 128),
        ssm_chunk=field("chunk_size", 128, "mamba_chunk_size"),
        linear_conv_kernel=field("conv_kernel", 4, "mamba_d_conv"),
        ssm_conv_bias=bool(cfg.get("use_conv_bias", cfg.get("mamba_conv_bias", True))),
        # NemotronHMamba2Mixer: in_proj / out_proj bias=config.use_bias (mamba_proj_bias unread)
        mixer_bias=bool(cfg.get("use_bias", False)),
    )


def _mlp(spec: ModelSpec, prefix: str, inter: int, block: str, role: Any) -> list[ParamGroup]:
    h, bias = spec.hidden, spec.mlp_bias
    return [
        *_linear(f"{prefix}.up_proj", "up_proj", h, inter, block=block, role=role, bias=bias),
        *_linear(f"{prefix}.down_proj", "down_proj", inter, h, block=block, role=role, bias=bias),
    ]


def _block_groups(spec: ModelSpec, b: str) -> list[ParamGroup]:
    h = spec.hidden
    if b == "mamba-dense":
        return mamba2.param_groups(spec, b, prefix="mixer")
    if b == "dense":
        return attention_projections(spec, "mixer", b)
    if b == "ffn":
        return _mlp(spec, "mixer", spec.intermediate, b, "mlp")
    e, width = spec.num_experts, spec.moe_latent or h
    groups = [
        ParamGroup("mixer.gate.weight", "router", e * h, 1, b, "gate", "router"),
        # NemotronHExperts: up_proj (E, I, d) and down_proj (E, d, I) Parameters, d the latent
        ParamGroup(
            "mixer.experts.up_proj",
            "linear",
            e * spec.moe_intermediate * width,
            1,
            b,
            "up_proj",
            "expert",
            width,
            spec.moe_intermediate,
        ),
        ParamGroup(
            "mixer.experts.down_proj",
            "linear",
            e * spec.moe_intermediate * width,
            1,
            b,
            "down_proj",
            "expert",
            spec.moe_intermediate,
            width,
        ),
        *_mlp(spec, "mixer.shared_experts", spec.shared_expert_intermediate, b, "shared_expert"),
    ]
    if spec.moe_latent:
        bias = spec.mlp_bias
        groups += _linear(
            "mixer.fc1_latent_proj", "fc1_latent_proj", h, width, block=b, role="mlp", bias=bias
        )
        groups += _linear(
            "mixer.fc2_latent_proj", "fc2_latent_proj", width, h, block=b, role="mlp", bias=bias
        )
    return groups


def inventory(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks: dict[str, int] = {
        b: kinds.count(b) for b in ("mamba-dense", "dense", "ffn", "experts") if b in kinds
    }
    groups = [ParamGroup("embeddings", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("norm", spec, h, b)
        groups += _block_groups(spec, b)
    groups += _norm("norm_f", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What one block saves: its norm, then its one mixer."""
    h = spec.hidden
    s = _norm_saved(spec, "norm", h)
    if block == "mamba-dense":
        return s + mamba2.mixer_saved(spec, prefix="mixer")
    if block == "dense":
        return s + projected_attention(spec, "mixer")
    if block == "ffn":
        s.append(linear_input("up_proj input (normed hidden)", h, "mixer.up_proj"))
        return s + _plain_mlp(spec, "mixer.up_proj", "mixer.down_proj", spec.intermediate)
    return s + _moe_saved(spec)


def _moe_saved(spec: ModelSpec) -> list[Saved]:
    """``NemotronHMoE``: the router's fp32 input copy and sigmoid scores (DeepSeek-V3's
    group-limited top-k), each token's (latent) hidden gathered for its experts, their up → relu²
    → down, scaled by the routing weights; beside it the shared MLP on the block's input."""
    h, k, e = spec.hidden, spec.experts_per_token, spec.num_experts
    width, inter = spec.moe_latent or h, spec.moe_intermediate
    s = [
        Saved(
            "router / shared-expert input (normed hidden)",
            h,
            "compute",
            inputs_of=("mixer.gate", "mixer.shared_experts.up_proj", "mixer.fc1_latent_proj"),
            tp_split=False,
        ),
        Saved("router input upcast to fp32", h, "fp32", inputs_of=("mixer.gate",), tp_split=False),
        Saved("router sigmoid scores (fp32)", e, "fp32", tp_split=False),
        Saved("top-k weights and their sum (fp32)", k + 1, "fp32", tp_split=False),
        Saved(
            "tokens gathered for their experts (× top-k)",
            width * k,
            "compute",
            inputs_of=("mixer.experts.up_proj",),
            tp_split=False,
        ),
        *_plain_mlp(spec, "mixer.experts.up_proj", "mixer.experts.down_proj", inter * k),
        Saved(
            "expert outputs before routing-weight multiply (× top-k)",
            width * k,
            "compute",
            tp_split=False,
        ),
    ]
    if spec.moe_latent:
        s.append(
            Saved("fc2_latent_proj input", width, "compute", inputs_of=("mixer.fc2_latent_proj",))
        )
    return s + _plain_mlp(
        spec,
        "mixer.shared_experts.up_proj",
        "mixer.shared_experts.down_proj",
        spec.shared_expert_intermediate,
    )
