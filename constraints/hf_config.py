"""Hugging Face ``config.json`` → :class:`ModelSpec`, one parser per family.

The catalog (``data/models.json``) stores each model as the real ``config.json`` fields of its Hub
repo, so the catalog and a user's file go through the same parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.family_modules import family_module
from constraints.hf_config_aliases import read_built_as
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import probability as _probability
from constraints.hf_config_llama import llama_like as _llama_like
from constraints.hf_config_types import read_model_type
from constraints.limits import (
    NONFINITE_CONFIG_KEYS,
    excerpt,
    read_text,
    shown_path,
    strict_json,
)
from constraints.model_spec import LLAMA_LIKE, ModelSpec


def spec_from_hf_config(
    cfg: dict[str, Any],
    *,
    id: str,
    name: str | None = None,
    source: str = "",
    published_total_params: int | None = None,
    notes: str = "",
    family: str | None = None,
) -> ModelSpec:
    """Normalise a Hugging Face ``config.json`` dict. Refuses what it cannot model, clearly.

    ``family`` (the ``--family`` flag) reads a config whose ``model_type`` is missing or unknown
    as that supported family; without it such a config is refused, never guessed, unless
    transformers itself builds its type with a supported family's class (hf_config_aliases)."""
    from constraints.spec_checks import check_config_values, check_spec

    where = name or id
    if not isinstance(cfg, dict):
        raise FitplanError(f"{where}: config.json must hold a JSON object")
    own_type = cfg.get("model_type")
    cfg, built_as = read_built_as(cfg)
    model_type, caveats = read_model_type(cfg, where, family)
    own = own_type.strip().lower() if isinstance(own_type, str) else ""
    check_config_values(cfg, where)
    common: dict[str, Any] = {
        "caveats": built_as or caveats,
        "id": id,
        "name": name or id,
        "source": source,
        "published_total_params": published_total_params,
        "notes": notes,
        "config_type": own if own != model_type else "",
    }
    spec = _parse(cfg, where, common, model_type)
    return check_spec(spec, where)


def _parse(
    cfg: dict[str, Any],
    where: str,
    common: dict[str, Any],
    model_type: str,
) -> ModelSpec:
    if model_type == "gpt2":
        return _gpt2(cfg, common, where)
    if model_type == "opt":
        return _opt(cfg, common, where)
    if model_type == "falcon":
        return _falcon(cfg, common, where)
    module = family_module(model_type)
    if module is not None:
        return module.read(cfg, common, where, model_type)
    if model_type in ("t5", "mt5"):
        return _t5(cfg, common, where, model_type)
    if model_type == "bert":
        return _bert(cfg, common, where)
    if model_type in LLAMA_LIKE:
        return _llama_like(cfg, common, where, model_type)
    raise FitplanError(f"{where}: model_type {excerpt(model_type)} is not supported")


def _gpt2(cfg: dict[str, Any], common: dict[str, Any], where: str) -> ModelSpec:
    if cfg.get("add_cross_attention"):  # modeling_gpt2.py GPT2Block adds crossattention + a norm
        raise FitplanError(
            f"{where}: add_cross_attention is true: GPT-2 with cross-attention layers (the decoder "
            "of an encoder-decoder) is not modelled",
            "set it false for a causal language model, or pass raw numbers (--params …)",
        )
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
        head_dim=_per_head(hidden, heads, where),
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
        hidden_dropout=_probability(cfg, "resid_pdrop", 0.1),
        attention_dropout=_probability(cfg, "attn_pdrop", 0.1),
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
        head_dim=_per_head(hidden, heads, where),
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
        hidden_dropout=_probability(cfg, "dropout", 0.1),
        attention_dropout=_probability(cfg, "attention_dropout", 0.0),
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
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "ffn_hidden_size", where=where, default=4 * hidden),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        norm="layernorm",
        norms_per_layer=_falcon_norms(cfg, new_arch),
        gated_mlp=False,
        activation=str(cfg.get("activation", "gelu")),
        parallel_attn=bool(cfg.get("parallel_attn", True)),
        fused_qkv=True,
        hidden_dropout=_probability(cfg, "hidden_dropout", 0.0),
        attention_dropout=_probability(cfg, "attention_dropout", 0.0),
    )


def _falcon_norms(cfg: dict[str, Any], new_arch: bool) -> int:
    """LayerNorms per decoder layer as FalconDecoderLayer builds them (modeling_falcon.py, 5.24):
    sequential attention/MLP has input + post-attention norms; parallel has ln_attn + ln_mlp when
    num_ln_in_parallel_attn is 2 (its default under the new architecture), else one
    input_layernorm (Falcon-11B: new architecture, num_ln_in_parallel_attn 1)."""
    if not cfg.get("parallel_attn", True):
        return 2
    ln = cfg.get("num_ln_in_parallel_attn")
    if ln is None:
        ln = 2 if new_arch else 1
    return 2 if ln == 2 else 1


def _t5(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    d_model = _positive("d_model", _int(cfg, "d_model", where=where), where)
    heads = _positive("num_heads", _int(cfg, "num_heads", where=where), where)
    enc = _positive("num_layers", _int(cfg, "num_layers", where=where), where)
    dec = _int(cfg, "num_decoder_layers", where=where, default=enc)
    proj = str(cfg.get("feed_forward_proj", "relu"))
    # modeling_t5.py (5.24) picks the gated feed-forward on config.is_gated_act and the
    # activation on config.dense_act_fn; T5Config derives both from feed_forward_proj, and a
    # saved config.json keeps both, which win when they are given (set after __post_init__)
    gated = cfg.get("is_gated_act")
    if gated is None:
        gated = proj.startswith("gated-")
    activation = cfg.get("dense_act_fn") or proj.removeprefix("gated-")
    return ModelSpec(
        **common,
        family=model_type,
        arch="encoder-decoder",
        hidden=d_model,
        layers=_positive("num_decoder_layers", dec, where),
        encoder_layers=enc,
        heads=heads,
        kv_heads=heads,
        head_dim=_int(cfg, "d_kv", where=where, default=0) or _per_head(d_model, heads, where),
        intermediate=_int(cfg, "d_ff", where=where),
        vocab=_int(cfg, "vocab_size", where=where),
        max_position=None,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        norm="rmsnorm",
        norms_per_layer=2,
        gated_mlp=gated,
        activation=str(activation),
        hidden_dropout=_probability(cfg, "dropout_rate", 0.1),
        attention_dropout=_probability(cfg, "dropout_rate", 0.1),
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
        head_dim=_per_head(hidden, heads, where),
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
        hidden_dropout=_probability(cfg, "hidden_dropout_prob", 0.1),
        attention_dropout=_probability(cfg, "attention_probs_dropout_prob", 0.1),
    )


def load_config_file(path: str | Path, family: str | None = None) -> ModelSpec:
    """Read a ``config.json`` from disk; every failure is one clear FitplanError."""
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
    except (OSError, ValueError) as err:
        raise FitplanError(f"cannot read {excerpt(str(p))}: {err}") from None
    if not p.exists() and not p.is_symlink():
        raise FitplanError(
            f"no such file: {shown_path(p)}",
            "give a catalog name (fitplan models) or a path to config.json",
        )
    text = read_text(p, "config.json")
    try:
        cfg = strict_json(text, shown_path(p), NONFINITE_CONFIG_KEYS)
    except FitplanError:
        _refuse_type_first(text, str(p), family)
        raise
    return spec_from_hf_config(cfg, id=config_id(p), name=str(p), family=family)


def config_id(path: Path) -> str:
    """A config file's model id: its folder's name for ``…/NAME/config.json``, else its stem."""
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _refuse_type_first(text: str, where: str, family: str | None) -> None:
    """A file that is not standard JSON but names a type fitplan does not model is refused for
    its type: ``save_pretrained`` writes Python's ``Infinity`` (Mamba-2's, Bamba's, Falcon-H1's
    ``time_step_limit`` default is ``(0.0, inf)``), and that is not what is wrong with it."""
    import json

    try:
        loose = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(loose, dict):
        read_model_type(loose, where, family)
