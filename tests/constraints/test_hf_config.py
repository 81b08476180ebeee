"""Reading config.json variants (names, defaults, families) and refusing what cannot be modelled."""

from __future__ import annotations

import pytest

from constraints.errors import FitplanError
from constraints.models import spec_from_hf_config
from constraints.params import inventory

LLAMA = {
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "vocab_size": 1000,
}


def count(cfg: dict) -> int:
    return inventory(spec_from_hf_config(cfg, id="t")).total


def test_missing_kv_heads_means_mha() -> None:
    s = spec_from_hf_config(LLAMA, id="t")
    assert s.kv_heads == s.heads == 8


def test_explicit_head_dim() -> None:
    s = spec_from_hf_config({**LLAMA, "head_dim": 128, "num_key_value_heads": 2}, id="t")
    assert s.q_width == 8 * 128 and s.kv_width == 2 * 128
    # q: 512×1024, k,v: 512×256 each, o: 1024×512, MLP 3×512×1024, 2 norms, per layer; embed + head + norm
    per_layer = 512 * 1024 + 2 * 512 * 256 + 1024 * 512 + 3 * 512 * 1024 + 2 * 512
    assert inventory(s).total == 2 * per_layer + 2 * 1000 * 512 + 512


def test_tied_embeddings_counted_once() -> None:
    assert (
        count({**LLAMA, "tie_word_embeddings": False})
        - count({**LLAMA, "tie_word_embeddings": True})
        == 1000 * 512
    )


def test_gpt2_names_and_learned_positions() -> None:
    s = spec_from_hf_config(
        {
            "model_type": "gpt2",
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "vocab_size": 100,
            "n_positions": 32,
        },
        id="t",
    )
    assert (s.hidden, s.layers, s.heads, s.intermediate, s.learned_positions) == (64, 2, 4, 256, 32)
    per_layer = 12 * 64 * 64 + 13 * 64
    assert inventory(s).total == 2 * per_layer + 100 * 64 + 32 * 64 + 2 * 64


def test_mla_and_moe_fields() -> None:
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "q_lora_rank": 16,
        "kv_lora_rank": 8,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "v_head_dim": 8,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "num_experts_per_tok": 2,
    }
    s = spec_from_hf_config(cfg, id="t")
    assert s.is_mla and s.is_moe and s.moe_layers == 2
    inv = inventory(s)
    assert inv.blocks == {"dense": 1, "moe": 2}


def test_t5_encoder_decoder() -> None:
    s = spec_from_hf_config(
        {
            "model_type": "t5",
            "d_model": 512,
            "d_kv": 64,
            "d_ff": 2048,
            "num_layers": 6,
            "num_heads": 8,
            "vocab_size": 32128,
        },
        id="t",
    )
    assert s.arch == "encoder-decoder" and s.encoder_layers == 6 and s.layers == 6
    assert inventory(s).total == 60_506_624  # t5-small, reference CSV


def test_unknown_type_is_refused_unless_a_family_is_named() -> None:
    """Issue 14: an unknown or missing model_type is never silently read as a Llama (XGLM:
    sinusoidal positions and scaled embeddings, which transformers builds unlike any family); a type transformers builds with
    Llama's structure (Granite, constraints/data/structure_families.json) says so."""
    for cfg in (
        {**LLAMA, "model_type": "xglm"},
        {k: v for k, v in LLAMA.items() if k != "model_type"},
    ):
        with pytest.raises(FitplanError, match=r"--family NAME.*fitplan models --types"):
            spec_from_hf_config(cfg, id="t")
    s = spec_from_hf_config({**LLAMA, "model_type": "xglm"}, id="t", family="llama")
    # read as llama means llama's layers and physics (the family-keyed saved tensors, kernels);
    # the config's own type is named in the caveat
    assert "read as llama (--family llama)" in s.caveats and "'xglm'" in s.caveats
    assert s.family == "llama"
    granite = spec_from_hf_config({**LLAMA, "model_type": "granite"}, id="t")
    assert (
        granite.family == "llama" and "GraniteForCausalLM with llama's structure" in granite.caveats
    )
    with pytest.raises(FitplanError, match="contradicts"):
        spec_from_hf_config({**LLAMA, "model_type": "gpt2"}, id="t", family="llama")


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "rwkv", "d_model": 64},
        {"model_type": "llama", "hidden_size": 64},
        {**LLAMA, "num_key_value_heads": 3},
        {**LLAMA, "hidden_size": 0},
        {**LLAMA, "num_hidden_layers": 2.5},
        {"model_type": "llava", "text_config": {}},
        {
            "model_type": "jamba",
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "vocab_size": 10,
            "num_experts": 16,
        },
    ],
)
def test_refusals(cfg: dict) -> None:
    with pytest.raises(FitplanError):
        spec_from_hf_config(cfg, id="t")


@pytest.mark.parametrize("switch", ["qk_layernorm", "use_parallel_residual"])
def test_a_stablelm_variant_fitplan_does_not_model_is_refused(switch: str) -> None:
    """StableLM 2 12B's per-head q/k LayerNorms and parallel residual are refused by name, not
    read as the plain layer (a wrong count and wrong saved tensors)."""
    cfg = {**LLAMA, "model_type": "stablelm", "num_key_value_heads": 2, switch: True}
    with pytest.raises(FitplanError, match=f"{switch} .* is not modelled for stablelm"):
        spec_from_hf_config(cfg, id="t")
    plain = spec_from_hf_config(
        {**LLAMA, "model_type": "stablelm", "num_key_value_heads": 2}, id="t"
    )
    assert plain.norm == "layernorm" and plain.family == "stablelm"


@pytest.mark.parametrize(
    ("cfg", "field", "default"),
    [
        (
            {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "resid_pdrop": None},
            "hidden_dropout",
            0.1,
        ),
        (
            {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "attn_pdrop": None},
            "attention_dropout",
            0.1,
        ),
        (
            {
                "model_type": "falcon",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_hidden_layers": 2,
                "hidden_dropout": None,
            },
            "hidden_dropout",
            0.0,
        ),
    ],
)
def test_a_null_dropout_reads_as_absent(cfg: dict, field: str, default: float) -> None:
    """A config.json's null is the key left out (was a TypeError, an internal error on screen)."""
    spec = spec_from_hf_config({**cfg, "vocab_size": 100}, id="t")
    assert getattr(spec, field) == default
