"""A model's fields checked before any arithmetic: types, bounds and consistency (issue 14).

``check_config_values`` runs on a config.json dict before a family parser reads it: every field
fitplan reads as a boolean is a JSON boolean (``"false"`` would otherwise be read as true), every
field it reads as a number is a finite number. ``check_spec`` runs on every :class:`ModelSpec`
(config.json, catalog, raw flags alike): sizes within :mod:`constraints.limits`, heads that
divide as the attention needs, experts that exist.
"""

from __future__ import annotations

import math
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec

#: config.json fields the family parsers read as booleans
BOOL_KEYS = (
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "bias",
    "enable_bias",
    "multi_query",
    "new_decoder_architecture",
    "parallel_attn",
    "alibi",
    "do_layer_norm_before",
    "_remove_final_layer_norm",
    "use_sliding_window",
    "is_gated_act",
    "add_cross_attention",
    "qkv_bias",
    "use_qk_norm",
    "use_bias",
    "qk_layernorm",
    "use_parallel_residual",
)
#: config.json fields read as probabilities
DROPOUT_KEYS = (
    "attention_dropout",
    "dropout",
    "dropout_rate",
    "resid_pdrop",
    "attn_pdrop",
    "hidden_dropout",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "embd_pdrop",
    "embed_dropout",
    "embedding_dropout",
    "resid_dropout",
    "residual_dropout",
)
#: config.json fields read as whole numbers (sizes, counts)
INT_KEYS = (
    "hidden_size",
    "n_embd",
    "d_model",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "d_ff",
    "ffn_hidden_size",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_decoder_layers",
    "num_attention_heads",
    "n_head",
    "num_heads",
    "num_key_value_heads",
    "num_kv_heads",
    "head_dim",
    "d_kv",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "sliding_window",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "word_embed_proj_dim",
    "type_vocab_size",
    "relative_attention_num_buckets",
    "num_ln_in_parallel_attn",
)
#: families whose layers route tokens to experts: zero experts is not that model
MOE_FAMILIES = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "glm4_moe",
    "minimax_m2",
    "gpt_oss",
)


def check_config_values(cfg: dict[str, Any], where: str) -> None:
    """Types of the fields fitplan reads, before any parser reads them (null = absent)."""
    for key in BOOL_KEYS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise FitplanError(
                f"{where}: {key} must be true or false, got {excerpt(value)}",
                "JSON booleans are written without quotes",
            )
    for key in DROPOUT_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        x = L.finite_number(value, key, where)
        if not 0 <= x < 1:
            raise FitplanError(f"{where}: {key} must be a probability in [0, 1), got {x:g}")
    for key in SOFTCAP_KEYS:
        value = cfg.get(key)
        if value is not None and (L.finite_number(value, key, where) < 0):
            raise FitplanError(f"{where}: {key} must not be negative, got {excerpt(value)}")
    for key in INT_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        for item in value if key in PER_LAYER_KEYS and isinstance(value, list) else [value]:
            _check_whole(key, item, where)
    for key in (
        "hidden_act",
        "hidden_activation",
        "activation_function",
        "feed_forward_proj",
        "dense_act_fn",
    ):
        value = cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise FitplanError(f"{where}: {key} must be a name, got {excerpt(value)}")


#: tanh soft-caps (Gemma 2 / 3n / 4, nanochat): a non-negative number, or null for none
SOFTCAP_KEYS = ("final_logit_softcapping", "attn_logit_softcapping")
#: whole-number keys a config may give per layer (Gemma 3n's intermediate_size)
PER_LAYER_KEYS = frozenset({"intermediate_size"})


def _check_whole(key: str, value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FitplanError(f"{where}: {key} must be a whole number, got {excerpt(value)}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise FitplanError(f"{where}: {key} must be a whole number, got {excerpt(value)}")
    if value < 0:
        raise FitplanError(f"{where}: {key} must not be negative, got {excerpt(value)}")
    if value > 1 << 40:
        raise FitplanError(f"{where}: {key} {excerpt(value)} is absurdly large")


def _bounded(where: str, name: str, value: int | None, bound: L.Bound) -> None:
    if value is not None:
        bound.check(name, value, where)


def check_spec(spec: ModelSpec, where: str | None = None) -> ModelSpec:
    """Refuse a spec no real model has, or one the arithmetic cannot treat; return it if fine."""
    w = where or spec.name
    _bounded(w, "layers", spec.layers, L.LAYERS)
    _bounded(w, "encoder layers", spec.encoder_layers or None, L.LAYERS)
    _bounded(w, "hidden size", spec.hidden, L.HIDDEN)
    _bounded(w, "intermediate size", spec.intermediate, L.INTERMEDIATE)
    _bounded(w, "expert intermediate size", spec.moe_intermediate, L.INTERMEDIATE)
    _bounded(w, "shared expert intermediate size", spec.shared_expert_intermediate, L.INTERMEDIATE)
    _bounded(w, "attention heads", spec.heads, L.HEADS)
    _bounded(w, "key/value heads", spec.kv_heads, L.HEADS)
    _bounded(w, "head dim", spec.head_dim, L.HEAD_DIM)
    _bounded(w, "vocabulary", spec.vocab, L.VOCAB)
    _bounded(w, "context", spec.max_position, L.CONTEXT)
    _bounded(w, "sliding window", spec.sliding_window, L.CONTEXT)
    _bounded(w, "learned positions", spec.learned_positions or None, L.CONTEXT)
    _bounded(w, "token types", spec.token_types or None, L.VOCAB)
    _bounded(w, "relative attention buckets", spec.relative_attention_buckets or None, L.VOCAB)
    _bounded(w, "experts", spec.num_experts, L.EXPERTS)
    _bounded(w, "shared experts", spec.shared_experts, L.EXPERTS)
    for name in ("q_lora_rank", "kv_lora_rank", "embed_proj_dim"):
        _bounded(w, name, getattr(spec, name) or None, L.HIDDEN)
    for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        _bounded(w, name, getattr(spec, name) or None, L.HEAD_DIM)
    for name in ("hidden_dropout", "attention_dropout"):
        p = getattr(spec, name)
        if not (math.isfinite(p) and 0 <= p < 1):
            raise FitplanError(f"{w}: {name} must be a probability in [0, 1), got {p}")
    if spec.heads % spec.kv_heads:
        raise FitplanError(
            f"{w}: {spec.heads} attention heads are not a multiple of {spec.kv_heads} key/value heads",
            "grouped-query attention shares each key/value head among a whole number of heads",
        )
    from constraints.hf_config_aliases import DENSE_BUILT_AS

    moe_family = spec.family in MOE_FAMILIES and spec.config_type not in DENSE_BUILT_AS
    if moe_family or spec.num_experts or spec.experts_per_token:
        _check_experts(spec, w)
    if spec.sliding_window is not None and spec.sliding_window < 1:
        raise FitplanError(f"{w}: sliding_window must be positive, got {spec.sliding_window}")
    if spec.raw_params is None:
        from constraints.params import inventory

        L.PARAMS.check("parameters", float(inventory(spec).total), w)
    return spec


def _check_experts(spec: ModelSpec, w: str) -> None:
    if spec.num_experts < 1:
        raise FitplanError(
            f"{w}: a mixture of experts ({spec.family}) with {spec.num_experts} experts",
            "an MoE model has at least one expert per MoE layer",
        )
    if not 1 <= spec.experts_per_token <= spec.num_experts:
        raise FitplanError(
            f"{w}: {spec.experts_per_token} experts per token with {spec.num_experts} experts",
            "experts per token (num_experts_per_tok) is between 1 and the number of experts",
        )
    if spec.moe_every < 1 or spec.moe_every > spec.layers:
        raise FitplanError(
            f"{w}: an MoE layer every {spec.moe_every} layers with {spec.layers} layers",
            "the MoE step (decoder_sparse_step / moe_layer_freq) is between 1 and the layers",
        )
    if spec.first_dense_layers > spec.layers:
        raise FitplanError(
            f"{w}: {spec.first_dense_layers} dense first layers of only {spec.layers}",
            "first_k_dense_replace is at most num_hidden_layers",
        )
    if spec.moe_intermediate < 1:
        raise FitplanError(f"{w}: the experts' intermediate size must be positive")
