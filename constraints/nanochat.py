"""nanochat (Karpathy's nanochat, ``karpathy/nanochat-d32``) as transformers 5.25 builds it
(modeling_nanochat.py): its config.json read, its parameters and what a layer saves.

A Llama-shaped decoder with parameter-free RMSNorms (``x · rsqrt(mean(x²) + ε)`` in fp32, cast
back: no weight), one more on the embedding before the first layer, q/k normed the same way
after the rotary, a plain MLP ``fc2(relu²(fc1 x))``, no biases, an untied head whose logits
are soft-capped (``final_logit_softcapping``).
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import positive_field
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _linear,
    attention_projections,
    untied_head,
)
from constraints.saved_tensors import Saved, _attention_core, _plain_mlp, linear_input

#: NanoChatConfig's defaults (configuration_nanochat.py)
DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 8192,
    "num_hidden_layers": 12,
    "num_attention_heads": 6,
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
}


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """NanoChatConfig's fields (its defaults where a key is absent)."""
    hidden = _field(cfg, "hidden_size", where)
    heads = _field(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads")
    kv_heads = (
        heads
        if kv is None
        else _positive("num_key_value_heads", _int(cfg, "num_key_value_heads", where=where), where)
    )
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise FitplanError(
                f"{where}: hidden_size {hidden} is not divisible by {heads} attention heads"
            )
        head_dim = hidden // heads
    else:
        head_dim = _positive("head_dim", _int(cfg, "head_dim", where=where), where)
    act = str(cfg.get("hidden_act", "relu2"))
    if act != "relu2":
        raise FitplanError(
            f"{where}: hidden_act {act!r}: fitplan models nanochat's relu² MLP",
            "pass raw numbers (--params …)",
        )
    return ModelSpec(
        **common,
        family=model_type,
        hidden=hidden,
        layers=_field(cfg, "num_hidden_layers", where),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=int(head_dim),
        intermediate=_field(cfg, "intermediate_size", where),
        vocab=_field(cfg, "vocab_size", where),
        max_position=_field(cfg, "max_position_embeddings", where),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", False)),
        o_bias=bool(cfg.get("attention_bias", False)),
        norm="nonparam",
        qk_norm="head",
        gated_mlp=False,
        mlp_up="fc1",
        mlp_down="fc2",
        activation=act,
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
        final_softcap=float(cfg.get("final_logit_softcapping", 15.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, b = spec.hidden, "dense"
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *attention_projections(spec, "self_attn", b),
        *_linear("mlp.fc1", "fc1", h, spec.intermediate, block=b, role="mlp"),
        *_linear("mlp.fc2", "fc2", spec.intermediate, h, block=b, role="mlp"),
        *untied_head(spec),
    ]
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def norm_saved(spec: ModelSpec, name: str, width: int, rows: int = 1, **how: Any) -> list[Saved]:
    """``NanoChatRMSNorm``: the fp32 upcast (pow and the multiply keep it) and the rsqrt per
    row; no weight."""
    return [
        Saved(f"{name}: fp32 upcast of the input", width, "fp32", tp_split=False, **how),
        Saved(f"{name}: rsqrt per row (fp32)", rows, "fp32", tp_split=False, **how),
    ]


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    h, q, kv, a = spec.hidden, spec.q_width, spec.kv_width, "self_attn."
    return [
        *norm_saved(spec, "input_layernorm", h),
        linear_input(
            "q/k/v projection input (normed hidden)", h, a + "q_proj", a + "k_proj", a + "v_proj"
        ),
        # the norms after the rotary: their inputs are the rotated q and k
        *norm_saved(spec, "q_norm", q, spec.heads),
        *norm_saved(spec, "k_norm", kv, spec.kv_heads),
        *_attention_core(spec, q, kv, kv, a + "o_proj"),
        *norm_saved(spec, "post_attention_layernorm", h),
        linear_input("fc1 input (normed hidden)", h, "mlp.fc1"),
        *_plain_mlp(spec, "mlp.fc1", "mlp.fc2", spec.intermediate),
    ]


def model_saved(spec: ModelSpec) -> list[Saved]:
    """The norm on the embedding before the first layer: it keeps something only where the
    embedding trains (its output needs no gradient otherwise)."""
    return norm_saved(spec, "embedding norm", spec.hidden, norm_weight=True)
