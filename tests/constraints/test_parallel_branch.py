"""The first layer's parallel MLP branch under LoRA (Saved.parallel_branch): transformers' Phi
run on the CPU with PEFT's LoRA on the attention, the tensors autograd saves hooked. The MLP of the
first layer reads the input norm of the frozen embedding's output, which does not require grad, so
none of its ops is recorded; the second layer's MLP (its input requires grad through the first
layer's adapters) saves its tensors; with the input's grad enabled (what PEFT does for
checkpointing) the first layer's saves them too."""

from __future__ import annotations

import pytest

from constraints.activation_coefficients import activation_coefficients
from constraints.models import spec_from_hf_config

pytestmark = pytest.mark.heavy

PHI = {
    "model_type": "phi",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 128,
    "pad_token_id": 0,
}


def test_the_first_layers_mlp_branch_is_recorded_only_with_input_grads() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    def saved_in_mlps(enable_input_grads: bool) -> list[int]:
        cfg = AutoConfig.for_model(**PHI)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
        if enable_input_grads:
            model.enable_input_require_grads()
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj"])
        )
        model.train()
        counts: list[int] = []
        for layer in model.base_model.model.model.layers:
            mlp = layer.mlp
            original = mlp.forward

            def counted(x, original=original):
                seen = []
                with torch.autograd.graph.saved_tensors_hooks(
                    lambda t: seen.append(t) or t, lambda t: t
                ):
                    out = original(x)
                counts.append(len(seen))
                return out

            mlp.forward = counted
        ids = torch.randint(0, PHI["vocab_size"], (1, 16))
        model(input_ids=ids, labels=ids).loss.backward()
        return counts

    assert saved_in_mlps(False)[0] == 0 and saved_in_mlps(False)[1] > 0
    assert saved_in_mlps(True)[0] == saved_in_mlps(True)[1] > 0


def test_the_model_leaves_out_the_first_layers_branch_under_lora_only() -> None:
    spec = spec_from_hf_config(PHI, id="phi")
    lora = activation_coefficients(spec, "lora", "attention", "flash", False, False)
    mlp_lora = activation_coefficients(spec, "lora", "fc1,fc2", "flash", False, False)
    full = activation_coefficients(spec, "full", "", "flash", False, False)
    # gelu_new in python ops: fc1's output, tanh, 0.5·x and 1 + tanh, intermediate-wide each;
    # and, whatever the adapters, the input LayerNorm's input and per-token mean and rstd
    norm = PHI["hidden_size"] + 2
    assert sum(lora.first_layer_unrecorded.values()) == 4 * PHI["intermediate_size"] + norm
    assert sum(mlp_lora.first_layer_unrecorded.values()) == norm
    assert sum(full.first_layer_unrecorded.values()) == 0
