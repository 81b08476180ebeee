"""The Llama-like families' ``config.json`` → :class:`ModelSpec` (dense, MoE and MLA variants)."""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import dense_prefix, sliding_layers
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import kv_heads as _kv_heads
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import GEMMA, ModelSpec

#: the config.json keys each MoE family's routed-expert count is read from, the config class's own
#: field first, then the names its ``attribute_map`` aliases to it (transformers 5.24
#: configuration_<type>.py: Mixtral and Qwen3-MoE map num_experts -> num_local_experts, so
#: ``save_pretrained`` in 5.x writes num_local_experts where the Hub's Qwen3-MoE files say
#: num_experts; DeepSeek-V3 maps num_local_experts -> n_routed_experts; Qwen2-MoE has no alias)
EXPERT_KEYS = {
    "mixtral": ("num_local_experts", "num_experts"),
    "qwen3_moe": ("num_experts", "num_local_experts"),
    "qwen2_moe": ("num_experts",),
    "deepseek_v3": ("n_routed_experts", "num_local_experts"),
    "deepseek_v2": ("n_routed_experts", "num_experts"),
    "glm4_moe": ("n_routed_experts", "num_local_experts"),
    "olmoe": ("num_experts", "num_local_experts"),
    "minimax_m2": ("num_local_experts", "num_experts"),
    "llama4_text": ("num_local_experts",),
    "gpt_oss": ("num_local_experts", "num_experts"),
    "ernie4_5_moe": ("moe_num_experts", "num_experts"),
    "flex_olmo": ("num_experts", "num_local_experts"),
    "granitemoe": ("num_local_experts",),
    "granitemoeshared": ("num_local_experts",),
    "exaone_moe": ("num_experts", "num_local_experts"),
    "phimoe": ("num_local_experts",),
}

#: the shared-expert count's key where it is not DeepSeek's ``n_shared_experts``
SHARED_EXPERT_KEY = {"exaone_moe": "num_shared_experts"}


def _experts(cfg: dict[str, Any], model_type: str, where: str) -> int:
    """The routed-expert count under any of its family's names; two names that disagree are
    refused (transformers would keep whichever it set last)."""
    keys = EXPERT_KEYS[model_type]
    given = {k: cfg[k] for k in keys if cfg.get(k) is not None}
    values = list(given.values())
    if any(v != values[0] for v in values[1:]):
        shown = " and ".join(f"{k} {v}" for k, v in given.items())
        raise FitplanError(
            f"{where}: {shown} disagree", f"{model_type} reads them as one number: keep one"
        )
    return _int(cfg, *keys, where=where)


#: families whose config keeps ``sliding_window`` but applies it only with
#: ``use_sliding_window: true`` (default false): transformers 5.24 configuration_qwen2/qwen3/
#: qwen3_moe.py set it to None, configuration_qwen2_moe.py to 0, when the flag is off, so
#: Qwen2.5's ``"sliding_window": 131072, "use_sliding_window": false`` is full attention
SLIDING_WINDOW_FLAG = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")


def _sliding_window(cfg: dict[str, Any], model_type: str) -> Any:
    if model_type in SLIDING_WINDOW_FLAG and not cfg.get("use_sliding_window", False):
        return None
    return cfg.get("sliding_window")


#: what a config.json that leaves a field out means, where the family's config class has its
#: own default rather than the one the field's absence means for Llama (transformers 5.24
#: configuration_<type>.py dataclass defaults; the same values in 4.x's __init__ signatures):
#: MistralConfig num_key_value_heads = 8, not num_attention_heads; GemmaConfig head_dim = 256,
#: not hidden / heads; DeepseekV3Config q_lora_rank = 1536, first_k_dense_replace = 3 and
#: n_shared_experts = 1.
#: Found by tools/arch_sweep.py's defaults with one key dropped (tests/constraints/test_arch_sweep.py)
ABSENT_DEFAULTS: dict[str, dict[str, float | str]] = {
    "mistral": {"num_key_value_heads": 8},
    "mixtral": {"num_key_value_heads": 8},
    "qwen3_moe": {"num_key_value_heads": 4},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256},
    "gemma2": {
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    # VaultGemmaConfig (configuration_vaultgemma.py): Gemma 2's attention defaults
    "vaultgemma": {
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    # Gemma3TextConfig's defaults, on which the published Gemma 3 4B / 12B text_configs rely
    "gemma3_text": {
        "num_key_value_heads": 4,
        "head_dim": 256,
        "num_attention_heads": 8,
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
    },
    "deepseek_v3": {"q_lora_rank": 1536, "first_k_dense_replace": 3, "n_shared_experts": 1},
    # Llama4TextConfig (configuration_llama4.py)
    "llama4_text": {
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
    },
    # OlmoeConfig (configuration_olmoe.py)
    "olmoe": {"num_experts": 64, "num_experts_per_tok": 8},
    # ExaoneMoeConfig (configuration_exaone_moe.py)
    "exaone_moe": {
        "num_key_value_heads": 32,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1024,
        "num_shared_experts": 1,
        "first_k_dense_replace": 1,
        "sliding_window": 4096,
    },
    # PhimoeConfig (configuration_phimoe.py): Phi-3.5-MoE's shapes
    "phimoe": {"num_key_value_heads": 8, "num_local_experts": 16, "num_experts_per_tok": 2},
    # GraniteMoeConfig (configuration_granitemoe.py)
    "granitemoe": {"num_local_experts": 8, "num_experts_per_tok": 2},
    "granitemoeshared": {"num_local_experts": 8, "num_experts_per_tok": 2},
    # FlexOlmoConfig (modular_flex_olmo.py): FlexOlmo-7x7B's shapes
    "flex_olmo": {"num_experts": 7, "num_experts_per_tok": 5},
    # DeepseekV2Config (configuration_deepseek_v2.py)
    "deepseek_v2": {
        "q_lora_rank": 1536,
        "first_k_dense_replace": 0,
        "n_shared_experts": 2,
        "n_routed_experts": 64,
        "moe_intermediate_size": 1407,
    },
    # NemotronConfig (configuration_nemotron.py): relu² in its MLP
    "nemotron": {"hidden_act": "relu2"},
    # StableLmConfig (configuration_stablelm.py): StableLM-3B-4E1T's shapes
    "stablelm": {"num_key_value_heads": 32, "hidden_act": "silu"},
    # Glm4MoeConfig (configuration_glm4_moe.py): GLM-4.5's shapes
    "glm4_moe": {
        "num_key_value_heads": 8,
        "moe_intermediate_size": 1408,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "n_routed_experts": 128,
        "first_k_dense_replace": 1,
    },
    # MiniMaxM2Config (configuration_minimax_m2.py): MiniMax-M2's shapes
    "minimax_m2": {
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
    },
    # GlmConfig / Glm4Config: q/k/v bias on, 2 key-value heads
    "glm": {"num_key_value_heads": 2, "attention_bias": True},
    "glm4": {"num_key_value_heads": 2, "attention_bias": True},
    # Starcoder2Config: biases on, 2 key-value heads, a tied head, GELU (tanh)
    "starcoder2": {
        "num_key_value_heads": 2,
        "use_bias": True,
        "tie_word_embeddings": True,
        "hidden_act": "gelu_pytorch_tanh",
    },
    # Jais2Config: relu² in its MLP, biases on every linear
    "jais2": {"hidden_act": "relu2", "attention_bias": True, "mlp_bias": True},
    # ApertusConfig: xIELU in its MLP
    "apertus": {"hidden_act": "xielu"},
    # ArceeConfig: relu² in its MLP
    "arcee": {"hidden_act": "relu2"},
    # the types read with a supported family's structure (constraints/data/structure_families.json):
    # their own config class's defaults, applied before the type is renamed
    "cwm": {"num_key_value_heads": 8},
    "ernie4_5": {"num_key_value_heads": 2, "head_dim": 128, "tie_word_embeddings": True},
    "mellum": {"head_dim": 128},
    "ministral3": {"num_key_value_heads": 8},
    "seed_oss": {"num_key_value_heads": 8},
    "smollm3": {"num_key_value_heads": 4, "tie_word_embeddings": True},
    # Ernie4_5_MoeConfig (configuration_ernie4_5_moe.py): ERNIE-4.5-21B-A3B's shapes
    "ernie4_5_moe": {
        "num_key_value_heads": 4,
        "tie_word_embeddings": True,
        "moe_num_experts": 64,
        "moe_k": 6,
        "moe_num_shared_experts": 2,
        "moe_intermediate_size": 1536,
        "moe_layer_start_index": 1,
        "moe_layer_end_index": -1,
        "moe_layer_interval": 1,
    },
    # GptOssConfig (configuration_gpt_oss.py): attention_bias defaults true, 64 x 64 heads
    "gpt_oss": {
        "num_key_value_heads": 8,
        "head_dim": 64,
        "attention_bias": True,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
    },
}

#: types whose config class has no head_dim and whose attention takes hidden // heads whatever
#: the remainder (modeling_glm4_moe.py ``Glm4MoeAttention``: ``getattr(config, "head_dim",
#: hidden_size // num_attention_heads)``; its default 4096 / 96 builds 42-wide heads)
FLOOR_HEAD_DIM = frozenset({"glm4_moe"})

#: types whose config lists each layer's MLP (``mlp_layer_types``, which wins over
#: first_k_dense_replace: ExaoneMoeConfig.__post_init__ derives it only when left out)
MLP_LAYER_TYPES = frozenset({"exaone_moe"})

#: multi-head latent attention: each head is qk_nope_head_dim + qk_rope_head_dim wide, whatever
#: hidden_size / heads is (modeling_deepseek_v3.py ``DeepseekV3Attention``)
MLA_TYPES = ("deepseek_v2", "deepseek_v3")

_TIE_DEFAULT = {"gemma": True, "gemma2": True, "gemma3_text": True, "vaultgemma": True}

#: the config keys that switch the q/k/v, o_proj and MLP biases, where a type's do not follow
#: Llama's (attention_bias on q/k/v and o_proj, mlp_bias on the MLP); None: no bias
#: (transformers 5.25 modeling_glm.py / modeling_glm4.py: o_proj and gate_up_proj bias=False)
LLAMA_BIAS_KEYS = ("attention_bias", "attention_bias", "mlp_bias")
BIAS_KEYS: dict[str, tuple[str | None, str | None, str | None]] = {
    "glm": ("attention_bias", None, None),
    "glm4": ("attention_bias", None, None),
    "glm4_moe": ("attention_bias", None, None),
    "minimax_m2": (None, None, None),
    "exaone4": (None, None, None),
    "exaone_moe": (None, None, None),
    "starcoder2": ("use_bias", "use_bias", "use_bias"),
    "stablelm": ("use_qkv_bias", None, None),
    "ernie4_5_moe": ("use_bias", "use_bias", "use_bias"),
}

#: what each type's layer code fixes, whatever its config says (transformers 5.25
#: modeling_<type>.py): fused projections, the norms and where they sit, SDPA support
LAYER_TRAITS: dict[str, dict[str, Any]] = {
    "gemma": {"norm_weight_fp32": True},
    # modeling_gemma2.py: "sdpa does not support softcapping"
    "gemma2": {"norm_weight_fp32": True, "norms_per_layer": 4, "sdpa_supported": False},
    # VaultGemmaDecoderLayer: Gemma 2's layer with two norms (input, pre-feedforward), no post-norms
    "vaultgemma": {"norm_weight_fp32": True, "sdpa_supported": False},
    "gemma3_text": {"norm_weight_fp32": True, "norms_per_layer": 4, "qk_norm": "head"},
    "phi3": {"fused_qkv": True, "fused_gate_up": True},
    "olmo": {"norm": "nonparam"},
    "olmo2": {"norm_weight_fp32": True, "qk_norm": "full", "post_norm": True},
    # FlexOlmoDecoderLayer: OLMoE's MoE under OLMo 2's layer (norms after attention and after
    # the MLP, Olmo2RMSNorm, whole-projection q/k norms)
    "flex_olmo": {"norm_weight_fp32": True, "qk_norm": "full", "post_norm": True},
    # Jais2DecoderLayer: Llama's attention, nn.LayerNorms (bias), Nemotron's MLP (up, act, down)
    "jais2": {"norm": "layernorm", "gated_mlp": False},
    # PhimoeDecoderLayer: Mixtral's layer between nn.LayerNorms (with bias; the final norm too)
    "phimoe": {"norm": "layernorm"},
    # ApertusDecoderLayer: Llama's layer with per-head q/k RMSNorms (before the rotary) and an
    # MLP without a gate (up_proj, xIELU, down_proj); its norms named attention_layernorm and
    # feedforward_layernorm, where Llama's input and post-attention norms sit
    "apertus": {"qk_norm": "head", "gated_mlp": False},
    "qwen3": {"qk_norm": "head"},
    "qwen3_moe": {"qk_norm": "head"},
    # GlmMLP: one gate_up_proj, chunked; partial rotary on q and k (the same widths saved)
    "glm": {"fused_gate_up": True},
    # Glm4DecoderLayer: GLM's layer with a norm after attention and after the MLP as well
    # (input, post_self_attn, post_attention, post_mlp: Gemma 2's four)
    "glm4": {"fused_gate_up": True, "norms_per_layer": 4},
    # Exaone4DecoderLayer: OLMo 2's norms after attention and after the MLP, no input norms,
    # but per-head q/k norms and Llama's RMSNorm (the weight after the cast)
    "exaone4": {"qk_norm": "head", "post_norm": True},
    # ExaoneMoeDecoderLayer: OLMoE's pre-norm layer around EXAONE 4's attention (per-head q/k
    # norms) and DeepSeek-V3's MoE block
    "exaone_moe": {"qk_norm": "head"},
    # ArceeMLP: down_proj(act(up_proj(x))), no gate (relu2 by default)
    "arcee": {"gated_mlp": False},
    # Starcoder2DecoderLayer: LayerNorms with bias, mlp.c_fc / mlp.c_proj without a gate,
    # dropout after attention and after the MLP (residual_dropout) and on the embeddings
    "starcoder2": {"gated_mlp": False, "norm": "layernorm", "mlp_up": "c_fc", "mlp_down": "c_proj"},
    # StableLmDecoderLayer: nn.LayerNorms with bias around Llama's attention (partial rotary) and
    # gated MLP; dropout after attention and after the MLP (hidden_dropout)
    "stablelm": {"norm": "layernorm"},
    # NemotronDecoderLayer: LayerNorm1P (F.layer_norm with weight + 1 and a bias) around Llama's
    # attention (partial rotary) and an MLP without a gate (up_proj, relu², down_proj)
    "nemotron": {"norm": "layernorm", "gated_mlp": False},
    # HunYuanDenseV1Attention: per-head RMSNorms on q and k (query_layernorm / key_layernorm,
    # after the rotary: the same tensors kept as Qwen 3's before it)
    "hunyuan_v1_dense": {"qk_norm": "head"},
}

#: traits a config switches on: (key, its default, the traits when it is true)
#: (modeling_hyperclovax.py ``HyperCLOVAXDecoderLayer``: with use_post_norm a Llama RMSNorm after
#: attention and after the MLP besides the input and post-attention ones: four per layer)
SWITCHED_TRAITS: dict[str, tuple[tuple[str, bool, dict[str, Any]], ...]] = {
    "hyperclovax": (("use_post_norm", True, {"norms_per_layer": 4}),),
}

#: the config key of the dropout on each residual branch, where a type has one
RESIDUAL_DROPOUT_KEY = {"stablelm": "hidden_dropout"}

#: layer variants a type's config can switch on that fitplan does not model: (key, what it is)
UNMODELLED_SWITCHES = {
    "phimoe": (
        ("lm_head_bias", "a bias on the output head"),
        ("input_jitter_noise", "noise multiplied into the router's input in place"),
    ),
    # modeling_ernie4_5_moe.py: use_bias adds biases to attention, dense and shared MLPs, not to
    # the routed experts (MixtralExperts)
    "ernie4_5_moe": (("use_bias", "biases on every linear but the routed experts'"),),
    "stablelm": (
        ("qk_layernorm", "per-head LayerNorms on q and k"),
        ("use_parallel_residual", "the parallel attention / MLP residual"),
    ),
}


def _switch(cfg: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FitplanError(f"{where}: {key} must be true or false, got {excerpt(value)}")
    return value


def _bias(cfg: dict[str, Any], key: str | None) -> bool:
    return bool(cfg.get(key, False)) if key else False


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
    if heads % kv_heads:
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
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", _TIE_DEFAULT.get(model_type, False))),
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
    if model_type in ("mixtral", "granitemoe", "granitemoeshared", "phimoe"):
        # modeling_granitemoe.py: Mixtral's layer, the router a bare Parameter (F.linear in the
        # compute dtype, the logits then fp32); its multipliers scale without saving anything
        kwargs["router_linear"] = model_type in ("mixtral", "phimoe")
        # PhimoeTopKRouter is an nn.Linear whose forward returns a tuple: PEFT's lora.Linear
        # cannot wrap it (Llama 4's router the same), so all-linear is written as the other names
        kwargs["router_adaptable"] = model_type != "phimoe"
        kwargs["num_experts"] = _experts(cfg, model_type, where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where, default=2)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
        shared = _int(cfg, "shared_intermediate_size", where=where, default=0)
        if model_type == "granitemoeshared" and shared:
            kwargs["shared_experts"] = 1
            kwargs["shared_expert_intermediate"] = shared
            kwargs["shared_expert_fused"] = True
    if model_type in ("qwen3_moe", "qwen2_moe"):
        kwargs["num_experts"] = _experts(cfg, model_type, where)
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
    if model_type in ("olmoe", "minimax_m2", "flex_olmo"):
        # modeling_olmoe.py: Qwen-MoE's layer with q_norm over the whole q projection and k_norm
        # over the whole k projection (OlmoeRMSNorm, Llama's), every expert intermediate_size wide;
        # modeling_minimax_m2.py the same layer (a sigmoid router with a correction-bias buffer,
        # partial rotary, no q/k/v bias)
        kwargs["qk_norm"] = "full"
        kwargs["num_experts"] = _experts(cfg, model_type, where)
        kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
        kwargs["moe_intermediate"] = kwargs["intermediate"]
    if model_type == "llama4_text":
        _llama4_text(cfg, kwargs, where)
    if model_type == "ernie4_5_moe":
        _ernie4_5_moe(cfg, kwargs, where)
    if model_type == "gpt_oss":
        # modeling_gpt_oss.py: GptOssExperts holds gate_up_proj (E, H, 2I) + bias and down_proj
        # (E, I, H) + bias as Parameters; GptOssTopKRouter a weight (E, H) and bias (E)
        kwargs["num_experts"] = _experts(cfg, "gpt_oss", where)
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
        _deepseek_moe(cfg, kwargs, where, model_type)
    if model_type in MLA_TYPES:
        kwargs["q_lora_rank"] = _int(cfg, "q_lora_rank", where=where, default=0)
        kwargs["kv_lora_rank"] = _int(cfg, "kv_lora_rank", where=where)
        kwargs["qk_nope_head_dim"] = _int(cfg, "qk_nope_head_dim", where=where)
        kwargs["qk_rope_head_dim"] = _int(cfg, "qk_rope_head_dim", where=where)
        kwargs["v_head_dim"] = _int(cfg, "v_head_dim", where=where)
        kwargs["head_dim"] = kwargs["qk_nope_head_dim"] + kwargs["qk_rope_head_dim"]
        kwargs["kv_heads"] = heads
    if kwargs["sliding_window"]:
        kwargs["sliding_layers"] = sliding_layers(cfg, model_type, layers, where)
    if model_type == "glm4_moe" and cfg.get("use_qk_norm"):
        kwargs["qk_norm"] = "head"  # Glm4MoeAttention q_norm / k_norm: RMSNorm(head_dim)
    return ModelSpec(**common, **kwargs)


def _deepseek_moe(cfg: dict[str, Any], kwargs: dict[str, Any], where: str, model_type: str) -> None:
    """DeepSeek-V3's MoE block (modeling_deepseek_v3.py ``DeepseekV3MoE``; GLM-4.5's
    ``Glm4MoeMoE`` is the same): routed experts beside ``n_shared_experts`` fused into one MLP,
    the first ``first_k_dense_replace`` layers dense, a router that is an fp32 Parameter fed
    the hidden states cast to fp32. DeepSeek-V2's router softmaxes where V3's sigmoids."""
    kwargs["router_linear"] = False
    kwargs["router_fp32_input"] = True
    kwargs["num_experts"] = _experts(cfg, model_type, where)
    # DeepseekV2Config leaves num_experts_per_tok None (it cannot route); both published
    # DeepSeek-V2 configs (V2, V2-Lite) route to 6
    kwargs["experts_per_token"] = _int(
        cfg,
        "num_experts_per_tok",
        where=where,
        default=6 if model_type == "deepseek_v2" else None,
    )
    kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
    shared_key = SHARED_EXPERT_KEY.get(model_type, "n_shared_experts")
    kwargs["shared_experts"] = _int(cfg, shared_key, where=where, default=0)
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"] * kwargs["shared_experts"]
    kinds = cfg.get("mlp_layer_types") if model_type in MLP_LAYER_TYPES else None
    kwargs["first_dense_layers"] = (
        _int(cfg, "first_k_dense_replace", where=where, default=0)
        if kinds is None
        else dense_prefix(kinds, cfg, where)
    )
    kwargs["moe_every"] = _int(cfg, "moe_layer_freq", where=where, default=1)


def _ernie4_5_moe(cfg: dict[str, Any], kwargs: dict[str, Any], where: str) -> None:
    """ERNIE 4.5's MoE (modeling_ernie4_5_moe.py): routed experts moe_intermediate_size wide,
    ``moe_num_shared_experts`` fused into one MLP beside them, a router that is an fp32
    Parameter fed the hidden states cast to fp32 with a frozen per-expert score correction; MoE
    layers from ``moe_layer_start_index`` every ``moe_layer_interval`` to ``moe_layer_end_index``
    (-1: the last), dense MLPs elsewhere."""
    kwargs["num_experts"] = _experts(cfg, "ernie4_5_moe", where)
    kwargs["experts_per_token"] = _int(cfg, "moe_k", "num_experts_per_tok", where=where)
    kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
    kwargs["shared_experts"] = _int(cfg, "moe_num_shared_experts", where=where, default=0)
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"] * kwargs["shared_experts"]
    kwargs["first_dense_layers"] = _int(cfg, "moe_layer_start_index", where=where, default=0)
    kwargs["moe_every"] = _positive(
        "moe_layer_interval", _int(cfg, "moe_layer_interval", where=where, default=1), where
    )
    kwargs["router_linear"] = False
    kwargs["router_fp32_input"] = True
    kwargs["router_correction_param"] = True
    kwargs["attention_dropout"] = 0.0  # Ernie4_5_MoeAttention sets it to 0.0 whatever the config
    end = cfg.get("moe_layer_end_index")
    end = -1 if end is None else end
    if isinstance(end, bool) or not isinstance(end, int):
        raise FitplanError(f"{where}: moe_layer_end_index must be an integer, got {excerpt(end)}")
    if end != -1 and end < kwargs["layers"] - 1:
        raise FitplanError(
            f"{where}: moe_layer_end_index {end} leaves dense layers after the MoE ones",
            "fitplan models MoE layers through the last: pass raw numbers (--params …)",
        )


def _llama4_text(cfg: dict[str, Any], kwargs: dict[str, Any], where: str) -> None:
    """Llama 4's text model (modeling_llama4.py): MoE layers every ``interleave_moe_layer_step``
    (routed experts intermediate_size wide, run on every token, a shared expert beside), the
    other layers a dense MLP intermediate_size_mlp wide; q/k norms without weights."""
    kwargs["intermediate"] = _int(cfg, "intermediate_size_mlp", where=where)
    kwargs["num_experts"] = _experts(cfg, "llama4_text", where)
    kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
    kwargs["moe_intermediate"] = _int(cfg, "intermediate_size", where=where)
    kwargs["shared_experts"] = 1
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"]
    step = _int(cfg, "interleave_moe_layer_step", where=where, default=1)
    kwargs["moe_every"] = step
    kwargs["experts_see_all_tokens"] = True
    kwargs["peft_adapts_experts"] = False  # Llama4TextExperts' Parameters (PEFT 0.21.2, traced)
    kwargs["router_adaptable"] = False
    given = cfg.get("moe_layers")
    if given is not None and list(given) != list(range(step - 1, kwargs["layers"], step)):
        raise FitplanError(
            f"{where}: moe_layers {excerpt(given)} is not every {step}th layer",
            "fitplan models MoE layers at a fixed interleave: pass raw numbers (--params …)",
        )
