"""GPT-BigCode (StarCoder 1, SantaCoder, WizardCoder, OctoCoder; ``model_type`` gpt_bigcode) as
transformers 5.25 builds it (modeling_gpt_bigcode.py): GPT-2's block — LayerNorms with bias,
learned positions, ``attn.c_attn`` fused q/k/v, ``attn.c_proj``, ``mlp.c_fc`` → GELU (tanh) →
``mlp.c_proj``, every linear with a bias, dropout on the embeddings, the attention probabilities
and each residual branch — with multi-query attention by default (``multi_query``: k and v one
head wide, so ``c_attn`` is hidden + 2 × head_dim wide) and an fp32 softmax in eager attention.
The parameters and saved tensors are GPT-2's, read at the k/v width.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.model_spec import ModelSpec
from constraints.param_families import _gpt2 as inventory
from constraints.saved_layers import _gpt2_layer as layer

__all__ = ["inventory", "layer", "read"]


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """GPTBigCodeConfig's fields (configuration_gpt_bigcode.py defaults where a key is absent)."""
    if cfg.get("add_cross_attention"):
        from constraints.errors import FitplanError

        raise FitplanError(
            f"{where}: add_cross_attention is true: cross-attention layers are not modelled",
            "set it false for a causal language model, or pass raw numbers (--params …)",
        )
    hidden = _positive(
        "n_embd", _int(cfg, "n_embd", "hidden_size", where=where, default=768), where
    )
    heads = _positive(
        "n_head", _int(cfg, "n_head", "num_attention_heads", where=where, default=12), where
    )
    positions = _int(cfg, "n_positions", "max_position_embeddings", where=where, default=1024)
    inner = cfg.get("n_inner")
    return ModelSpec(
        **common,
        family="gpt_bigcode",
        hidden=hidden,
        layers=_positive(
            "n_layer", _int(cfg, "n_layer", "num_hidden_layers", where=where, default=12), where
        ),
        heads=heads,
        kv_heads=1 if cfg.get("multi_query", True) else heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "n_inner", where=where) if inner else 4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=50257), where),
        max_position=positions,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        learned_positions=positions,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=2,
        gated_mlp=False,
        activation=str(cfg.get("activation_function", "gelu_pytorch_tanh")),
        fused_qkv=True,
        hidden_dropout=float(cfg.get("resid_pdrop", 0.1) or 0.0),
        embedding_dropout=float(cfg.get("embd_pdrop", 0.1) or 0.0),
        attention_dropout=float(cfg.get("attn_pdrop", 0.1) or 0.0),
    )
