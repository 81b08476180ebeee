"""Model types transformers builds with a class fitplan models: read as that family.

transformers 5.24 ``models/auto/modeling_auto.py`` maps these ``model_type`` values to the very
class of a supported family (``("exaone", "LlamaForCausalLM")``, ``("sarvam_mla",
"DeepseekV3ForCausalLM")``, ``"gpt-sw3"`` to ``GPT2LMHeadModel`` with ``GPT2Config``), so their
weights, saved tensors and kernels are that family's. Their config classes name some fields
their own way (``attribute_map``) and default others differently; both are carried here, from
each ``configuration_<type>.py``, so the family's parser reads what transformers builds.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.limits import excerpt


@frozen(slots=True)
class BuiltAs:
    family: str  # the supported family whose class transformers instantiates
    model_class: str  # that class, named in the caveat
    renames: tuple[tuple[str, str], ...] = ()  # (the type's key, the family's key): attribute_map
    absent: tuple[tuple[str, Any], ...] = ()  # the type's own default for a key left out
    #: every layer has the dense MLP: the family's MoE keys are not the type's (its file's
    #: own are dropped, transformers ignores them)
    dense: bool = False


BUILT_AS = {
    "exaone": BuiltAs(
        "llama",
        "LlamaForCausalLM",
        (("num_layers", "num_hidden_layers"), ("activation_function", "hidden_act")),
        (("num_key_value_heads", 8),),
    ),
    "internlm3": BuiltAs(
        "llama",
        "LlamaForCausalLM",
        (("qkv_bias", "attention_bias"), ("bias", "mlp_bias")),
        (("num_key_value_heads", 2), ("head_dim", 128)),
    ),
    "iquestcoder": BuiltAs(
        "llama", "LlamaForCausalLM", (), (("num_key_value_heads", 8), ("head_dim", 128))
    ),
    "sarvam_mla": BuiltAs(
        "deepseek_v3",
        "DeepseekV3ForCausalLM",
        (
            ("num_experts", "n_routed_experts"),
            ("num_local_experts", "n_routed_experts"),
            ("num_shared_experts", "n_shared_experts"),
        ),
        (
            ("q_lora_rank", None),
            ("first_k_dense_replace", 1),
            ("n_routed_experts", 128),
            ("n_shared_experts", 1),
        ),
    ),
    # configuration_sarvam_moe.py: built as Glm4MoeForCausalLM, its own names and defaults
    # (per-head q/k norms on, 64-wide heads, 4 key-value heads, 6 of 128 experts)
    "sarvam_moe": BuiltAs(
        "glm4_moe",
        "Glm4MoeForCausalLM",
        (
            ("num_local_experts", "n_routed_experts"),
            ("num_experts", "n_routed_experts"),
            ("num_shared_experts", "n_shared_experts"),
            ("use_qkv_bias", "attention_bias"),
        ),
        (
            ("vocab_size", 262144),
            ("hidden_size", 4096),
            ("intermediate_size", 8192),
            ("num_hidden_layers", 19),
            ("num_attention_heads", 64),
            ("num_key_value_heads", 4),
            ("head_dim", 64),
            ("moe_intermediate_size", 1024),
            ("num_experts_per_tok", 6),
            ("n_shared_experts", 1),
            ("n_routed_experts", 128),
            ("first_k_dense_replace", 1),
            ("use_qk_norm", True),
        ),
    ),
    # modular_glm4_moe_lite.py: DeepseekV3Attention (MLA) and GLM-4.5's MoE (DeepSeek-V3's
    # block), the layers' MLPs listed in mlp_layer_types (default: one dense, then sparse)
    "glm4_moe_lite": BuiltAs(
        "deepseek_v3",
        "Glm4MoeLiteForCausalLM",
        (("num_local_experts", "n_routed_experts"), ("head_dim", "qk_rope_head_dim")),
        (
            ("vocab_size", 154880),
            ("hidden_size", 2048),
            ("intermediate_size", 10240),
            ("moe_intermediate_size", 1536),
            ("num_hidden_layers", 47),
            ("num_attention_heads", 20),
            ("num_key_value_heads", 20),
            ("n_shared_experts", 1),
            ("n_routed_experts", 64),
            ("kv_lora_rank", 512),
            ("q_lora_rank", 768),
            ("qk_rope_head_dim", 64),
            ("v_head_dim", 256),
            ("qk_nope_head_dim", 192),
            ("num_experts_per_tok", 4),
            ("first_k_dense_replace", 1),  # mlp_layer_types left out: one dense layer first
        ),
    ),
    # modular_youtu.py: Llama's layer with DeepseekV3Attention (MLA) and a dense gated MLP in
    # every layer: DeepSeek-V3 without routed experts
    "youtu": BuiltAs(
        "deepseek_v3",
        "YoutuForCausalLM",
        (),
        (
            ("vocab_size", 128256),
            ("hidden_size", 2048),
            ("intermediate_size", 6144),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 16),
            ("kv_lora_rank", 512),
            ("q_lora_rank", 1536),
            ("qk_rope_head_dim", 64),
            ("v_head_dim", 128),
            ("qk_nope_head_dim", 128),
            ("tie_word_embeddings", True),
        ),
        dense=True,
    ),
    # modular_minicpm3.py: Llama's layer with DeepseekV2Attention (MLA, Llama's cos/sin rotary)
    # and a dense gated MLP in every layer; the embedding, each residual branch and the head's
    # input scaled by constants (multiplies that keep nothing)
    "minicpm3": BuiltAs(
        "deepseek_v3",
        "MiniCPM3ForCausalLM",
        (),
        (
            ("vocab_size", 73448),
            ("hidden_size", 2560),
            ("intermediate_size", 6400),
            ("num_hidden_layers", 62),
            ("num_attention_heads", 40),
            ("num_key_value_heads", 40),
            ("kv_lora_rank", 256),
            ("q_lora_rank", 768),
            ("qk_rope_head_dim", 32),
            ("v_head_dim", 64),
            ("qk_nope_head_dim", 64),
            ("tie_word_embeddings", True),
        ),
        dense=True,
    ),
    # modular_axk1.py (SK Telecom's A.X-K1): DeepSeek-V3's layer, MLA always with a q LoRA rank,
    # an RMSNorm on each MoE block's output (hf_config_llama.py ``moe_post_norm``)
    "axk1": BuiltAs(
        "deepseek_v3",
        "AXK1ForCausalLM",
        (("num_local_experts", "n_routed_experts"),),
        (
            ("vocab_size", 163840),
            ("hidden_size", 7168),
            ("intermediate_size", 18432),
            ("moe_intermediate_size", 2048),
            ("num_hidden_layers", 61),
            ("num_attention_heads", 64),
            ("num_key_value_heads", 64),
            ("n_shared_experts", 1),
            ("n_routed_experts", 192),
            ("kv_lora_rank", 512),
            ("q_lora_rank", 1536),
            ("qk_rope_head_dim", 64),
            ("v_head_dim", 128),
            ("qk_nope_head_dim", 128),
            ("num_experts_per_tok", 8),
            ("first_k_dense_replace", 1),
        ),
    ),
    # modular_deepseek_v32.py: DeepSeek-V3's layer (MLA with a q LoRA rank, the MoE) with DeepSeek
    # Sparse Attention's indexer in every layer (hf_config_llama.py ``dsa_indexer``)
    "deepseek_v32": BuiltAs(
        "deepseek_v3",
        "DeepseekV32ForCausalLM",
        (),
        (
            ("vocab_size", 129280),
            ("hidden_size", 7168),
            ("intermediate_size", 18432),
            ("moe_intermediate_size", 2048),
            ("num_hidden_layers", 61),
            ("num_attention_heads", 128),
            ("num_key_value_heads", 128),
            ("n_shared_experts", 1),
            ("n_routed_experts", 256),
            ("kv_lora_rank", 512),
            ("q_lora_rank", 1536),
            ("qk_rope_head_dim", 64),
            ("v_head_dim", 128),
            ("qk_nope_head_dim", 128),
            ("num_experts_per_tok", 8),
            ("first_k_dense_replace", 3),
            ("index_topk", 2048),
            ("index_head_dim", 128),
            ("index_n_heads", 64),
        ),
    ),
    # modular_glm_moe_dsa.py (GLM-5): DeepSeek-V3.2's layer, the indexer's rotary interleaved
    "glm_moe_dsa": BuiltAs(
        "deepseek_v3",
        "GlmMoeDsaForCausalLM",
        (),
        (
            ("vocab_size", 154880),
            ("hidden_size", 6144),
            ("intermediate_size", 12288),
            ("moe_intermediate_size", 2048),
            ("num_hidden_layers", 78),
            ("num_attention_heads", 64),
            ("num_key_value_heads", 64),
            ("n_shared_experts", 1),
            ("n_routed_experts", 256),
            ("kv_lora_rank", 512),
            ("q_lora_rank", 2048),
            ("qk_rope_head_dim", 64),
            ("v_head_dim", 256),
            ("qk_nope_head_dim", 192),
            ("num_experts_per_tok", 8),
            ("first_k_dense_replace", 3),
            ("index_topk", 2048),
            ("index_head_dim", 128),
            ("index_n_heads", 32),
        ),
    ),
    # modeling_biogpt.py: OPT's pre-LayerNorm layer (q/k/v/out_proj and fc1/fc2 with biases,
    # learned positions offset by 2, a final LayerNorm, the head tied), its own key names and
    # defaults; the embeddings scaled by sqrt(hidden) (a multiply that keeps nothing)
    "biogpt": BuiltAs(
        "opt",
        "BioGptForCausalLM",
        (
            ("intermediate_size", "ffn_dim"),
            ("hidden_dropout_prob", "dropout"),
            ("attention_probs_dropout_prob", "attention_dropout"),
            ("hidden_act", "activation_function"),
        ),
        (
            ("vocab_size", 42384),
            ("hidden_size", 1024),
            ("num_hidden_layers", 24),
            ("num_attention_heads", 16),
            ("intermediate_size", 4096),
            ("hidden_act", "gelu"),
            ("hidden_dropout_prob", 0.1),
            ("attention_probs_dropout_prob", 0.1),
            ("max_position_embeddings", 1024),
        ),
    ),
    "gpt-sw3": BuiltAs("gpt2", "GPT2LMHeadModel"),
    # modeling_solar_open.py: GLM-4.5's layer (Glm4MoeAttention without q/k norms, the same
    # TopkRouter, experts and shared experts), every layer MoE (SolarOpenConfig has neither
    # first_k_dense_replace nor a dense intermediate_size)
    "solar_open": BuiltAs(
        "glm4_moe",
        "SolarOpenForCausalLM",
        (),
        (
            ("first_k_dense_replace", 0),
            ("intermediate_size", 0),
            ("moe_intermediate_size", 1280),
            ("head_dim", 128),
            ("vocab_size", 196608),
            ("num_hidden_layers", 48),
            ("num_attention_heads", 64),
        ),
    ),
}


#: the types built as an MoE family's class with no routed experts in any layer
DENSE_BUILT_AS = frozenset(name for name, alias in BUILT_AS.items() if alias.dense)


def read_built_as(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The config as its family's parser reads it, and the caveat that says so; a config of any
    other type is returned as it is, with no caveat. (``--family`` then names the same family,
    or contradicts the one the type is built as.)"""
    raw = cfg.get("model_type")
    name = raw.strip().lower() if isinstance(raw, str) else ""
    alias = BUILT_AS.get(name)
    if alias is None:
        from constraints.model_spec import SUPPORTED_TYPES

        like = None if name in SUPPORTED_TYPES else structure_families().get(name)
        if like is None:
            return cfg, ""
        caveat = (
            f"model_type '{name}' read as {like['family']}: transformers "
            f"{structure_families_version()} builds {like['model_class']} with {like['family']}'s "
            "structure (constraints/data/structure_families.json)."
        )
        from constraints.hf_config_traits import ABSENT_DEFAULTS

        return {**ABSENT_DEFAULTS.get(name, {}), **cfg, "model_type": like["family"]}, caveat
    out = {**dict(alias.absent), **cfg}
    for theirs, ours in alias.renames:
        if theirs in cfg and ours in cfg and cfg[theirs] != cfg[ours]:
            raise FitplanError(
                f"{name}: {theirs} {excerpt(cfg[theirs])} and {ours} {excerpt(cfg[ours])} disagree",
                f"transformers reads {theirs} as {ours}, one number: keep one",
            )
        if theirs in out and ours not in cfg:
            out[ours] = out.pop(theirs)
        else:
            out.pop(theirs, None)
    if alias.dense:
        for key in _MOE_KEYS:
            out.pop(key, None)
        out["n_routed_experts"] = 0
        out["num_experts_per_tok"] = 0
        out["moe_intermediate_size"] = 0
    out["model_type"] = alias.family
    caveat = (
        f"model_type '{name}' read as {alias.family}: transformers builds it as "
        f"{alias.model_class}."
    )
    return out, caveat


_MOE_KEYS = (
    "n_routed_experts",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
)


@cache
def _structure_table() -> dict[str, Any]:
    import json

    path = Path(__file__).resolve().parent / "data" / "structure_families.json"
    return json.loads(path.read_text(encoding="utf-8"))


def structure_families() -> dict[str, dict[str, Any]]:
    """Types with their own class but a supported family's structure (tools/structure_families.py):
    model_type → {family, model_class, ...}; the BUILT_AS aliases apart."""
    return {k: v for k, v in _structure_table()["types"].items() if k not in BUILT_AS}


def structure_families_version() -> str:
    return str(_structure_table()["transformers_version"])
