"""What each Llama-like type's layer and config class fix, as data: the defaults of a key left
out, the biases, the norms and projections, the switches refused by name (transformers
``configuration_<type>.py`` / ``modeling_<type>.py``). Read by :mod:`constraints.hf_config_llama`.
"""

from __future__ import annotations

from typing import Any

#: what a config.json that leaves a field out means, where the family's config class has its
#: own default rather than the one the field's absence means for Llama (transformers 5.24
#: configuration_<type>.py dataclass defaults; the same values in 4.x's __init__ signatures):
#: MistralConfig num_key_value_heads = 8, not num_attention_heads; GemmaConfig head_dim = 256,
#: not hidden / heads; DeepseekV3Config q_lora_rank = 1536, first_k_dense_replace = 3 and
#: n_shared_experts = 1.
#: Found by tools/arch_sweep.py's defaults with one key dropped (tests/constraints/test_arch_sweep.py)
QWEN3_NEXT_SHAPE: dict[str, float | str] = {
    "num_attention_heads": 16,
    "head_dim": 256,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
}
ABSENT_DEFAULTS: dict[str, dict[str, float | str]] = {
    # GraniteSWAConfig (configuration_granite_swa.py)
    "granite_swa": {
        "vocab_size": 100352,
        "hidden_size": 2560,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 20,
        "num_key_value_heads": 4,
        "sliding_window": 128,
    },
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
    # Qwen3NextConfig / Qwen3_5TextConfig / Qwen3_5MoeTextConfig (a Qwen 3.5 checkpoint's
    # text_config may leave them to the class); the MoE text config has no intermediate_size:
    # every layer's MLP is the MoE block
    # GraniteMoeHybridConfig (configuration_granitemoehybrid.py)
    "granitemoehybrid": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
    },
    "qwen3_next": {
        **QWEN3_NEXT_SHAPE,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 48,
        "num_experts_per_tok": 10,
        "num_experts": 512,
    },
    "qwen3_5_text": {
        **QWEN3_NEXT_SHAPE,
        "num_key_value_heads": 4,
        "vocab_size": 248320,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 32,
    },
    "qwen3_5_moe_text": {
        **QWEN3_NEXT_SHAPE,
        "num_key_value_heads": 2,
        "vocab_size": 248320,
        "hidden_size": 2048,
        "intermediate_size": 0,
        "num_hidden_layers": 40,
        "num_experts_per_tok": 8,
        "num_experts": 256,
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
    # GraniteMoeSWAConfig: GraniteMoeShared's (no shared MLP by default), a 128-token window
    "granitemoe_swa": {"num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 128},
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
#: first_k_dense_replace: ExaoneMoeConfig / Glm4MoeLiteConfig.__post_init__ derive it only when
#: left out), read as a dense prefix (``hf_config_fields.dense_prefix``)
MLP_LAYER_TYPES = frozenset({"exaone_moe", "glm4_moe_lite", "deepseek_v32", "glm_moe_dsa", "axk1"})
#: what a type read as another family's structure adds to it, by its own model_type
#: (modular_axk1.py ``AXK1MoE.post_mlp_layernorm``)
CONFIG_TYPE_TRAITS: dict[str, dict[str, Any]] = {"axk1": {"moe_post_norm": True}}
#: DeepSeek Sparse Attention (modeling_deepseek_v32.py ``DeepseekV32Indexer``; GLM-5's
#: ``GlmMoeDsaIndexer`` the same with interleaved rotary)
DSA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})

#: multi-head latent attention: each head is qk_nope_head_dim + qk_rope_head_dim wide, whatever
#: hidden_size / heads is (modeling_deepseek_v3.py ``DeepseekV3Attention``)
MLA_TYPES = ("deepseek_v2", "deepseek_v3")

TIE_DEFAULT = {
    "gemma": True,
    "gemma2": True,
    "gemma3_text": True,
    "vaultgemma": True,
    "granite_swa": True,
}

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
#: Granite SWA (modeling_granite_swa.py): a learnable sink per head that rescales the attention
#: output, which transformers' SDPA path cannot take (``_supports_sdpa = False``)
GRANITE_SWA_TRAITS = {"attn_sinks": True, "sink_scaling": True, "sdpa_supported": False}
LAYER_TRAITS: dict[str, dict[str, Any]] = {
    "granite_swa": GRANITE_SWA_TRAITS,
    "granitemoe_swa": GRANITE_SWA_TRAITS,
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
    # Qwen3NextDecoderLayer / Qwen3_5DecoderLayer: a gated DeltaNet or a gated attention
    # (constraints/gated_deltanet.py) with per-head q/k norms, Gemma's zero-centred RMSNorm
    # ((x̂ · (1 + w)).to(dtype), the weight in fp32)
    "qwen3_next": {"qk_norm": "head", "norm_weight_fp32": True},
    "qwen3_5_text": {"qk_norm": "head", "norm_weight_fp32": True},
    "qwen3_5_moe_text": {"qk_norm": "head", "norm_weight_fp32": True},
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
