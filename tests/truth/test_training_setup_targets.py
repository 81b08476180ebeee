"""The measured and traced runs adapt the modules fitplan counts (GPT-2's attention projections
are ``attn.c_attn`` and ``attn.c_proj``; its MLP's ``mlp.c_proj`` shares the leaf name:
transformers modeling_gpt2.py GPT2Attention / GPT2MLP)."""

from __future__ import annotations

from constraints.models import catalog_model
from searcher.truth.training_setup import _lora_targets


def test_gpt2_attention_targets_leave_the_mlp_projection_alone() -> None:
    assert _lora_targets(catalog_model("gpt2"), "attention") == ["c_attn", "attn.c_proj"]


def test_named_sets_and_defaults() -> None:
    spec = catalog_model("falcon-7b")
    assert _lora_targets(spec, "attention") == ["query_key_value", "dense"]
    assert _lora_targets(spec, "default") is None  # PEFT's own mapping
    assert _lora_targets(spec, "all-linear") == "all-linear"
