"""BitNet b1.58 (``microsoft/bitnet-b1.58-2B-4T``, its ``-bf16`` master weights for training) as
transformers 5.25 builds it (modeling_bitnet.py): its config.json read, its parameters and what a
layer saves.

Llama's layer with two more RMSNorms: ``attn_sub_norm`` on the attention output before
``o_proj`` and ``ffn_sub_norm`` on ``act(gate) · up`` before ``down_proj``; the MLP's activation
is relu² (``hidden_act``). Planned in the checkpoint's 16-bit weights: the ternary packing of the
inference checkpoints (``quantization_config`` "bitnet") is a serving format.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import positive_field
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _linear,
    _norm,
    attention_projections,
    untied_head,
)
from constraints.saved_tensors import Saved, _attention_core, linear_input
from constraints.saved_tensors import _norm as _norm_saved

#: BitNetConfig's defaults (configuration_bitnet.py)
DEFAULTS = {
    "hidden_size": 2560,
    "intermediate_size": 6912,
    "num_hidden_layers": 30,
    "num_attention_heads": 20,
    "num_key_value_heads": 5,
    "vocab_size": 128256,
    "max_position_embeddings": 2048,
}
BLOCK = "dense"


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """BitNetConfig's fields (its defaults where a key is absent). The sub-norm is hidden_size
    wide on the attention output, so the heads must tile the hidden size."""
    hidden, heads = _field(cfg, "hidden_size", where), _field(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads", DEFAULTS["num_key_value_heads"])
    kv_heads = heads if kv is None else _field(cfg, "num_key_value_heads", where)
    if hidden % heads or heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} must divide hidden_size {hidden} and be a "
            f"multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = cfg.get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise FitplanError(
            f"{where}: head_dim {head_dim}: BitNet's attn_sub_norm is hidden_size {hidden} wide, "
            f"so heads × head_dim must be it (head_dim {hidden // heads})"
        )
    act = str(cfg.get("hidden_act", "relu2"))
    if act != "relu2":
        raise FitplanError(
            f"{where}: hidden_act {act!r}: fitplan models BitNet's relu² MLP",
            "pass raw numbers (--params …)",
        )
    bias = bool(cfg.get("attention_bias", False))
    return ModelSpec(
        **common,
        family=model_type,
        hidden=hidden,
        layers=_field(cfg, "num_hidden_layers", where),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=_field(cfg, "intermediate_size", where),
        vocab=_field(cfg, "vocab_size", where),
        max_position=_field(cfg, "max_position_embeddings", where),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bias,
        o_bias=bias,
        activation=act,
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, BLOCK
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm/post_attention_layernorm", spec, h, b, per_block=2),
        *attention_projections(spec, "self_attn", b),
        *_norm("self_attn.attn_sub_norm", spec, h, b),
        *_linear("mlp.gate_proj", "gate_proj", h, i, block=b, role="mlp"),
        *_linear("mlp.up_proj", "up_proj", h, i, block=b, role="mlp"),
        *_norm("mlp.ffn_sub_norm", spec, i, b),
        *_linear("mlp.down_proj", "down_proj", i, h, block=b, role="mlp"),
        *_norm("norm", spec, h, ""),
        *untied_head(spec),
    ]
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """Llama's layer with the sub-norms: each keeps its fp32 upcast (not the 16-bit tensor it
    normalises), and its output is what o_proj / down_proj read; relu² keeps relu's output
    (the square reads the same storage) and the square's output for the product."""
    h, q, kv, i, a = spec.hidden, spec.q_width, spec.kv_width, spec.intermediate, "self_attn."
    return [
        *_norm_saved(spec, "input_layernorm", h),
        linear_input(
            "q/k/v projection input (normed hidden)", h, a + "q_proj", a + "k_proj", a + "v_proj"
        ),
        # eager attention's contiguous output goes to the sub-norm, not to a linear
        *_attention_core(spec, q, kv, kv, a + "attn_sub_norm"),
        *_norm_saved(spec, "attn_sub_norm", q),
        linear_input("o_proj input (sub-norm output)", q, a + "o_proj"),
        *_norm_saved(spec, "post_attention_layernorm", h),
        linear_input("gate/up input (normed hidden)", h, "mlp.gate_proj", "mlp.up_proj"),
        Saved("relu output (relu and the square keep it)", i, "compute"),
        Saved("relu² output (gate × up keeps it)", i, "compute"),
        Saved("up projection output", i, "compute"),
        *_norm_saved(spec, "ffn_sub_norm", i),
        linear_input("down_proj input (sub-norm output)", i, "mlp.down_proj"),
    ]
