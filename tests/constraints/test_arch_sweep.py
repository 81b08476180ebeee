"""Every model_type transformers knows, read as ``--model config.json`` (tools/arch_sweep.py).

The stored counts in tests/data/arch_sweep.json are transformers 5.24's own
(``model.num_parameters()`` of the class built on the meta device from the type's default
config), an independent source: fitplan's inventory of the same default config must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constraints.errors import FitplanError
from constraints.hf_config import load_config_file
from constraints.hf_config_aliases import BUILT_AS, structure_families
from constraints.model_spec import SUPPORTED_TYPES
from constraints.models import spec_from_hf_config
from constraints.params import total_params

DATA = Path(__file__).parents[1] / "data"
TABLE = json.loads((DATA / "arch_sweep.json").read_text(encoding="utf-8"))
CONFIGS = json.loads((DATA / "arch_sweep_configs.json").read_text(encoding="utf-8"))
TYPES = TABLE["types"]


def test_every_supported_type_is_in_the_sweep_and_counted() -> None:
    assert set(SUPPORTED_TYPES) | set(BUILT_AS) <= set(CONFIGS)
    assert TABLE["classes"].get("crashed", 0) == 0
    assert TABLE["classes"].get("wrong", 0) == 0


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_default_config_counts_what_transformers_builds(model_type: str) -> None:
    ref = TYPES[model_type]["transformers_params"]
    got = total_params(spec_from_hf_config(CONFIGS[model_type], id=model_type))
    assert got == ref  # every default is counted exactly (the sweep's class allows 0.5 %)


#: types read as a family whose structure transformers builds them with (tools/structure_families.py)
BUILT_LIKE = structure_families()
UNSUPPORTED = sorted(
    t
    for t in TYPES
    if t.lower() not in SUPPORTED_TYPES
    and t.lower() not in BUILT_AS
    and t.lower() not in BUILT_LIKE
)


@pytest.mark.parametrize("model_type", sorted(BUILT_LIKE))
def test_a_type_built_like_a_family_counts_what_transformers_builds(model_type: str) -> None:
    """The data file's counts (transformers 5.25, tools/structure_families.py) against the
    sweep's own (tools/arch_sweep.py), and fitplan's reading within the sweep's 0.5 %."""
    row = BUILT_LIKE[model_type]
    assert row["default_config_params"] == TYPES[model_type]["transformers_params"]
    assert abs(row["fitplan_params"] / row["default_config_params"] - 1) <= 0.005


def test_the_sweep_covers_transformers_types() -> None:
    assert len(TYPES) > 800 and len(UNSUPPORTED) > 700


@pytest.mark.parametrize("model_type", UNSUPPORTED)
def test_an_unsupported_type_is_refused_for_its_type(model_type: str) -> None:
    """Fields such a type spells its own way (Swin's per-stage num_heads list) must not decide
    the refusal: the type is read first, and the line names it."""
    cfg = {"model_type": model_type, "hidden_size": 64, "num_heads": [3, 6], "vocab_size": 1.5}
    with pytest.raises(FitplanError) as err:
        spec_from_hf_config(cfg, id="t")
    assert f"'{model_type.lower()}'" in err.value.message
    assert "not supported" in err.value.message


def test_multimodal_refusal_names_both_types() -> None:
    cfg = {"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 64}}
    with pytest.raises(FitplanError, match=r"'llava' is multimodal.*'llama'") as err:
        spec_from_hf_config(cfg, id="t")
    assert "reads its text_config" in str(err.value.hint)  # llama alone is a supported family
    aya = {"model_type": "aya_vision", "text_config": {"model_type": "rwkv"}}
    with pytest.raises(FitplanError, match="'rwkv'") as err:
        spec_from_hf_config(aya, id="t")
    assert "not a family fitplan models" in str(err.value.hint)


def test_infinity_where_save_pretrained_writes_it_is_read(tmp_path: Path) -> None:
    """transformers' save_pretrained writes Python's Infinity (Mamba-2's time_step_limit, json.dumps
    allows it): read there, refused anywhere else."""
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "mamba2", "time_step_limit": [0.0, Infinity]}', encoding="utf-8")
    assert load_config_file(p).layer_mixers == "m" * 64
    bamba = {
        "model_type": "bamba",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "mamba_n_heads": 8,
        "attn_layer_indices": [1],
    }
    text = json.dumps(bamba)[:-1] + ', "time_step_limit": [0.0, Infinity]}'
    p.write_text(text, encoding="utf-8")
    assert load_config_file(p).layer_mixers == "ma"
    p.write_text('{"model_type": "llama", "hidden_size": Infinity}', encoding="utf-8")
    with pytest.raises(FitplanError, match="Infinity is not a number"):
        load_config_file(p)
    p.write_text(text.replace('"attn_layer_indices": [1]', '"attn_layer_indices": [NaN]'))
    with pytest.raises(FitplanError, match="NaN is not a number"):
        load_config_file(p)


QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
}


def test_expert_count_under_either_name() -> None:
    """Qwen3MoeConfig.attribute_map maps num_experts -> num_local_experts (transformers 5.x), so
    save_pretrained writes num_local_experts; the Hub's Qwen3-MoE files say num_experts."""
    hub = spec_from_hf_config({**QWEN3_MOE, "num_experts": 8}, id="t")
    saved = spec_from_hf_config({**QWEN3_MOE, "num_local_experts": 8}, id="t")
    assert hub.num_experts == saved.num_experts == 8
    assert total_params(hub) == total_params(saved)
    with pytest.raises(FitplanError, match="disagree"):
        spec_from_hf_config({**QWEN3_MOE, "num_experts": 8, "num_local_experts": 16}, id="t")


def test_qwen_sliding_window_applies_only_when_used() -> None:
    """Qwen2/Qwen3 configs keep sliding_window but set it to None (Qwen2-MoE: 0) unless
    use_sliding_window is true (configuration_qwen2.py, configuration_qwen2_moe.py, 5.24)."""
    base = {**QWEN3_MOE, "model_type": "qwen2", "sliding_window": 131072}
    assert spec_from_hf_config(base, id="t").sliding_window is None
    on = {**base, "use_sliding_window": True, "sliding_window": 4096}
    assert spec_from_hf_config(on, id="t").sliding_window == 4096
    moe = {
        **QWEN3_MOE,
        "model_type": "qwen2_moe",
        "num_experts": 8,
        "shared_expert_intermediate_size": 64,
        "sliding_window": 0,
        "use_sliding_window": False,
    }
    assert spec_from_hf_config(moe, id="t").sliding_window is None


@pytest.mark.heavy
@pytest.mark.parametrize("model_type", ["qwen3_moe", "t5", "bert", "opt"])
def test_stored_counts_are_transformers_own(model_type: str) -> None:
    """Re-derive a few stored counts with transformers (the table is not fitplan's output)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
    from arch_sweep import transformers_count

    encoder = model_type == "bert"
    got = transformers_count(model_type, encoder)
    assert got["transformers_params"] == TYPES[model_type]["transformers_params"]
    assert got["model_class"] == TYPES[model_type]["model_class"]


T5 = {
    "model_type": "t5",
    "d_model": 64,
    "d_kv": 16,
    "d_ff": 128,
    "num_layers": 2,
    "num_heads": 4,
    "vocab_size": 100,
}


def test_t5_gated_feed_forward_follows_is_gated_act() -> None:
    """modeling_t5.py builds T5DenseGatedActDense on config.is_gated_act, which a saved config
    keeps next to feed_forward_proj and which wins when given (T5Config, 5.24)."""
    derived = spec_from_hf_config({**T5, "feed_forward_proj": "gated-gelu"}, id="t")
    given = spec_from_hf_config({**T5, "feed_forward_proj": "relu", "is_gated_act": True}, id="t")
    assert derived.gated_mlp and given.gated_mlp
    assert total_params(given) == total_params(derived)
    plain = spec_from_hf_config(
        {**T5, "feed_forward_proj": "gated-gelu", "is_gated_act": False}, id="t"
    )
    assert not plain.gated_mlp
    # each of the 2 + 2 feed-forwards loses its second input projection (wi_1: d_model × d_ff)
    assert total_params(derived) - total_params(plain) == 4 * 64 * 128


def test_gpt2_with_cross_attention_is_refused() -> None:
    """GPT2Block adds a crossattention and ln_cross_attn when add_cross_attention is true."""
    cfg = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100}
    assert total_params(spec_from_hf_config(cfg, id="t")) > 0
    with pytest.raises(FitplanError, match="cross-attention"):
        spec_from_hf_config({**cfg, "add_cross_attention": True}, id="t")


@pytest.mark.parametrize("family", SUPPORTED_TYPES)
def test_a_config_read_with_family_is_that_family(family: str) -> None:
    """--family X on a renamed config gives X's physics, not only X's parameter count: the
    family-keyed terms (Gemma-2's softcap and extra norms, the fp32 softmax of the Llama-style
    families, DeepSeek's fp32 router input) follow spec.family. Before, spec.family kept the
    config's own name: `explain --family gemma2` (LoRA, 2048 tokens) planned 11.56 GiB of
    activations where gemma2's own config gets 13.45 GiB."""
    own = spec_from_hf_config(CONFIGS[family], id="t").model_dump()
    renamed = spec_from_hf_config(
        {**CONFIGS[family], "model_type": "myarch"}, id="t", family=family
    ).model_dump()
    assert "'myarch' read as" in renamed.pop("caveats")
    assert renamed.pop("config_type") == "myarch"  # PEFT's default targets key on it
    own.pop("caveats")
    own.pop("config_type")
    assert renamed == own  # every field the physics reads, family included


DROPS = [(t, k) for t in sorted(CONFIGS) for k in sorted(CONFIGS[t]) if k != "model_type"]


@pytest.mark.parametrize(("model_type", "key"), DROPS)
def test_a_field_left_out_means_the_config_class_default(model_type: str, key: str) -> None:
    """A config.json without ``key`` is the type's config class with that field at its default,
    which is the stored default config itself: fitplan counts transformers' number, or refuses
    (a field it needs). Before: a Mistral config without num_key_value_heads was read as
    multi-head (+11 %; MistralConfig's default is 8), DeepSeek-V3 without first_k_dense_replace
    as all-MoE (+4.9 %; the default is 3), Gemma without head_dim as hidden / heads (-4.1 %),
    DeepSeek-V3 without n_shared_experts as none (-0.38 %, inside the sweep's 0.5 %: exact here)."""
    cfg = {k: v for k, v in CONFIGS[model_type].items() if k != key}
    ref = TYPES[model_type]["transformers_params"]
    try:
        got = total_params(spec_from_hf_config(cfg, id="t"))
    except FitplanError as err:
        assert "\n" not in str(err)
        return
    assert got == ref


def test_a_type_transformers_builds_as_llama_is_read_as_llama() -> None:
    """EXAONE's config names num_hidden_layers num_layers (ExaoneConfig.attribute_map) and
    transformers builds it as LlamaForCausalLM: the same layers as the Llama config."""
    llama = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
    }
    exaone = {**llama, "model_type": "exaone", "num_layers": 3, "activation_function": "silu"}
    del exaone["num_hidden_layers"]
    s = spec_from_hf_config(exaone, id="t")
    assert s.family == "llama" and s.layers == 3
    assert "transformers builds it as LlamaForCausalLM" in s.caveats
    assert total_params(s) == total_params(spec_from_hf_config(llama, id="t"))
    assert spec_from_hf_config(exaone, id="t", family="llama").layers == 3
    with pytest.raises(FitplanError, match="contradicts"):
        spec_from_hf_config(exaone, id="t", family="mistral")


def test_a_renamed_key_that_disagrees_with_its_target_is_refused() -> None:
    """SarvamMoEConfig.attribute_map reads num_experts as n_routed_experts: a file that gives both,
    differently, has no one reading (transformers keeps whichever it sets last)."""
    sarvam = {
        "model_type": "sarvam_moe",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
    }
    same = spec_from_hf_config({**sarvam, "num_experts": 8, "n_routed_experts": 8}, id="t")
    assert same.num_experts == 8 and same.family == "glm4_moe"
    with pytest.raises(FitplanError, match="num_experts 8 and n_routed_experts 16 disagree"):
        spec_from_hf_config({**sarvam, "num_experts": 8, "n_routed_experts": 16}, id="t")


def test_mlp_layer_types_read_as_dense_layers_first() -> None:
    """Glm4MoeLiteConfig lists each layer's MLP (default: one dense, then sparse); fitplan reads
    a dense prefix and refuses the patterns it cannot (a dense layer after a sparse one)."""
    lite = {
        "model_type": "glm4_moe_lite",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 100,
    }
    assert spec_from_hf_config(lite, id="t").first_dense_layers == 1
    two = {**lite, "mlp_layer_types": ["dense", "dense", "sparse", "sparse"]}
    assert spec_from_hf_config(two, id="t").first_dense_layers == 2
    with pytest.raises(FitplanError, match="dense layer after a sparse one"):
        spec_from_hf_config(
            {**lite, "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]}, id="t"
        )
    with pytest.raises(FitplanError, match="lists 3 layers, num_hidden_layers is 4"):
        spec_from_hf_config({**lite, "mlp_layer_types": ["dense", "sparse", "sparse"]}, id="t")
    with pytest.raises(FitplanError, match="'dense' or 'sparse'"):
        spec_from_hf_config({**lite, "mlp_layer_types": "dense"}, id="t")
    # ExaoneMoeConfig derives the list from first_k_dense_replace only when it is left out
    exaone = {
        **lite,
        "model_type": "exaone_moe",
        "first_k_dense_replace": 3,
        "intermediate_size": 96,
    }
    assert spec_from_hf_config(exaone, id="t").first_dense_layers == 3
    assert spec_from_hf_config({**exaone, **two}, id="t").first_dense_layers == 2


def test_a_switched_trait_and_a_dense_alias() -> None:
    """HyperCLOVA X's use_post_norm adds two norms per layer (and must be a boolean); Youtu is
    built with DeepSeek-V3's attention and no experts, whatever MoE keys its file carries."""
    small = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 100,
    }
    hcx = {**small, "model_type": "hyperclovax"}
    on = total_params(spec_from_hf_config(hcx, id="t"))
    off = total_params(spec_from_hf_config({**hcx, "use_post_norm": False}, id="t"))
    assert on - off == 2 * 2 * 64
    with pytest.raises(FitplanError, match="use_post_norm must be true or false"):
        spec_from_hf_config({**hcx, "use_post_norm": "yes"}, id="t")
    youtu = spec_from_hf_config({**small, "model_type": "youtu", "n_routed_experts": 8}, id="t")
    assert youtu.family == "deepseek_v3" and not youtu.is_moe and youtu.is_mla


def test_mpt_variants_transformers_does_not_build_are_refused() -> None:
    """modeling_mpt.py builds multi-head attention without q/k LayerNorms and a 4 × d_model MLP
    whatever attn_config / expansion_ratio say: a checkpoint of another shape would not load."""
    mpt = {"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 100}
    assert spec_from_hf_config(mpt, id="t").intermediate == 256
    for bad, match in (
        ({"expansion_ratio": 2}, "expansion_ratio 2"),
        ({"attn_config": {"qk_ln": True}}, "attn_config.qk_ln"),
        ({"attn_config": {"attn_type": "multiquery_attention"}}, "attn_config.attn_type"),
        ({"attn_config": "torch"}, "attn_config must be a mapping"),
    ):
        with pytest.raises(FitplanError, match=match):
            spec_from_hf_config({**mpt, **bad}, id="t")
    clipped = spec_from_hf_config({**mpt, "attn_config": {"clip_qkv": 8}}, id="t")
    assert clipped.qkv_clip == 8.0


HOSTILE_VALUES = ("x", -1, 1e30, [1], {"a": 1}, True, None)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_a_hostile_value_in_any_field_is_refused_cleanly(model_type: str) -> None:
    """Every field of every read type's default config replaced by a string, a negative, an
    absurd number, a list, an object, a bool or null: read, counted, or refused with one
    FitplanError — never another exception (found so: string dropout keys of GPT-Neo /
    GPT-BigCode / Llama, nanochat's soft-cap, Llama 4's moe_layers as a number)."""
    base = CONFIGS[model_type]
    clean = []
    for key in base:
        if key == "model_type":
            continue
        for value in HOSTILE_VALUES:
            try:
                clean.append(total_params(spec_from_hf_config({**base, key: value}, id="t")) > 0)
            except FitplanError as err:  # one line, naming the field or the type
                clean.append("\n" not in err.message and len(err.message) < 400)
    assert clean and all(clean)
