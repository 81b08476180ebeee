"""Llama 4 under PEFT: its router (Llama4Router, an nn.Linear whose forward returns a tuple)
breaks PEFT's lora.Linear, and its routed experts are Parameters PEFT leaves alone, so fitplan
writes all-linear as the other linears' names; PEFT's own trainable count on the model
transformers builds is the reference."""

from __future__ import annotations

import pytest

from constraints.lora_targets import lora_params, peft_target_modules
from constraints.models import spec_from_hf_config

SMALL = {
    "model_type": "llama4_text",
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "intermediate_size": 256,
    "intermediate_size_mlp": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_local_experts": 4,
    "interleave_moe_layer_step": 2,
    "vocab_size": 1000,
}


def test_all_linear_is_written_without_the_router_and_counts_what_peft_builds() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = spec_from_hf_config(SMALL, id="llama4-small")
    targets = peft_target_modules(spec, "all-linear")
    assert isinstance(targets, list) and "router" not in " ".join(targets)
    config = AutoConfig.for_model(
        "llama4_text", **{k: v for k, v in SMALL.items() if k != "model_type"}
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=targets))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == lora_params(spec, 8, "all-linear")


def test_the_converted_moe_types_are_the_installed_peft_and_transformers_ones() -> None:
    """PEFT converts the targets of a fused-MoE type when transformers' conversion table maps it to
    a pattern PEFT has target and fused names for: fitplan's copy is that set, type by type."""
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    from peft.utils.transformers_weight_conversion import (
        _MOE_FUSED_TARGETS,
        _MOE_TARGET_MODULE_MAPPING,
    )
    from transformers.conversion_mapping import _MODEL_TO_CONVERSION_PATTERN

    from constraints.lora_targets import PEFT_MOE_CONVERTED

    installed = {
        t: p
        for t, p in {**_MODEL_TO_CONVERSION_PATTERN, "mixtral": "mixtral"}.items()
        if p in _MOE_TARGET_MODULE_MAPPING and p in _MOE_FUSED_TARGETS and t == t.lower()
    }
    assert installed == PEFT_MOE_CONVERTED


SMALL_MOE = {
    "num_hidden_layers": 3,
    "hidden_size": 256,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


GATED_DELTANET = {
    "num_hidden_layers": 4,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 48,
    "shared_expert_intermediate_size": 96,
}
LFM2_MOE = {
    "num_hidden_layers": 4,
    "layer_types": ["conv", "full_attention", "conv", "full_attention"],
    "num_dense_layers": 1,
    "moe_intermediate_size": 64,
}
GRANITE_HYBRID = {
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "attention", "mamba", "attention"],
    "mamba_n_heads": 8,
    "shared_intermediate_size": 96,
}
NEMOTRON_H = {
    "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"],
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "n_groups": 2,
    "n_routed_experts": 4,
    "moe_intermediate_size": 64,
    "moe_shared_expert_intermediate_size": 96,
}
QWEN_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64}


@pytest.mark.parametrize(
    ("model_type", "extra"),
    [
        ("granitemoeshared", {"num_local_experts": 4, "shared_intermediate_size": 192}),
        ("granitemoe", {"num_local_experts": 4}),
        ("phimoe", {"num_local_experts": 4}),
        ("ernie4_5_moe", {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 64}),
        ("flex_olmo", {"num_experts": 4, "num_experts_per_tok": 2, "pad_token_id": 0}),
        ("sarvam_moe", {"n_routed_experts": 4, "num_experts_per_tok": 2, "head_dim": 64}),
        (
            "exaone_moe",
            {
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "mlp_layer_types": ["dense", "sparse", "sparse"],
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            },
        ),
        # Qwen 3.5 / Qwen3-Next: three gated DeltaNet layers (their in_proj and out_proj
        # linears; the depthwise conv1d is no nn.Linear), then a gated attention layer
        ("qwen3_5_text", {**GATED_DELTANET, "intermediate_size": 128}),
        ("qwen3_5_moe_text", {**GATED_DELTANET, **QWEN_MOE}),
        ("qwen3_next", {**GATED_DELTANET, **QWEN_MOE}),
        # LFM2: short-convolution layers (in_proj, out_proj; the depthwise conv is no Linear)
        ("lfm2", {"num_hidden_layers": 4, "full_attn_idxs": [1, 3], "conv_bias": True}),
        # LFM2-MoE: a dense first layer, then sparse blocks (Parameter router, expert stacks
        # PEFT does not convert: not adapted)
        ("lfm2_moe", {**LFM2_MOE, "num_experts": 4, "num_experts_per_tok": 2}),
        # Granite 4: Granite MoE's shared layers with Mamba-2 mixers; without experts, the
        # fused shared MLP alone
        ("granitemoehybrid", {**GRANITE_HYBRID, "num_local_experts": 4}),
        ("granitemoehybrid", {**GRANITE_HYBRID, "num_local_experts": 0}),
        # Nemotron-H: one mixer per block (Mamba-2, attention, MLP, MoE); PEFT refuses the
        # Mamba out_proj there, so all-linear is written as the other names
        ("nemotron_h", {**NEMOTRON_H}),
        ("nemotron_h", {**NEMOTRON_H, "moe_latent_size": 64}),
        # Bamba: Mamba-2 layers (in_proj, out_proj; the conv, A_log, D, dt_bias are no Linear)
        (
            "bamba",
            {"num_hidden_layers": 4, "attn_layer_indices": [1, 3], "mamba_n_heads": 8},
        ),
    ],
)
@pytest.mark.parametrize("targets", ["all-linear", "attention"])
def test_lora_count_is_what_peft_builds_on_moe_types(
    model_type: str, extra: dict[str, object], targets: str
) -> None:
    """PEFT's own trainable count on the model transformers builds: whether it converts the
    type's targets (ERNIE, FlexOlmo: the expert stacks and the router), or leaves the experts
    alone (Granite MoE, Sarvam), and Granite's fused shared MLP (one input_linear)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {"model_type": model_type, **SMALL_MOE, **extra}
    spec = spec_from_hf_config(cfg, id=model_type)
    config = AutoConfig.for_model(model_type, **{**SMALL_MOE, **extra})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    modules = peft_target_modules(spec, targets)
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=modules))
    built = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_params(spec, 8, targets) == built


def test_peft_refuses_the_mamba_out_proj_of_nemotron_h_and_fitplan_says_so() -> None:
    """PEFT's _check_lora_target_modules_mamba raises for out_proj / conv1d on the Mamba-based
    types (constraints/lora_targets.py PEFT_MAMBA_TYPES): the installed PEFT must agree, and
    fitplan refuses those names in one line and writes all-linear without them."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from constraints.errors import FitplanError

    cfg = {"model_type": "nemotron_h", **SMALL_MOE, **NEMOTRON_H}
    config = AutoConfig.for_model("nemotron_h", **{**SMALL_MOE, **NEMOTRON_H})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="incompatible with Mamba-based models"):
        get_peft_model(model, LoraConfig(r=8, target_modules=["out_proj"]))
    spec = spec_from_hf_config(cfg, id="nemotron-h")
    with pytest.raises(FitplanError, match="PEFT refuses LoRA on out_proj"):
        lora_params(spec, 8, "in_proj,out_proj")
    assert "out_proj" not in peft_target_modules(spec, "all-linear")
