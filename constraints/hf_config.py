"""Hugging Face ``config.json`` → :class:`ModelSpec`, one parser per family.

The catalog (``data/models.json``) stores each model as the real ``config.json`` fields of its Hub
repo, so the catalog and a user's file go through the same parser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.model_spec import LLAMA_LIKE, SUPPORTED_TYPES, ModelSpec


def _req(cfg: dict[str, Any], *keys: str, where: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise FitplanError(
        f"{where}: config.json has no {' / '.join(keys)}",
        "is this a complete Hugging Face config.json? pass raw numbers (--params …) otherwise",
    )


def _int(cfg: dict[str, Any], *keys: str, where: str, default: int | None = None) -> int:
    try:
        value = _req(cfg, *keys, where=where)
    except FitplanError:
        if default is None:
            raise
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise FitplanError(f"{where}: {keys[0]} must be an integer, got {value!r}")
    if value < 0:
        raise FitplanError(f"{where}: {keys[0]} must not be negative, got {value}")
    return int(value)


def _positive(name: str, value: int, where: str) -> int:
    if value <= 0:
        raise FitplanError(f"{where}: {name} must be positive, got {value}")
    return value


def spec_from_hf_config(
    cfg: dict[str, Any],
    *,
    id: str,
    name: str | None = None,
    source: str = "",
    published_total_params: int | None = None,
    notes: str = "",
) -> ModelSpec:
    """Normalise a Hugging Face ``config.json`` dict. Refuses what it cannot model, clearly."""
    where = name or id
    if not isinstance(cfg, dict):
        raise FitplanError(f"{where}: config.json must hold a JSON object")
    if "text_config" in cfg and "hidden_size" not in cfg:
        raise FitplanError(
            f"{where}: this is a multimodal config (it nests text_config)",
            "pass the text model's config.json, or raw numbers",
        )
    model_type = str(cfg.get("model_type", "")).lower()
    caveats = ""
    if not model_type:
        if "n_embd" in cfg:
            model_type = "gpt2"
        elif "hidden_size" in cfg and "num_hidden_layers" in cfg:
            model_type = "llama"
            caveats = "config.json has no model_type: read as Llama-style."
        else:
            raise FitplanError(
                f"{where}: config.json has no model_type",
                'add "model_type" or pass raw numbers (--params, --layers, --hidden, --vocab)',
            )
    common: dict[str, Any] = {
        "caveats": caveats,
        "id": id,
        "name": name or id,
        "source": source,
        "published_total_params": published_total_params,
        "notes": notes,
    }
    if model_type == "gpt2":
        return _gpt2(cfg, common, where)
    if model_type == "opt":
        return _opt(cfg, common, where)
    if model_type == "falcon":
        return _falcon(cfg, common, where)
    if model_type in ("t5", "mt5"):
        return _t5(cfg, common, where, model_type)
    if model_type == "bert":
        return _bert(cfg, common, where)
    if model_type in LLAMA_LIKE:
        return _llama_like(cfg, common, where, model_type)
    if all(k in cfg for k in ("hidden_size", "intermediate_size", "num_hidden_layers")) and (
        "num_attention_heads" in cfg
    ):
        if any(k in cfg for k in ("num_local_experts", "num_experts", "n_routed_experts")):
            raise FitplanError(
                f"{where}: model_type '{model_type}' is a mixture of experts fitplan does not model",
                f"supported: {', '.join(SUPPORTED_TYPES)}; or pass raw numbers",
            )
        common["caveats"] = (
            f"model_type '{model_type}' is not modelled exactly: read as Llama-style "
            "(RMSNorm, gated MLP, rotary)."
        )
        return _llama_like(cfg, common, where, "llama", family_name=model_type)
    raise FitplanError(
        f"{where}: model_type '{model_type}' is not supported",
        f"supported: {', '.join(SUPPORTED_TYPES)}; or pass raw numbers (--params …)",
    )


def _gpt2(cfg: dict[str, Any], common: dict[str, Any], where: str) -> ModelSpec:
    hidden = _positive("n_embd", _int(cfg, "n_embd", "hidden_size", where=where), where)
    heads = _positive("n_head", _int(cfg, "n_head", "num_attention_heads", where=where), where)
    inner = cfg.get("n_inner")
    return ModelSpec(
        **common,
        family="gpt2",
        hidden=hidden,
        layers=_positive("n_layer", _int(cfg, "n_layer", "num_hidden_layers", where=where), where),
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=int(inner) if inner else 4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where), where),
        max_position=_int(cfg, "n_positions", "max_position_embeddings", where=where, default=1024),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        learned_positions=_int(
            cfg, "n_positions", "max_position_embeddings", where=where, default=1024
        ),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=2,
        gated_mlp=False,
        activation=str(cfg.get("activation_function", "gelu_new")),
        fused_qkv=True,
        hidden_dropout=float(cfg.get("resid_pdrop", 0.1)),
        attention_dropout=float(cfg.get("attn_pdrop", 0.1)),
    )


def _opt(cfg: dict[str, Any], common: dict[str, Any], where: str) -> ModelSpec:
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where), where)
    heads = _positive("num_attention_heads", _int(cfg, "num_attention_heads", where=where), where)
    max_pos = _int(cfg, "max_position_embeddings", where=where, default=2048)
    proj = _int(cfg, "word_embed_proj_dim", where=where, default=hidden)
    bias = bool(cfg.get("enable_bias", True))
    final = bool(cfg.get("do_layer_norm_before", True)) and not cfg.get("_remove_final_layer_norm")
    return ModelSpec(
        **common,
        family="opt",
        hidden=hidden,
        layers=_positive("num_hidden_layers", _int(cfg, "num_hidden_layers", where=where), where),
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=_int(cfg, "ffn_dim", where=where, default=4 * hidden),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=max_pos,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        learned_positions=max_pos + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        norm="layernorm",
        norms_per_layer=2,
        final_norm=final,
        post_norm=not bool(cfg.get("do_layer_norm_before", True)),
        gated_mlp=False,
        activation=str(cfg.get("activation_function", "relu")),
        hidden_dropout=float(cfg.get("dropout", 0.1)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0)),
        embed_proj_dim=proj if proj != hidden else 0,
    )


def _falcon(cfg: dict[str, Any], common: dict[str, Any], where: str) -> ModelSpec:
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", "n_head", where=where), where
    )
    if cfg.get("alibi"):
        raise FitplanError(f"{where}: Falcon with alibi is not modelled", "pass raw numbers")
    new_arch = bool(cfg.get("new_decoder_architecture", False))
    if new_arch:
        kv = _int(cfg, "num_kv_heads", where=where, default=heads)
    elif cfg.get("multi_query", True):
        kv = 1
    else:
        kv = heads
    bias = bool(cfg.get("bias", False))
    return ModelSpec(
        **common,
        family="falcon",
        hidden=hidden,
        layers=_positive(
            "num_hidden_layers", _int(cfg, "num_hidden_layers", "n_layer", where=where), where
        ),
        heads=heads,
        kv_heads=kv,
        head_dim=hidden // heads,
        intermediate=_int(cfg, "ffn_hidden_size", where=where, default=4 * hidden),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        norm="layernorm",
        norms_per_layer=2 if new_arch else 1,
        gated_mlp=False,
        activation=str(cfg.get("activation", "gelu")),
        parallel_attn=bool(cfg.get("parallel_attn", True)),
        fused_qkv=True,
        hidden_dropout=float(cfg.get("hidden_dropout", 0.0)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0)),
    )


def _t5(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    d_model = _positive("d_model", _int(cfg, "d_model", where=where), where)
    heads = _positive("num_heads", _int(cfg, "num_heads", where=where), where)
    enc = _positive("num_layers", _int(cfg, "num_layers", where=where), where)
    dec = _int(cfg, "num_decoder_layers", where=where, default=enc)
    proj = str(cfg.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    return ModelSpec(
        **common,
        family=model_type,
        arch="encoder-decoder",
        hidden=d_model,
        layers=_positive("num_decoder_layers", dec, where),
        encoder_layers=enc,
        heads=heads,
        kv_heads=heads,
        head_dim=_int(cfg, "d_kv", where=where, default=d_model // heads),
        intermediate=_int(cfg, "d_ff", where=where),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=None,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        norm="rmsnorm",
        norms_per_layer=2,
        gated_mlp=gated,
        activation=proj.removeprefix("gated-"),
        hidden_dropout=float(cfg.get("dropout_rate", 0.1)),
        attention_dropout=float(cfg.get("dropout_rate", 0.1)),
        relative_attention_buckets=_int(
            cfg, "relative_attention_num_buckets", where=where, default=32
        ),
    )


def _bert(cfg: dict[str, Any], common: dict[str, Any], where: str) -> ModelSpec:
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where), where)
    heads = _positive("num_attention_heads", _int(cfg, "num_attention_heads", where=where), where)
    max_pos = _int(cfg, "max_position_embeddings", where=where, default=512)
    return ModelSpec(
        **common,
        family="bert",
        arch="encoder",
        hidden=hidden,
        layers=_positive("num_hidden_layers", _int(cfg, "num_hidden_layers", where=where), where),
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=_int(cfg, "intermediate_size", where=where),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=max_pos,
        tie_embeddings=True,
        learned_positions=max_pos,
        token_types=_int(cfg, "type_vocab_size", where=where, default=2),
        pooler=True,
        embed_norm=True,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=2,
        final_norm=False,
        post_norm=True,
        gated_mlp=False,
        activation=str(cfg.get("hidden_act", "gelu")),
        hidden_dropout=float(cfg.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(cfg.get("attention_probs_dropout_prob", 0.1)),
    )


_TIE_DEFAULT = {"gemma": True, "gemma2": True}


def _llama_like(
    cfg: dict[str, Any],
    common: dict[str, Any],
    where: str,
    model_type: str,
    family_name: str | None = None,
) -> ModelSpec:
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where), where)
    heads = _positive("num_attention_heads", _int(cfg, "num_attention_heads", where=where), where)
    kv = cfg.get("num_key_value_heads")
    kv_heads = (
        heads
        if kv is None
        else _positive("num_key_value_heads", _int(cfg, "num_key_value_heads", where=where), where)
    )
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = cfg.get("head_dim") or hidden // heads
    if hidden % heads and not cfg.get("head_dim"):
        raise FitplanError(
            f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}"
        )
    layers = _positive("num_hidden_layers", _int(cfg, "num_hidden_layers", where=where), where)
    kwargs: dict[str, Any] = {
        "family": family_name or model_type,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": int(head_dim),
        "intermediate": _int(cfg, "intermediate_size", where=where),
        "vocab": _positive("vocab_size", _int(cfg, "vocab_size", where=where), where),
        "max_position": cfg.get("max_position_embeddings"),
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", _TIE_DEFAULT.get(model_type, False))),
        "qkv_bias": bool(cfg.get("attention_bias", False)),
        "o_bias": bool(cfg.get("attention_bias", False)),
        "mlp_bias": bool(cfg.get("mlp_bias", False)),
        "activation": str(cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
        "sliding_window": cfg.get("sliding_window"),
    }
    if model_type in ("qwen2", "qwen2_moe"):
        kwargs["qkv_bias"] = True  # Qwen2 always has q/k/v bias and none on o_proj
        kwargs["o_bias"] = False
    if model_type in ("gemma", "gemma2"):
        kwargs["activation"] = str(
            cfg.get("hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
        )
    if model_type == "gemma2":
        kwargs["norms_per_layer"] = 4
    if model_type == "phi3":
        kwargs["fused_qkv"] = True
        kwargs["fused_gate_up"] = True
    if model_type == "olmo":
        kwargs["norm"] = "nonparam"
    if model_type == "olmo2":
        kwargs["qk_norm"] = "full"
        kwargs["post_norm"] = True
    if model_type in ("qwen3", "qwen3_moe"):
        kwargs["qk_norm"] = "head"
    if model_type == "mixtral":
        kwargs["num_experts"] = _int(cfg, "num_local_experts", where=where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where, default=2)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
    if model_type in ("qwen3_moe", "qwen2_moe"):
        kwargs["num_experts"] = _int(cfg, "num_experts", where=where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
        kwargs["moe_every"] = _int(cfg, "decoder_sparse_step", where=where, default=1)
        if cfg.get("mlp_only_layers"):
            raise FitplanError(f"{where}: mlp_only_layers is not modelled", "pass raw numbers")
        if model_type == "qwen2_moe":
            kwargs["shared_experts"] = 1
            kwargs["shared_expert_intermediate"] = _int(
                cfg, "shared_expert_intermediate_size", where=where
            )
            kwargs["shared_expert_gate"] = True
    if model_type == "deepseek_v3":
        kwargs["num_experts"] = _int(cfg, "n_routed_experts", where=where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
        kwargs["shared_experts"] = _int(cfg, "n_shared_experts", where=where, default=0)
        kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"] * kwargs["shared_experts"]
        kwargs["first_dense_layers"] = _int(cfg, "first_k_dense_replace", where=where, default=0)
        kwargs["moe_every"] = _int(cfg, "moe_layer_freq", where=where, default=1)
        kwargs["q_lora_rank"] = _int(cfg, "q_lora_rank", where=where, default=0)
        kwargs["kv_lora_rank"] = _int(cfg, "kv_lora_rank", where=where)
        kwargs["qk_nope_head_dim"] = _int(cfg, "qk_nope_head_dim", where=where)
        kwargs["qk_rope_head_dim"] = _int(cfg, "qk_rope_head_dim", where=where)
        kwargs["v_head_dim"] = _int(cfg, "v_head_dim", where=where)
        kwargs["head_dim"] = kwargs["qk_nope_head_dim"] + kwargs["qk_rope_head_dim"]
        kwargs["kv_heads"] = heads
    return ModelSpec(**common, **kwargs)


def load_config_file(path: str | Path) -> ModelSpec:
    """Read a ``config.json`` from disk; every failure is one clear FitplanError."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FitplanError(
            f"no such file: {p}", "give a catalog name (fitplan models) or a path to config.json"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise FitplanError(f"cannot read {p}: {err.__class__.__name__}: {err}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise FitplanError(
            f"{p} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})",
            "pass a Hugging Face config.json",
        ) from None
    stem = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return spec_from_hf_config(cfg, id=stem, name=str(p))
