"""The types read through layer traits (constraints/hf_config_traits.py ``LAYER_TRAITS`` and
``BIAS_KEYS``) held to the step tracer: their default configs from transformers (the arch sweep's,
tests/data/arch_sweep_configs.json), narrowed so that a trace is quick, traced with PEFT's LoRA
and compared with the analytic peak allocated. The tracer runs transformers' own modeling code
for the type, so a trait read wrong (a norm, a bias, a fused projection) shows as a gap."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import benchmark

pytestmark = pytest.mark.heavy

CONFIGS = json.loads(
    (Path(__file__).parents[1] / "data" / "arch_sweep_configs.json").read_text(encoding="utf-8")
)
NARROW = {
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 3,
    "vocab_size": 4096,
    "pad_token_id": 0,
}
#: the issue-10 goal (docs/trace_sweep.md): median |error| within 2 %, every row within 5 %
MEDIAN, WORST = 0.02, 0.05


#: Starcoder2 as its published checkpoints train: residual, embedding and attention dropout 0.1
#: (the config class defaults them to 0)
DROPOUT = {"residual_dropout": 0.1, "embedding_dropout": 0.1, "attention_dropout": 0.1}
#: GPT-2-style configs narrowed under their own keys
GPT2_NARROW = {"n_embd": 512, "n_head": 8, "n_layer": 3, "n_inner": 1376, "n_positions": 512}
TYPES = [
    ("glm", {}),
    ("glm4", {}),
    ("exaone4", {}),
    ("arcee", {}),
    ("starcoder2", {}),
    ("starcoder2", DROPOUT),
    ("gpt_neox", {}),
    ("gpt_neox", {"use_parallel_residual": False}),
    ("gpt_neox", {"hidden_dropout": 0.1, "attention_dropout": 0.1}),
    ("phi", {}),
    # Phi-2's published config: resid_pdrop 0.1
    ("phi", {"resid_pdrop": 0.1}),
    ("phi", {"qk_layernorm": True}),
    ("cohere", {}),
    ("cohere", {"use_qk_norm": True, "attention_bias": True}),
    ("cohere2", {}),
    ("nemotron", {}),
    ("hunyuan_v1_dense", {}),
    ("vaultgemma", {}),
    ("stablelm", {"use_qkv_bias": True}),
    ("stablelm", {"hidden_dropout": 0.1, "attention_dropout": 0.1}),
    # Jais 2: Nemotron's MLP (relu², biases) between nn.LayerNorms
    ("jais2", {}),
    # HyperCLOVA X: Granite's layer with a norm after attention and after the MLP
    ("hyperclovax", {}),
    # Youtu: Llama's layer with DeepSeek-V3's MLA, no experts (its rotary is qk_rope_head_dim wide)
    (
        "youtu",
        {
            "num_key_value_heads": 8,
            "head_dim": 16,
            "q_lora_rank": 128,
            "kv_lora_rank": 64,
            "qk_nope_head_dim": 48,
            "qk_rope_head_dim": 16,
            "v_head_dim": 64,
        },
    ),
    # Persimmon (Fuyu's text model): per-head q/k LayerNorms on views of the fused projection,
    # partial rotary, relu²
    ("persimmon", {}),
    ("persimmon", {"qk_layernorm": False, "hidden_dropout": 0.1}),
    # BioGPT: OPT's layer (read as opt) with its own dropout defaults (0.1) and a softmax in the
    # compute dtype in eager attention
    ("biogpt", {}),
    # Apertus: per-head q/k norms, an MLP without a gate through xIELU (its Python path)
    ("apertus", {}),
    # BLOOM: ALiBi added to the eager scores, q/k/v copied out of one fused projection
    ("bloom", {"n_layer": 3, "n_head": 8}),
    ("bloom", {"n_layer": 3, "n_head": 8, "hidden_dropout": 0.1, "attention_dropout": 0.1}),
    # MPT: ALiBi, q/k/v views of one fused projection, optionally clamped (the clamp keeps its
    # input)
    ("mpt", {"d_model": 512, "n_layers": 3, "n_heads": 8, "max_seq_len": 256}),
    (
        "mpt",
        {
            "d_model": 512,
            "n_layers": 3,
            "n_heads": 8,
            "max_seq_len": 256,
            "attn_config": {"clip_qkv": 6.0},
        },
    ),
    # GPT-BigCode: GPT-2's block with multi-query attention, dropout 0.1 everywhere (its defaults)
    ("gpt_bigcode", GPT2_NARROW),
    # GPT-J: a parallel block, fp32 q/k copies in eager attention; its published dropout 0.0
    ("gptj", {**GPT2_NARROW, "rotary_dim": 32}),
    ("gptj", {**GPT2_NARROW, "rotary_dim": 32, "resid_pdrop": 0.1, "attn_pdrop": 0.1}),
    # CodeGen: GPT-J's layer with one fused qkv_proj
    ("codegen", {**GPT2_NARROW, "rotary_dim": 32, "n_ctx": 512}),
    # GPT-Neo: eager only, fp32 q/k copies, a local-window layer
    (
        "gpt_neo",
        {
            "num_layers": 3,
            "attention_types": [[["global", "local"], 1], [["global"], 1]],
            "attention_layers": ["global", "local", "global"],
            "num_heads": 8,
            "max_position_embeddings": 512,
        },
    ),
]


#: per-layer lists of a default config (the narrowed depth differs), and its token ids
LISTS = ("layer_types", "mlp_layer_types", "eos_token_id", "bos_token_id", "per_layer_config")
#: keys a default config may give per layer (Gemma 3n), dropped where they are lists
PER_LAYER = ("intermediate_size", "activation_sparsity_pattern")


def _narrowed(model_type: str, extra: dict[str, Any]) -> dict[str, Any]:
    cfg = {**CONFIGS[model_type], **NARROW, **extra}
    for key in LISTS:
        if key not in extra:  # the default's per-layer lists have the default's depth
            cfg.pop(key, None)
    for key in PER_LAYER:
        if key not in extra and isinstance(cfg.get(key), list):
            cfg.pop(key)
    return cfg


KWS = [
    {"lora_targets": "all-linear", "attention": "sdpa", "recipe": "bf16-torch"},
    {"lora_targets": "attention", "attention": "eager", "lora_dropout": 0.05},
    {"lora_targets": "all-linear", "attention": "sdpa", "recipe": "amp"},
]


def _error(model_type: str, extra: dict[str, Any], kw: dict[str, Any]) -> float:
    from constraints.config import TrainConfig
    from constraints.gpus import resolve_gpu
    from constraints.models import spec_from_hf_config
    from searcher.truth.step_trace import trace_step

    hf = _narrowed(model_type, extra)
    spec = spec_from_hf_config(hf, id=model_type, name=model_type)
    cfg = {"method": "lora", "micro_batch": 2, "seq_len": 256, "recipe": "bf16-torch", **kw}
    if not spec.sdpa_supported:  # transformers runs the type eager (it refuses sdpa)
        cfg["attention"] = "eager"
    traced = trace_step(spec, TrainConfig(**cfg), hf_config_dict=hf).peak_bytes
    analytic, _phase = benchmark("trace_sweep").analytic_as_traced(spec, cfg, resolve_gpu("h100"))
    return analytic / traced - 1


def test_lora_on_the_newer_types_matches_its_trace() -> None:
    """Each row within 5 %, the median within 2 % (the goal of the trace sweep, docs/trace_sweep.md).
    Seen when added: GLM +0.6 … +1.6 %, GLM-4 +0.6 … +1.5 %, EXAONE 4 −0.1 … +0.6 %, Arcee
    +0.9 … +1.8 %, StarCoder 2 +0.5 … +1.6 %, GPT-NeoX +0.6 … +3.0 %, Phi +0.4 … +3.6 % (the
    parallel layers under amp: each linear casts the shared norm output on its own). Since the
    first layer's input norm records nothing under LoRA (the frozen embedding's output needs no
    grad): GLM-4 −0.1 … +0.6 %; Cohere −0.1 … +2.1 % (its LayerNorm keeps two fp32 centred
    copies); StableLM −0.1 … +1.4 %; GPT-BigCode −0.0 … +0.3 %
    (eager attention keeps the k and v it expands to every head, fused q/k/v or not); GPT-J
    −0.3 … +1.6 %; GPT-Neo −0.7 … +2.2 %;
    CodeGen −0.5 … +1.5 %; Nemotron −0.1 … +0.8 %; Hunyuan
    −0.1 … +0.6 %; VaultGemma −0.1 … +0.6 % (eager: no SDPA under soft-capping); Jais 2
    −0.1 … +0.8 %; HyperCLOVA X −0.1 … +0.6 %; Youtu −0.6 … +0.5 %; BLOOM −0.0 … +0.5 %;
    MPT −0.1 … +0.5 %; Persimmon −0.1 … +0.8 % (eager −4.7 % before the q/k LayerNorms'
    fused input was counted); BioGPT −0.9 … +0.9 % (+7.7 % eager before its compute-dtype softmax);
    Apertus −0.1 … +0.6 % (xIELU's expm1 in fp32 under autocast)."""
    pytest.importorskip("peft")
    from searcher.truth.hf_build import quiet_transformers

    quiet_transformers()
    errors = [(_error(t, extra, kw), t, kw) for t, extra in TYPES for kw in KWS]
    assert statistics.median(abs(e) for e, _t, _kw in errors) <= MEDIAN
    worst = max(errors, key=lambda e: abs(e[0]))
    assert abs(worst[0]) <= WORST, worst


def test_peft_default_targets_are_refused_where_peft_has_none() -> None:
    from constraints.errors import FitplanError
    from constraints.lora_targets import lora_target_groups
    from constraints.models import spec_from_hf_config

    spec = spec_from_hf_config(CONFIGS["glm"], id="glm", name="glm")
    with pytest.raises(FitplanError, match="PEFT has no default LoRA targets for model_type glm"):
        lora_target_groups(spec, "default")
    # Granite is read with Llama's structure, but PEFT keys its default on granite: none
    granite = spec_from_hf_config(CONFIGS["granite"], id="granite", name="granite")
    assert granite.family == "llama" and granite.config_type == "granite"
    with pytest.raises(FitplanError, match="for model_type granite"):
        lora_target_groups(granite, "default")
    llama = spec_from_hf_config(CONFIGS["llama"], id="llama", name="llama")
    assert {g.name for g in lora_target_groups(llama, "default")} == {
        "self_attn.q_proj.weight",
        "self_attn.v_proj.weight",
    }


#: MoE layers narrowed too: 8 experts, 2 per token, 256 wide, one dense layer first
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 256}
DEEPSEEK_MOE = {**MOE, "n_routed_experts": 8, "first_k_dense_replace": 1, "n_shared_experts": 1}
#: DeepSeek's MLA narrowed (its rotary takes head_dim from qk_rope_head_dim)
MLA = {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 48, "qk_rope_head_dim": 16}
MOE_TYPES = [
    ("glm4_moe", DEEPSEEK_MOE, KWS[:2]),
    ("glm4_moe", {**DEEPSEEK_MOE, "n_shared_experts": 2, "use_qk_norm": True}, KWS[:2]),
    (
        "deepseek_v3",
        {**DEEPSEEK_MOE, **MLA, "head_dim": 16, "v_head_dim": 64, "n_group": 1, "topk_group": 1},
        KWS[:1],
    ),
    ("qwen2_moe", {**MOE, "num_experts": 8, "shared_expert_intermediate_size": 256}, KWS[:2]),
    ("qwen3_moe", {**MOE, "num_experts": 8, "num_local_experts": 8}, KWS[:2]),
    # Solar Open: GLM-4.5's layers, every one MoE (read as glm4_moe)
    ("solar_open", {**MOE, "n_routed_experts": 8, "n_shared_experts": 1}, KWS[:2]),
    # glm4_moe_lite (GLM-4.7-Flash): DeepSeek-V3's MLA and MoE, the MLPs listed per layer
    (
        "glm4_moe_lite",
        {
            **DEEPSEEK_MOE,
            **MLA,
            "num_key_value_heads": 8,
            "head_dim": 16,
            "v_head_dim": 64,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
        },
        KWS[:2],
    ),
    # ERNIE 4.5 MoE: an fp32 router with a frozen score correction, two shared experts
    (
        "ernie4_5_moe",
        {"moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 256},
        KWS[:2],
    ),
    # FlexOlmo: OLMoE's MoE in OLMo 2's layer (norms after attention and the MLP)
    ("flex_olmo", {"num_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 256}, KWS[:2]),
    # Granite MoE: Mixtral's layer with a Parameter router and its multipliers; the shared
    # variant's fused shared MLP (adapted by all-linear)
    (
        "granitemoe",
        {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 256},
        KWS[:2],
    ),
    (
        "granitemoeshared",
        {
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "intermediate_size": 256,
            "shared_intermediate_size": 512,
        },
        KWS[:2],
    ),
    # EXAONE MoE: EXAONE 4's attention (per-head q/k norms) in OLMoE's pre-norm layer around
    # DeepSeek-V3's MoE, the MLPs listed per layer (a shorter window: WINDOWED below)
    (
        "exaone_moe",
        {
            **MOE,
            "num_experts": 8,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
            "sliding_window": 1024,
        },
        KWS[:2],
    ),
    # Phi-3.5-MoE: Mixtral's layer between LayerNorms, a sparsemixer router PEFT cannot wrap
    ("phimoe", {"num_local_experts": 8, "intermediate_size": 256}, KWS[:2]),
    # Sarvam MoE: built as GLM-4.5's class, per-head q/k norms on by default
    ("sarvam_moe", {**DEEPSEEK_MOE, "use_qk_norm": True}, KWS[:2]),
    # MiniMax-M2: OLMoE's layer (whole-width q/k norms) under PEFT's Mixtral conversion
    ("minimax_m2", {**MOE, "num_local_experts": 8, "intermediate_size": 256}, KWS[:2]),
]


def test_lora_on_moe_layers_matches_its_trace() -> None:
    """PEFT's all-linear on transformers 5's fused MoE layers (constraints/lora_targets.py
    ``PEFT_MOE_NAMES``): the converted types adapt the expert stacks and the router, not the
    dense layers' or shared experts' MLPs; Qwen2-MoE adapts neither experts nor router. Before,
    all-linear on Qwen2-MoE was +38 % (experts counted as adapted) and DeepSeek-V3 +4.6 % (shared
    experts adapted, the attention adapters of the MoE layers after the dense ones not counted:
    −6.1 % on GLM-4.5 with attention targets). Seen when fixed: GLM-4.5 −1.0 … +1.5 %, DeepSeek-V3
    −1.0 %, Qwen2-MoE −0.7 … +0.1 %, Qwen3-MoE +1.4 … +1.9 %, MiniMax-M2 +1.4 … +1.8 %, Solar Open −1.8 … +1.4 %,
    Sarvam MoE −0.2 … +0.5 %, GLM-4.7-Flash −1.9 … +0.3 %,
    ERNIE 4.5 MoE −2.2 … +0.2 %, FlexOlmo +0.5 … +1.0 %, Granite MoE −0.2 … +0.6 %,
    EXAONE MoE −1.9 … +0.5 %, Phi-3.5-MoE −0.2 … +0.5 %. (amp is not traced: the tracer's
    CPU grouped_mm refuses fp32 inputs.)"""
    pytest.importorskip("peft")
    from searcher.truth.hf_build import quiet_transformers

    quiet_transformers()
    errors = [(_error(t, extra, kw), t, kw) for t, extra, kws in MOE_TYPES for kw in kws]
    assert statistics.median(abs(e) for e, _t, _kw in errors) <= MEDIAN
    worst = max(errors, key=lambda e: abs(e[0]))
    assert abs(worst[0]) <= WORST, worst


#: a window shorter than the traced sequence (256): SDPA is handed a mask on those layers
WINDOWED = [
    ("mistral", {"sliding_window": 128}),
    ("gemma3_text", {"sliding_window": 128, "num_hidden_layers": 6}),
    (
        "exaone_moe",
        {
            **MOE,
            "num_experts": 8,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
            "sliding_window": 128,
        },
    ),
]


def test_windowed_layers_under_sdpa_match_their_trace() -> None:
    """Once the sequence reaches the window, transformers hands SDPA a mask: K and V expanded
    to every head (no enable_gqa with a mask) and the memory-efficient kernel's 16-bit bias,
    one per windowed layer (constraints/activations.py ``masked_sdpa_bytes_per_layer``; the
    tracer keeps the bias the kernel converts the mask to). Before: Mistral −2.3 %, Gemma 3
    −2.5 %, EXAONE MoE −3.8 %; seen when fixed: Mistral −0.1 %, Gemma 3 −0.6 … −0.9 %, EXAONE
    MoE −1.8 %."""
    pytest.importorskip("peft")
    from searcher.truth.hf_build import quiet_transformers

    quiet_transformers()
    errors = [
        (_error(t, extra, kw), t, kw)
        for t, extra in WINDOWED
        for kw in (KWS[0], KWS[2])
        if not (t == "exaone_moe" and kw is KWS[2])
    ]
    worst = max(errors, key=lambda e: abs(e[0]))
    assert abs(worst[0]) <= 0.02, worst


#: Qwen 3.5 / Qwen3-Next narrowed: three gated DeltaNet layers, then a gated attention layer
#: (full_attention_interval 4); value heads twice the key heads, d_k ≠ d_v
GATED_DELTANET = {
    "num_hidden_layers": 4,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 48,
}
GRANITE_HYBRID = {
    **MOE,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "attention", "mamba", "attention"],
    "mamba_n_heads": 8,
    "mamba_d_head": "auto",
    "mamba_d_state": 32,
    "mamba_chunk_size": 64,
    "shared_intermediate_size": 512,
}
NEMOTRON_H = {
    "head_dim": 64,
    "layers_block_type": ["linear_attention", "full_attention", "mlp", "linear_attention"],
    "mamba_num_heads": 8,
    "mamba_head_dim": 64,
    "n_groups": 2,
    "ssm_state_size": 32,
    "chunk_size": 64,
}
NEMOTRON_MOE = {
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "moe_shared_expert_intermediate_size": 256,
}
QWEN_NEXT_MOE = {**MOE, "num_experts": 8, "shared_expert_intermediate_size": 256}
#: Gemma 3n narrowed: ten layers, the first three sparse, the last four reusing K/V
GEMMA3N = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "num_hidden_layers": 10,
    "num_kv_shared_layers": 4,
    "vocab_size": 1000,
    "vocab_size_per_layer_input": 1000,
    "hidden_size_per_layer_input": 32,
    "laurel_rank": 16,
    "activation_sparsity_pattern": [0.95] * 3 + [0.0] * 7,
}
#: LFM3 narrowed: eight layers (two periods of its conv / attention pattern)
LFM3 = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "num_hidden_layers": 8,
    "vocab_size": 1000,
    "conv_L_cache": 3,
}
#: Falcon-H1 narrowed: a 256-wide mixer of 8 heads
FALCON_H1 = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "mamba_d_ssm": 256,
    "mamba_n_heads": 8,
    "mamba_d_head": 32,
    "mamba_d_state": 32,
    "mamba_chunk_size": 64,
    "intermediate_size": 512,
    "vocab_size": 1000,
}
#: Gemma 4 narrowed: 128 wide, 32-wide sliding heads and 64-wide global ones
GEMMA4 = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "head_dim": 32,
    "global_head_dim": 64,
    "intermediate_size": 256,
    "hidden_size_per_layer_input": 0,
    "vocab_size": 1000,
    "vocab_size_per_layer_input": 1000,
}
#: Mamba-2 narrowed: 8 heads of 64 (expand 2 × 256), two groups, 64-token chunks
MAMBA2 = {
    "hidden_size": 256,
    "num_heads": 8,
    "head_dim": 64,
    "n_groups": 2,
    "state_size": 32,
    "chunk_size": 64,
    "vocab_size": 1000,
}
#: Mamba narrowed: a 256-wide selective scan of state 16, dt rank 8
MAMBA = {"hidden_size": 128, "state_size": 16, "vocab_size": 1000}
#: Jamba narrowed: four layers — Mamba + MLP, Mamba + MoE, attention + MLP, Mamba + MoE
JAMBA = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "attn_layer_period": 4,
    "attn_layer_offset": 2,
    "num_experts": 4,
    "vocab_size": 1000,
}
#: DeepSeek Sparse Attention's indexer narrowed
DSA = {
    "index_n_heads": 32,
    "index_head_dim": 32,
    "index_topk": 64,
    "mlp_layer_types": None,
    "num_key_value_heads": 8,
}
HYBRID = [
    ("qwen3_5_text", GATED_DELTANET, KWS),
    # twelve layers: traced at four and eight (one and two periods of the pattern), extrapolated
    ("qwen3_5_text", {**GATED_DELTANET, "num_hidden_layers": 12}, KWS[:1]),
    ("qwen3_5_moe_text", {**GATED_DELTANET, **QWEN_NEXT_MOE}, KWS[:2]),
    ("qwen3_next", {**GATED_DELTANET, **QWEN_NEXT_MOE}, KWS[:2]),
    # LFM2: gated short-convolution layers (in_proj's B, C, x views, a depthwise conv) between
    # attention layers with per-head q/k norms; the convolution's biases on
    ("lfm2", {"num_hidden_layers": 4, "full_attn_idxs": [1, 3]}, KWS),
    ("lfm2", {"num_hidden_layers": 4, "full_attn_idxs": [1, 3], "conv_bias": True}, KWS[:1]),
    # Bamba: Mamba-2 layers on transformers' torch path (fp32 chunked scan) beside attention
    (
        "bamba",
        {
            "num_hidden_layers": 4,
            "attn_layer_indices": [1, 3],
            "mamba_n_heads": 8,
            "mamba_d_head": "auto",
            "mamba_d_state": 32,
            "mamba_chunk_size": 64,
        },
        KWS,
    ),
    # Granite 4: Granite MoE's shared layer, Mamba-2 mixers where layer_types says (its legacy
    # "mamba" / "attention" names); with routed experts, and the dense variant
    ("granitemoehybrid", {**GRANITE_HYBRID, "num_local_experts": 8}, KWS[:2]),
    ("granitemoehybrid", {**GRANITE_HYBRID, "num_local_experts": 0}, KWS[::2]),
    # Nemotron-H: one mixer per block — Mamba-2, attention without rotary, relu² MLP, and an
    # MoE (fp32 sigmoid router, non-gated experts, a shared MLP), with a latent projection too
    ("nemotron_h", NEMOTRON_H, KWS),
    (
        "nemotron_h",
        {**NEMOTRON_H, **NEMOTRON_MOE, "layers_block_type": ["linear_attention", "moe"] * 2},
        KWS[:2],
    ),
    (
        "nemotron_h",
        {
            **NEMOTRON_H,
            **NEMOTRON_MOE,
            "moe_latent_size": 128,
            "layers_block_type": ["linear_attention", "moe", "full_attention", "moe"],
        },
        KWS[:1],
    ),
    (
        "lfm2_moe",
        {
            **MOE,
            "num_hidden_layers": 4,
            "layer_types": ["conv", "full_attention", "conv", "full_attention"],
            "num_dense_layers": 1,
            "num_experts": 8,
        },
        KWS[:2],
    ),
    # nanochat: weightless RMSNorms (one on the embedding), q/k normed after the rotary, relu²
    ("nanochat", {"intermediate_size": 1024, "bos_token_id": 0, "eos_token_id": 1}, KWS),
    # Gemma 3n: four AltUp streams around attention and a GeGLU MLP, LAuReL, per-layer
    # inputs, the first layers' sparsified gate, the last layers reusing keys and values
    ("gemma3n_text", GEMMA3N, KWS[:2]),
    # LFM3: LFM2's short convolution between global and sliding attention layers with a
    # sigmoid gate per head and sandwich norms; the window shorter than the sequence, ungated
    ("lfm3", LFM3, KWS),
    ("lfm3", {**LFM3, "sliding_window": 128, "use_attention_gate": False}, KWS[:1]),
    # Falcon-H1: a Mamba-2 mixer beside attention in every layer, μP multipliers, the mixer's
    # output gated alone, or through its norm before or after the gate
    ("falcon_h1", FALCON_H1, KWS),
    ("falcon_h1", {**FALCON_H1, "mamba_rms_norm": True}, KWS[:2]),
    (
        "falcon_h1",
        {**FALCON_H1, "mamba_rms_norm": True, "mamba_norm_before_gate": False},
        KWS[:1],
    ),
    # Mamba-2: the mixer alone in each block, the residual stream fp32 between blocks
    ("mamba2", MAMBA2, KWS),
    ("mamba2", {**MAMBA2, "residual_in_fp32": False, "use_bias": True}, KWS[:1]),
    # Mamba: the selective scan stepped token by token (a state per step), Falcon-Mamba's
    # weightless norms on dt, B and C
    ("mamba", MAMBA, KWS),
    ("falcon_mamba", {**MAMBA, "use_bias": True}, KWS[:2]),
    # Jamba: Mamba-1 layers (weighted norms on dt, B, C) and attention without rotary, MoE on
    # every other layer
    ("jamba", JAMBA, KWS[:2]),
    # BitNet: Llama's layer with RMSNorms on the attention output and on gate × up, relu²
    ("bitnet", {"bos_token_id": 0, "eos_token_id": 1}, KWS),
    # Granite SWA: a learnable sink per head rescaling the attention output (eager: logsumexp
    # keeps the masked scores), a window shorter than the sequence on three of four layers
    ("granite_swa", {"sliding_window": 64, "bos_token_id": 0, "eos_token_id": 1}, KWS),
    (
        "granitemoe_swa",
        {**MOE, "num_local_experts": 4, "sliding_window": 64, "bos_token_id": 0, "eos_token_id": 1},
        KWS[:2],
    ),
    # Cohere 2 MoE: Cohere 2's parallel layer with an MoE beside the attention (top-k, then
    # softmax over it), a dense prefix layer and shared experts, or Llama's RMSNorm
    ("cohere2_moe", {"num_experts": 4, "intermediate_size": 512, "sliding_window": 64}, KWS[:2]),
    (
        "cohere2_moe",
        {
            "num_experts": 4,
            "intermediate_size": 256,
            "num_shared_experts": 2,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
            "prefix_dense_intermediate_size": 768,
            "rms_norm_eps": 1e-5,
            "expert_selection_fn": "sigmoid",
        },
        KWS[:2],
    ),
    # MiniCPM3: Llama's layer with DeepSeek-V2's MLA (Llama's rotary), scaled residual branches
    (
        "minicpm3",
        {
            "num_key_value_heads": 8,
            "q_lora_rank": 128,
            "kv_lora_rank": 64,
            "qk_nope_head_dim": 48,
            "qk_rope_head_dim": 16,
            "v_head_dim": 64,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
        KWS,
    ),
    # A.X-K1: DeepSeek-V3's layer with an RMSNorm on each MoE block's output
    (
        "axk1",
        {
            **DEEPSEEK_MOE,
            **MLA,
            "v_head_dim": 64,
            "n_group": 1,
            "topk_group": 1,
            "num_key_value_heads": 8,
            "head_dim": 16,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
        },
        KWS[:2],
    ),
    # DeepSeek-V3.2 / GLM-5: MLA and DeepSeek's MoE with the sparse-attention indexer (its fp32
    # scores a forward transient, its top-k a mask SDPA keeps per layer); top 64 of 256 keys
    (
        "deepseek_v32",
        {**DEEPSEEK_MOE, **MLA, "v_head_dim": 64, "n_group": 1, "topk_group": 1, **DSA},
        KWS[:2],
    ),
    (
        "glm_moe_dsa",
        {**DEEPSEEK_MOE, **MLA, "v_head_dim": 64, "n_group": 1, "topk_group": 1, **DSA},
        KWS[:1],
    ),
    # Gemma 4: sliding and global layers of their own head widths (global_head_dim), the last
    # four reusing earlier layers' keys and values with a double-wide MLP, per-layer inputs
    (
        "gemma4_text",
        {
            **GEMMA4,
            "num_hidden_layers": 12,
            "num_kv_shared_layers": 4,
            "use_double_wide_mlp": True,
            "hidden_size_per_layer_input": 32,
        },
        KWS,
    ),
    # and its MoE beside the dense MLP, global layers whose values are their keys
    (
        "gemma4_text",
        {
            **GEMMA4,
            "num_hidden_layers": 6,
            "enable_moe_block": True,
            "num_experts": 8,
            "top_k_experts": 2,
            "moe_intermediate_size": 64,
            "attention_k_eq_v": True,
            "num_global_key_value_heads": 1,
        },
        KWS[:2],
    ),
]


def test_hybrid_layers_match_their_trace() -> None:
    """The gated DeltaNet layers on transformers' torch path (constraints/gated_deltanet.py
    ``mixer_saved``: fp32 chunk matrices and one recurrent state per chunk) beside gated
    attention layers. Seen when added: Qwen 3.5 +0.9 … +1.3 % (amp +1.2 %: under autocast the
    kernel's matmuls keep 16-bit copies where fitplan counts their fp32 inputs; twelve layers
    +1.0 %), Qwen 3.5 MoE −0.4 … −0.1 %, Qwen3-Next −0.4 … +0.7 %; LFM2 −0.1 … +0.3 % (eager
    −7.4 % before its fp32 softmax was counted); LFM2-MoE −0.2 … +0.1 %; Bamba −0.3 … −0.2 %
    (+4.2 % before what only D's, A_log's and the gated norm's gradients need was dropped under
    LoRA; amp +0.3 %: +7.0 % before the scan's einsum copies were 16-bit under autocast, the
    ``matmul32`` kind, +1.2 % while the conv was counted keeping in_proj's whole output, where
    autocast gives it a 16-bit copy of its channels);
    Granite 4 −0.4 … +0.6 %; Nemotron-H −0.4 … +0.6 % (amp +1.6 % before the conv's copy);
    Mamba-2 −0.7 … +0.3 % (amp +7.1 % with the conv's whole projection and an eager-attention
    backward transient counted for a model without attention); Mamba and Falcon-Mamba −0.5 …
    +0.0 % (−24 % before the stepped scan's backward held four full-size select gradients);
    Jamba +0.2 … +0.4 % (+2.5 % while that transient was counted beside the layer's MoE, which
    its backward has freed by then); BitNet −0.1 … +0.6 %; Granite SWA / MoE SWA −0.1 … +0.6 %; Cohere 2 MoE −1.3 … +1.9 %; MiniCPM3 −0.6 … +0.5 %; A.X-K1 −0.1 … +0.3 %; DeepSeek-V3.2 / GLM-5 −1.7 … +1.9 % (+4.6 … +8.9 % while PEFT's adapters
    on the no_grad indexer were counted keeping their inputs); Gemma 4 −2.0 … −0.0 %
    (amp −2.0 %; all-linear +7.6 % while its o_proj's input width was one for all layers, the
    global layers' 2× wider one), its MoE −0.7 … −0.2 %; nanochat −0.7 … +0.7 %; Gemma 3n −2.1 … +0.8 % (amp −2.1 %:
    −17.7 % before the AltUp streams were counted fp32 where autocast leaves them so); LFM3 −1.0 … −0.2 %; Falcon-H1 (FALCON_H1) −0.9 … +0.3 %
    (amp −6.1 % before in_proj's output × mup_vector, a buffer of the weights' dtype, was
    counted fp32 under autocast with the conv input's 16-bit copy). Before the tracer took its
    two depths a period of the layer pattern apart, a 12-layer trace extrapolated from 3 and 4
    layers (one attention layer apart) and read 21 % below."""
    pytest.importorskip("peft")
    from searcher.truth.hf_build import quiet_transformers

    quiet_transformers()
    errors = [(_error(t, extra, kw), t, kw) for t, extra, kws in HYBRID for kw in kws]
    worst = max(errors, key=lambda e: abs(e[0]))
    assert abs(worst[0]) <= 0.02, worst
