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

from constraints.model_spec import ModelSpec
from constraints.param_families import _gpt2 as inventory
from constraints.saved_layers import _gpt2_layer as layer

__all__ = ["inventory", "layer", "read"]

#: GPTBigCodeConfig's defaults (configuration_gpt_bigcode.py) for the keys GPT-2's reader needs,
#: under each key's names (the config class maps hidden_size to n_embd, …)
DEFAULTS = {
    ("n_embd", "hidden_size"): 768,
    ("n_layer", "num_hidden_layers"): 12,
    ("n_head", "num_attention_heads"): 12,
    ("n_positions", "max_position_embeddings"): 1024,
    ("vocab_size",): 50257,
    ("activation_function",): "gelu_pytorch_tanh",
}


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """GPT-2's reading of the config (its class defaults where a key is absent), then what
    GPT-BigCode changes: multi-query k and v, dropout on the embeddings."""
    from constraints.hf_config import _gpt2 as read_gpt2

    absent = {keys[0]: v for keys, v in DEFAULTS.items() if not any(k in cfg for k in keys)}
    spec = read_gpt2({**absent, **cfg}, common, where)
    return spec.model_copy(
        update={
            "family": "gpt_bigcode",
            "kv_heads": 1 if cfg.get("multi_query", True) else spec.heads,
            "embedding_dropout": float(cfg.get("embd_pdrop", 0.1) or 0.0),
        }
    )
