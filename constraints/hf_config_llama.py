"""The Llama-like families' ``config.json`` → :class:`ModelSpec` (dense, MoE and MLA variants)."""

from __future__ import annotations

from typing import Any

from constraints import gated_deltanet, mamba2
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import kv_heads as _kv_heads
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import sliding_layers
from constraints.hf_config_moe import EXPERT_KEYS, deepseek_moe, ernie4_5_moe, experts, llama4_text
from constraints.hf_config_traits import (
    ABSENT_DEFAULTS,
    BIAS_KEYS,
    CONFIG_TYPE_TRAITS,
    DSA_TYPES,
    FLOOR_HEAD_DIM,
    LAYER_TRAITS,
    LLAMA_BIAS_KEYS,
    MLA_TYPES,
    RESIDUAL_DROPOUT_KEY,
    SWITCHED_TRAITS,
    TIE_DEFAULT,
    UNMODELLED_SWITCHES,
)
from constraints.limits import excerpt
from constraints.model_spec import GEMMA, ModelSpec

__all__ = ["ABSENT_DEFAULTS", "EXPERT_KEYS", "llama_like"]

#: families whose config keeps ``sliding_window`` but applies it only with
#: ``use_sliding_window: true`` (default false): transformers 5.24 configuration_qwen2/qwen3/
#: qwen3_moe.py set it to None, configuration_qwen2_moe.py to 0, when the flag is off, so
#: Qwen2.5's ``"sliding_window": 131072, "use_sliding_window": false`` is full attention
SLIDING_WINDOW_FLAG = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")


def _sliding_window(cfg: dict[str, Any], model_type: str) -> Any:
    if model_type in SLIDING_WINDOW_FLAG and not cfg.get("use_sliding_window", False):
        return None
    return cfg.get("sliding_window")


def _switch(cfg: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FitplanError(f"{where}: {key} must be true or false, got {excerpt(value)}")
    return value


def _bias(cfg: dict[str, Any], key: str | None) -> bool:
    return bool(cfg.get(key, False)) if key else False


def dsa_indexer(cfg: dict[str, Any], kwargs: dict[str, Any], layers: int, where: str) -> None:
    """DeepSeek Sparse Attention's indexer in every layer (``index_n_heads``,
    ``index_head_dim``, ``index_topk``); GLM-5's layers that reuse another's top-k
    (``indexer_types`` "shared") are refused: fitplan counts an indexer per layer."""
    kinds = cfg.get("indexer_types")
    if kinds is not None and (not isinstance(kinds, list) or set(kinds) - {"full"}):
        raise FitplanError(
            f"{where}: indexer_types {excerpt(kinds)}: fitplan models an indexer in every layer "
            "('full'), not layers that reuse another's top-k",
            "pass raw numbers (--params …)",
        )
    pattern = cfg.get("index_topk_pattern")
    freq = cfg.get("index_topk_freq", 1)
    if kinds is None and (pattern not in (None, "F" * layers) or freq not in (None, 1)):
        raise FitplanError(
            f"{where}: index_topk_pattern / index_topk_freq: fitplan models an indexer in every "
            "layer, not layers that reuse another's top-k",
            "pass raw numbers (--params …)",
        )
    kwargs["index_heads"] = _positive(
        "index_n_heads", _int(cfg, "index_n_heads", where=where), where
    )
    kwargs["index_head_dim"] = _positive(
        "index_head_dim", _int(cfg, "index_head_dim", where=where), where
    )
    kwargs["index_topk"] = _positive("index_topk", _int(cfg, "index_topk", where=where), where)
    if kwargs["index_head_dim"] < kwargs.get("qk_rope_head_dim", 0):
        raise FitplanError(
            f"{where}: index_head_dim {kwargs['index_head_dim']} is narrower than "
            f"qk_rope_head_dim {kwargs['qk_rope_head_dim']} (the indexer rotates that slice)"
        )


def granite_hybrid(cfg: dict[str, Any], kwargs: dict[str, Any], where: str) -> None:
    """Granite 4 (modeling_granitemoehybrid.py): Granite MoE's shared layer whose attention is a
    Mamba-2 mixer where ``layer_types`` says (constraints/mamba2.py); with experts, the routed
    MoE (a Parameter router) beside the fused ``shared_mlp``; with ``num_local_experts`` 0 the
    shared MLP alone (``input_linear`` h → 2·I, ``output_linear``)."""
    kwargs.update(mamba2.read(cfg, kwargs["hidden"], where))
    kwargs["layer_mixers"] = mamba2.mixers(cfg, kwargs["layers"], where)
    shared = _int(cfg, "shared_intermediate_size", where=where, default=1024)
    routed = _int(cfg, "num_local_experts", where=where, default=8)
    if not routed:
        kwargs["intermediate"] = shared
        kwargs["fused_gate_up"] = True
        return
    kwargs["router_linear"] = False
    kwargs["num_experts"] = routed
    kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where, default=2)
    kwargs["moe_intermediate"] = kwargs["intermediate"]
    kwargs["shared_experts"] = 1
    kwargs["shared_expert_intermediate"] = shared
    kwargs["shared_expert_fused"] = True


def llama_like(
    cfg: dict[str, Any],
    common: dict[str, Any],
    where: str,
    model_type: str,
) -> ModelSpec:
    cfg = {**ABSENT_DEFAULTS.get(model_type, {}), **cfg}  # a key given, even as null, wins
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where), where)
    heads = _positive("num_attention_heads", _int(cfg, "num_attention_heads", where=where), where)
    kv_heads = _kv_heads(cfg, heads, where)
    # MLA expands its latent to every head: num_key_value_heads is not read (set below)
    if heads % kv_heads and model_type not in MLA_TYPES:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = cfg.get("head_dim") or hidden // heads
    head_dim_free = model_type in FLOOR_HEAD_DIM or model_type in MLA_TYPES
    if hidden % heads and not cfg.get("head_dim") and not head_dim_free:
        raise FitplanError(
            f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}"
        )
    layers = _positive("num_hidden_layers", _int(cfg, "num_hidden_layers", where=where), where)
    kwargs: dict[str, Any] = {
        "family": model_type,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": int(head_dim),
        "intermediate": _int(cfg, "intermediate_size", where=where),
        "vocab": _positive("vocab_size", _int(cfg, "vocab_size", where=where), where),
        "max_position": cfg.get("max_position_embeddings"),
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", TIE_DEFAULT.get(model_type, False))),
        **dict(
            zip(
                ("qkv_bias", "o_bias", "mlp_bias"),
                (_bias(cfg, k) for k in BIAS_KEYS.get(model_type, LLAMA_BIAS_KEYS)),
                strict=True,
            )
        ),
        "activation": str(
            cfg.get(
                "hidden_act",
                cfg.get("hidden_activation", "silu"),
            )
        ),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
        "sliding_window": _sliding_window(cfg, model_type),
        "hidden_dropout": float(
            cfg.get(RESIDUAL_DROPOUT_KEY.get(model_type, "residual_dropout"), 0.0) or 0.0
        ),
        "embedding_dropout": float(cfg.get("embedding_dropout", 0.0) or 0.0),
    }
    if model_type in ("qwen2", "qwen2_moe"):
        # Qwen2 always has q/k/v bias and none on o_proj; Qwen2-MoE's config has a qkv_bias
        # field (default true; modeling_qwen2_moe.py q/k/v_proj bias=config.qkv_bias, 5.24)
        qkv = cfg.get("qkv_bias", True) if model_type == "qwen2_moe" else True
        kwargs["qkv_bias"] = bool(qkv)
        kwargs["o_bias"] = False
    if model_type in GEMMA:
        kwargs["activation"] = str(
            cfg.get("hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
        )
    kwargs.update(LAYER_TRAITS.get(model_type, {}))
    for key, default, traits in SWITCHED_TRAITS.get(model_type, ()):
        if _switch(cfg, key, default, where):
            kwargs.update(traits)
    for key, what in UNMODELLED_SWITCHES.get(model_type, ()):
        if cfg.get(key):
            raise FitplanError(
                f"{where}: {key} ({what}) is not modelled for {model_type}",
                "pass raw numbers (--params …) or a config without it",
            )
    if model_type in ("gemma2", "gemma3_text", "vaultgemma"):
        kwargs["attn_softcap"] = float(cfg.get("attn_logit_softcapping") or 0.0)
        kwargs["final_softcap"] = float(cfg.get("final_logit_softcapping") or 0.0)
    if model_type == "granitemoehybrid":
        granite_hybrid(cfg, kwargs, where)
    elif model_type in ("mixtral", "granitemoe", "granitemoeshared", "granitemoe_swa", "phimoe"):
        # modeling_granitemoe.py: Mixtral's layer, the router a bare Parameter (F.linear in the
        # compute dtype, the logits then fp32); its multipliers scale without saving anything
        kwargs["router_linear"] = model_type in ("mixtral", "phimoe")
        # PhimoeTopKRouter is an nn.Linear whose forward returns a tuple: PEFT's lora.Linear
        # cannot wrap it (Llama 4's router the same), so all-linear is written as the other names
        kwargs["router_adaptable"] = model_type != "phimoe"
        kwargs["num_experts"] = experts(cfg, model_type, where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where, default=2)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
        shared = _int(cfg, "shared_intermediate_size", where=where, default=0)
        if model_type in ("granitemoeshared", "granitemoe_swa") and shared:
            kwargs["shared_experts"] = 1
            kwargs["shared_expert_intermediate"] = shared
            kwargs["shared_expert_fused"] = True
    if model_type in gated_deltanet.FUSED_PROJECTIONS:
        gated_deltanet.read(cfg, kwargs, where, model_type)
    if model_type in ("qwen3_moe", "qwen2_moe", "qwen3_next", "qwen3_5_moe_text"):
        kwargs["num_experts"] = experts(cfg, model_type, where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
        kwargs["moe_every"] = _int(cfg, "decoder_sparse_step", where=where, default=1)
        if cfg.get("mlp_only_layers"):
            raise FitplanError(f"{where}: mlp_only_layers is not modelled", "pass raw numbers")
        if model_type in ("qwen2_moe", "qwen3_next", "qwen3_5_moe_text"):
            kwargs["shared_experts"] = 1
            kwargs["shared_expert_intermediate"] = _int(
                cfg, "shared_expert_intermediate_size", where=where
            )
            kwargs["shared_expert_gate"] = True
    if model_type in ("olmoe", "minimax_m2", "flex_olmo"):
        # modeling_olmoe.py: Qwen-MoE's layer with q_norm over the whole q projection and k_norm
        # over the whole k projection (OlmoeRMSNorm, Llama's), every expert intermediate_size wide;
        # modeling_minimax_m2.py the same layer (a sigmoid router with a correction-bias buffer,
        # partial rotary, no q/k/v bias)
        kwargs["qk_norm"] = "full"
        kwargs["num_experts"] = experts(cfg, model_type, where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
    if model_type == "llama4_text":
        llama4_text(cfg, kwargs, where)
    if model_type == "ernie4_5_moe":
        ernie4_5_moe(cfg, kwargs, where)
    if model_type == "gpt_oss":
        # modeling_gpt_oss.py: GptOssExperts holds gate_up_proj (E, H, 2I) + bias and down_proj
        # (E, I, H) + bias as Parameters; GptOssTopKRouter a weight (E, H) and bias (E)
        kwargs["num_experts"] = experts(cfg, "gpt_oss", where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
        kwargs["fused_gate_up"] = True
        kwargs["mlp_bias"] = True
        kwargs["router_bias_param"] = True
        kwargs["router_linear"] = False
        kwargs["attn_sinks"] = True
        kwargs["peft_adapts_experts"] = False
        kwargs["sdpa_supported"] = False  # modeling_gpt_oss.py _supports_sdpa = False (sinks)
    if model_type in ("deepseek_v2", "deepseek_v3", "glm4_moe", "exaone_moe"):
        deepseek_moe(cfg, kwargs, where, model_type, common.get("config_type", ""))
    if model_type in MLA_TYPES:
        kwargs["q_lora_rank"] = _int(cfg, "q_lora_rank", where=where, default=0)
        kwargs["kv_lora_rank"] = _int(cfg, "kv_lora_rank", where=where)
        kwargs["qk_nope_head_dim"] = _int(cfg, "qk_nope_head_dim", where=where)
        kwargs["qk_rope_head_dim"] = _int(cfg, "qk_rope_head_dim", where=where)
        kwargs["v_head_dim"] = _int(cfg, "v_head_dim", where=where)
        kwargs["head_dim"] = kwargs["qk_nope_head_dim"] + kwargs["qk_rope_head_dim"]
        kwargs["kv_heads"] = heads
    kwargs.update(CONFIG_TYPE_TRAITS.get(common.get("config_type", ""), {}))
    if common.get("config_type") in DSA_TYPES:
        dsa_indexer(cfg, kwargs, layers, where)
    if kwargs["sliding_window"]:
        kwargs["sliding_layers"] = sliding_layers(cfg, model_type, layers, where)
    if model_type == "glm4_moe" and cfg.get("use_qk_norm"):
        kwargs["qk_norm"] = "head"  # Glm4MoeAttention q_norm / k_norm: RMSNorm(head_dim)
    return ModelSpec(**common, **kwargs)
