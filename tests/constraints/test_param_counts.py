"""Exact parameter counts against independent sources.

- ``published_total_params`` in constraints/data/models.json is copied from the reference CSV
  (shared/reference/model_architectures.csv): keras-hub presets, PEFT printouts, HF Hub
  safetensors totals, each named in the entry's ``source``.
- tests/data/transformers_param_counts.json: ``model.num_parameters()`` of the real
  transformers 5.24 classes built on the meta device from the same configs
  (tools/verify_catalog_with_transformers.py) — an independent implementation, which also covers
  the rows whose published total is withheld.
- tests/data/lora_params.csv: PEFT/torchtune printouts and Σ r·(d_in+d_out) reference rows
  (copy of shared/reference/lora_params.csv).
"""

from __future__ import annotations

import csv
import json

import pytest
from conftest import DATA

from constraints.models import catalog_ids, catalog_model, spec_from_hf_config
from constraints.params import inventory, lora_params

TRANSFORMERS = json.loads((DATA / "transformers_param_counts.json").read_text())


def test_catalog_covers_the_reference_csv() -> None:
    assert len(catalog_ids()) == 70


@pytest.mark.parametrize(
    ("model_id", "non_embedding"),
    [
        # the Pythia model card's table (huggingface.co/EleutherAI/pythia-410m-v0), "Non-Embedding
        # Params": everything but embed_in and the untied head
        ("pythia-160m", 85_056_000),
        ("pythia-410m", 302_311_424),
        ("pythia-1b", 805_736_448),
        ("pythia-1.4b", 1_208_602_624),
        ("pythia-2.8b", 2_517_652_480),
    ],
)
def test_pythia_non_embedding_counts_are_the_model_cards(model_id: str, non_embedding: int) -> None:
    inv = inventory(catalog_model(model_id))
    vocab_matrices = sum(g.numel for g in inv.groups if g.kind in ("embedding", "lm_head"))
    assert inv.total - vocab_matrices == non_embedding


@pytest.mark.parametrize("model_id", catalog_ids())
def test_total_matches_published_and_transformers(model_id: str) -> None:
    spec = catalog_model(model_id)
    total = inventory(spec).total + spec.tower_params  # a multimodal checkpoint: all of it
    if spec.published_total_params is not None:
        assert total == spec.published_total_params
    assert total == TRANSFORMERS[model_id]["num_parameters"]


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("llama-3.1-8b", 8_030_261_248),  # design.md
        ("mistral-7b-v0.1", 7_241_732_096),  # design.md
        ("gpt2-xl", 1_557_611_200),  # design.md
        ("mixtral-8x7b", 46_702_792_704),
    ],
)
def test_design_golden_counts(model_id: str, expected: int) -> None:
    assert inventory(catalog_model(model_id)).total == expected


def test_moe_active_parameters() -> None:
    """Mixtral-8x7B active per token 12,879,925,248 (reference CSV, keras-hub/Mistral)."""
    spec = catalog_model("mixtral-8x7b")
    assert inventory(spec).active(spec.experts_per_token, spec.num_experts) == 12_879_925_248
    spec = catalog_model("qwen3-30b-a3b")
    assert inventory(spec).active(spec.experts_per_token, spec.num_experts) == 3_353_032_704


def test_linear_modules_match_transformers() -> None:
    """Every nn.Linear of the transformers build (shape and count) appears in the inventory."""
    checked = 0
    for model_id in catalog_ids():
        ref = TRANSFORMERS[model_id]
        if ref.get("experts_not_linear"):
            continue
        inv = inventory(catalog_model(model_id))
        ours: dict[tuple[int, int], int] = {}
        for g in inv.groups:
            if g.is_linear and g.role != "head" and g.block:
                ours[(g.d_in, g.d_out)] = ours.get((g.d_in, g.d_out), 0) + inv.count(g)
        theirs: dict[tuple[int, int], int] = {}
        for _name, (d_in, d_out, count) in ref["linear_modules"].items():
            theirs[(d_in, d_out)] = theirs.get((d_in, d_out), 0) + count
        assert ours == theirs, model_id
        checked += 1
    assert checked >= 45


# --- LoRA --------------------------------------------------------------------------------------

OPT_350M = {  # facebook/opt-350m config.json (not in the catalog): 512-wide embeddings, post-LN
    "model_type": "opt",
    "hidden_size": 1024,
    "ffn_dim": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "word_embed_proj_dim": 512,
    "do_layer_norm_before": False,
}

BASE_TO_ID = {
    "Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b",
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "facebook/opt-6.7b": "opt-6.7b",
    "google/flan-t5-large": "flan-t5-large",
    "t5-base": "t5-base",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "meta-llama/Llama-2-7b (torchtune lora_llama2_7b)": "llama-2-7b",
    "meta-llama/Meta-Llama-3-8B / Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-1.5B": "qwen2.5-1.5b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-14B": "qwen2.5-14b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "google/gemma-2-2b": "gemma-2-2b",
    "google/gemma-2-9b": "gemma-2-9b",
}
#: rows that are not plain LoRA on nn.Linear modules, and why they are not checked here
NOT_PLAIN_LORA = {
    "DoRA (use_dora=True)": "DoRA adds a magnitude vector per adapted layer",
    "BD-LoRA (block-diagonal, nblocks=2)": "block-diagonal LoRA variant",
    "prefix tuning (not LoRA)": "prefix tuning",
    "Poly (multi-skill LoRA variant)": "Poly",
}


def _targets(text: str) -> str:
    text = text.strip()
    if text.startswith("all linear"):
        return "all-linear"
    if text.startswith("default for qwen2"):
        return "q_proj,v_proj"
    return ",".join(t.strip() for t in text.split(","))


def _lora_rows() -> list[dict[str, str]]:
    with (DATA / "lora_params.csv").open() as f:
        return list(csv.DictReader(f))


def test_lora_reference_rows() -> None:
    checked = 0
    for row in _lora_rows():
        if row["method"] in NOT_PLAIN_LORA or row["extra"]:
            continue  # modules_to_save copies, resized embeddings: not adapter params
        r = int(row["r"])
        expected = int(row["trainable_params"])
        base = row["base_model"]
        if base == "facebook/opt-350m":
            spec = spec_from_hf_config(OPT_350M, id="opt-350m")
        elif base.startswith("microsoft/Phi-3"):
            spec = catalog_model("phi-3-mini-4k")
            if row["target_modules"].startswith("all linear"):
                # the CSV note: fused modules give r·(12288+6144+19456+11264) = r·49152 per layer
                assert lora_params(spec, r, "all-linear") == r * 49152 * 32
                checked += 1
            continue  # Phi-3 has no q_proj/v_proj: the CSV's q,v rows are an unfused hypothetical
        else:
            spec = catalog_model(BASE_TO_ID[base])
        assert lora_params(spec, r, _targets(row["target_modules"])) == expected, (
            base,
            r,
            row["target_modules"],
        )
        checked += 1
    assert checked >= 55


def test_llama3_8b_r16_all_linear() -> None:
    """design.md: Llama-3-8B, r=16, all linear layers → 41,943,040."""
    assert lora_params(catalog_model("llama-3-8b"), 16, "all-linear") == 41_943_040


def test_lora_on_fused_expert_stacks_counts_peft_param_wrapper_shapes():
    """PEFT's all-linear on transformers 5 Mixtral (experts as 3-D parameter stacks, wrapped by
    ParamWrapper): the adapter shapes PEFT built on a meta Mixtral-8x7B layer, r = 64, printed
    from ``get_peft_model``: q (64, 4096) + (4096, 64), k and v (64, 4096) + (1024, 64),
    o (64, 4096) + (4096, 64), router gate (64, 4096) + (8, 64), experts gate_up_proj
    (1024, 4096) + (28672, 1024), down_proj (512, 14336) + (4096, 512); 32 layers."""
    from constraints.lora_targets import lora_params
    from constraints.models import resolve_model

    per_layer = (
        2 * 64 * 4096  # q_proj
        + 2 * (64 * 4096 + 1024 * 64)  # k_proj, v_proj
        + 2 * 64 * 4096  # o_proj
        + 64 * 4096
        + 8 * 64  # router gate
        + 1024 * 4096
        + 28672 * 1024  # experts.gate_up_proj
        + 512 * 14336
        + 4096 * 512  # experts.down_proj
    )
    assert lora_params(resolve_model("mixtral-8x7b"), 64, "all-linear") == 32 * per_layer


@pytest.mark.parametrize(
    ("model_id", "total_b", "active_b"),
    [("gpt-oss-20b", 20.91, 3.61), ("gpt-oss-120b", 116.83, 5.13)],
)
def test_gpt_oss_counts_match_the_model_card(
    model_id: str, total_b: float, active_b: float
) -> None:
    """OpenAI's gpt-oss model card (arXiv 2508.10925, Table 1), two decimals in billions; its
    active count leaves out the unembedding (vocab × hidden)."""
    spec = catalog_model(model_id)
    inv = inventory(spec)
    assert round(inv.total / 1e9, 2) == total_b
    active = inv.active(spec.experts_per_token, spec.num_experts) - spec.vocab * spec.hidden
    assert round(active / 1e9, 2) == active_b


def test_deepseek_v2_lite_total_matches_its_card() -> None:
    """DeepSeek-V2-Lite's card: 15.7B total (one decimal; its 2.4B activated leaves out an
    embedding-sized part it does not name, so only the total is held here)."""
    assert round(inventory(catalog_model("deepseek-v2-lite")).total / 1e9, 1) == 15.7
