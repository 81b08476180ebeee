"""Model specs: from the built-in catalog, from a Hugging Face ``config.json``, or from raw numbers.

A :class:`ModelSpec` holds what decides parameter count, activation memory and FLOPs, in one
normalised vocabulary (``hidden``, ``layers``, ``kv_heads`` …) whatever the config called it
(GPT-2's ``n_embd``, T5's ``d_model``, Falcon's ``n_head`` …). The catalog
(``data/models.json``) stores each model as the real ``config.json`` fields of its Hub repo, so
the catalog and a user's file go through the same parser.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from constraints.errors import FitplanError, unknown_name

DATA_DIR = Path(__file__).parent / "data"

Arch = Literal["decoder", "encoder", "encoder-decoder", "raw"]
Norm = Literal["rmsnorm", "layernorm", "nonparam"]

#: HF ``model_type`` values whose layer structure fitplan models exactly.
LLAMA_LIKE = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "phi3",
    "olmo",
    "olmo2",
    "deepseek_v3",
}
SUPPORTED_TYPES = sorted(LLAMA_LIKE | {"gpt2", "opt", "falcon", "t5", "mt5", "bert"})


class ModelSpec(BaseModel):
    """A transformer, described by the numbers that decide its memory and compute."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    family: str = Field(description="HF model_type, or 'raw'")
    arch: Arch = "decoder"
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0, description="decoder layers (all layers for decoder-only / encoder)")
    encoder_layers: int = Field(default=0, ge=0, description="encoder layers of an encoder-decoder")
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate: int = Field(ge=0)
    vocab: int = Field(gt=0)
    max_position: int | None = None
    tie_embeddings: bool = False
    learned_positions: int = Field(default=0, ge=0, description="rows of a learned position table")
    token_types: int = 0
    pooler: bool = False
    embed_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm: Norm = "rmsnorm"
    norms_per_layer: int = 2
    final_norm: bool = True
    qk_norm: Literal["none", "head", "full"] = "none"
    gated_mlp: bool = True
    activation: str = "silu"
    parallel_attn: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    post_norm: bool = False
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    embed_proj_dim: int = 0
    relative_attention_buckets: int = 0
    # mixture of experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    shared_expert_intermediate: int = 0
    shared_expert_gate: bool = False
    first_dense_layers: int = 0
    moe_every: int = 1
    router_bias_param: bool = False
    # multi-head latent attention (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    # raw numbers (the source documents' arithmetic): the total is given, not derived
    raw_params: int | None = None
    raw_trainable_params: int | None = None
    source: str = ""
    published_total_params: int | None = None
    notes: str = ""
    caveats: str = Field(default="", description="what fitplan assumed when reading the config")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_width(self) -> int:
        """Width of the query projection output (heads × head_dim), elements per token."""
        if self.is_mla:
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of one of K or V (kv_heads × head_dim), elements per token."""
        return self.kv_heads * self.head_dim

    @property
    def total_layers(self) -> int:
        return self.layers + self.encoder_layers

    def moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` has routed experts (DeepSeek dense-first, Qwen sparse step)."""
        if not self.is_moe:
            return False
        return index >= self.first_dense_layers and (index + 1) % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.moe_layer(i) for i in range(self.layers))


# --------------------------------------------------------------------------------------------
# Hugging Face config.json
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------


@cache
def _catalog_entries() -> list[dict[str, Any]]:
    text = (DATA_DIR / "models.json").read_text(encoding="utf-8")
    entries: list[dict[str, Any]] = json.loads(text)
    return entries


@cache
def _catalog_index() -> dict[str, int]:
    index: dict[str, int] = {}
    for i, entry in enumerate(_catalog_entries()):
        for key in [
            entry["id"],
            entry.get("name", ""),
            entry.get("hf_repo", ""),
            *entry.get("aliases", []),
        ]:
            if key:
                index[key.lower()] = i
    return index


def catalog_ids() -> list[str]:
    return [e["id"] for e in _catalog_entries()]


@cache
def catalog_model(model_id: str) -> ModelSpec:
    key = model_id.strip().lower()
    if key not in _catalog_index():
        raise unknown_name("model", model_id, catalog_ids(), "fitplan models")
    entry = _catalog_entries()[_catalog_index()[key]]
    return spec_from_hf_config(
        entry["config"],
        id=entry["id"],
        name=entry.get("name", entry["id"]),
        source=entry.get("source", ""),
        published_total_params=entry.get("published_total_params"),
        notes=entry.get("notes", "") or "",
    )


def catalog_entry(model_id: str) -> dict[str, Any]:
    return _catalog_entries()[_catalog_index()[catalog_model(model_id).id.lower()]]


def raw_model(
    params: float,
    *,
    trainable_params: float | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    vocab: int | None = None,
    heads: int | None = None,
) -> ModelSpec:
    """A model known only by its numbers, so the source documents' arithmetic runs as stated.

    Without --layers/--hidden there is no activation estimate (it is reported as 0 with a note).
    """
    if not params or params <= 0:
        raise FitplanError(f"--params must be positive, got {params}")
    if params > 1e14:
        raise FitplanError(
            f"--params {params:.3g} is absurd (over 100 trillion)", "use e.g. --params 7e9"
        )
    if trainable_params is not None and not 0 < trainable_params <= params:
        raise FitplanError(
            f"--trainable-params {trainable_params:.4g} must be positive and at most --params {params:.4g}"
        )
    for flag, value in (
        ("--layers", layers),
        ("--hidden", hidden),
        ("--vocab", vocab),
        ("--heads", heads),
    ):
        if value is not None and value <= 0:
            raise FitplanError(f"{flag} must be positive, got {value}")
    h = hidden or 1
    n_heads = heads or max(1, h // 128)
    notes = "raw numbers: weights/gradients/optimizer from the totals as given"
    if not (layers and hidden):
        notes += "; no --layers/--hidden, so activations are not estimated"
    else:
        notes += (
            "; activations from Korthikanti's GPT layer (34·h bytes per token per layer in 16-bit)"
        )
    return ModelSpec(
        id=f"raw-{params:.3g}",
        name=f"raw model ({params:.4g} parameters)",
        family="raw",
        arch="raw",
        hidden=h,
        layers=layers or 1,
        heads=n_heads,
        kv_heads=n_heads,
        head_dim=max(1, h // n_heads),
        intermediate=4 * h,
        vocab=vocab or 1,
        gated_mlp=False,
        activation="gelu",
        norm="layernorm",
        raw_params=round(params),
        raw_trainable_params=round(trainable_params) if trainable_params is not None else None,
        caveats=notes,
    )


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalog id/alias (case-insensitive) or a path to a config.json (or its folder)."""
    text = name_or_path.strip()
    if not text:
        raise FitplanError(
            "--model is empty", "name a catalog model (fitplan models) or a config.json path"
        )
    if text.lower() in _catalog_index():
        return catalog_model(text)
    p = Path(text).expanduser()
    if p.exists() or p.suffix == ".json":
        return load_config_file(p)
    raise unknown_name("model", text, catalog_ids(), "fitplan models")
