"""The held-out memory rows (constraints/data/calibration/heldout_memory.csv) are read and predicted.

These rows are published measurements that nothing in fitplan is fitted to; the tests check that
each one maps to a configuration and gets a prediction, not that the errors are small (the errors
are reported in the calibration README and by ``fitplan accuracy heldout_memory.csv``).
"""

from __future__ import annotations

import csv

import pytest

from searcher.truth import accuracy as A
from searcher.truth import cases as K
from searcher.truth import memory_rows as MR
from searcher.truth import predict as P


def _rows(path: object) -> list[dict[str, str]]:
    with open(str(path), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def report() -> tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary]:
    return A.memory_report([K.HELDOUT_MEMORY_CSV])


def test_heldout_file_has_the_calibration_columns_and_its_own_ids() -> None:
    heldout = _rows(K.HELDOUT_MEMORY_CSV)
    assert len(heldout) >= 20
    with open(K.MEMORY_CSV, encoding="utf-8") as f:
        shipped_header = next(csv.reader(f))
    assert list(heldout[0]) == shipped_header
    ids = [r["id"] for r in heldout]
    assert len(set(ids)) == len(ids)
    # disjoint from the calibration rows and from the overrides, which are keyed by row id
    assert not set(ids) & {r["id"] for r in _rows(K.MEMORY_CSV)}
    assert not set(ids) & set(K.overrides())
    for r in heldout:
        assert r["source"] and r["source_location"] and r["source_version_or_date"], r["id"]


def test_every_trusted_heldout_row_is_predicted(
    report: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    results, excluded, summary = report
    trusted = {r["id"] for r in _rows(K.HELDOUT_MEMORY_CSV) if r["trust"] not in ("low", "reject")}
    assert {r.case.row_id for r in results} == trusted
    # the rows left out are the low-trust ones, each with its reason
    assert all(c.excluded and c.excluded.startswith("trust low") for c in excluded)
    assert summary.used == len(trusted)
    for r in results:
        assert r.predicted_bytes > 0 and r.case.measured_bytes > 0, r.case.row_id


def _lora_row(**cells: str) -> dict[str, str]:
    row = {
        "id": "t-1",
        "source": "Lightning-AI/litgpt",
        "model": "llama-3.2-1b",
        "method": "LoRA",
        "adapter_details": "r=8 alpha=16 on q_proj,v_proj",
        "weight_precision": "bf16 (no fp32 master)",
        "compute_precision": "bf16",
        "optimizer": "torch AdamW",
        "micro_batch_size": "1",
        "seq_len": "512",
        "grad_checkpointing": "off",
        "num_gpus": "1",
        "gpu_type": "A10G 24GB",
        "sharding_offload": "none",
        "peak_memory": "4.0",
        "memory_unit": "GB (1e9 bytes)",
        "memory_metric": "max_memory_allocated",
        "trust": "medium",
    }
    row.update(cells)
    return row


def test_untied_head_copy_is_read_from_other_settings() -> None:
    """litgpt builds lm_head beside the embedding even for a tied checkpoint: the row says so."""
    tied = MR.memory_case(_lora_row())
    untied = MR.memory_case(
        _lora_row(other_settings="untied lm_head (litgpt copies the embedding)")
    )
    assert tied.spec is not None and untied.spec is not None
    assert tied.spec.tie_embeddings and not untied.spec.tie_embeddings
    assert any("not tied" in a for a in untied.assumptions)
    # one more vocab x hidden matrix in bf16: Llama-3.2-1B's 128256 x 2048 (HF config.json)
    extra = P.predict_memory(untied).predicted_bytes - P.predict_memory(tied).predicted_bytes
    assert extra == pytest.approx(128256 * 2048 * 2, rel=0.02)


def test_untied_words_change_nothing_for_an_untied_model_or_other_wording() -> None:
    untied_model = MR.memory_case(
        _lora_row(model="mistral-7b-v0.1", other_settings="untied lm_head")
    )
    assert untied_model.spec is not None and not untied_model.spec.tie_embeddings
    assert not any("not tied" in a for a in untied_model.assumptions)
    # "untied" must name the head: other wording leaves the checkpoint's tying as it is
    plain = MR.memory_case(_lora_row(other_settings="tied head, untied nothing else"))
    assert plain.spec is not None and plain.spec.tie_embeddings


def test_double_quant_in_the_weight_precision_is_nf4_dq() -> None:
    qlora = {"method": "QLoRA", "optimizer": "torch AdamW", "source": "huggingface/peft docs"}
    nested = MR.memory_case(
        _lora_row(**qlora, weight_precision="NF4 base (double quant, bf16 quant storage)")
    )
    plain = MR.memory_case(_lora_row(**qlora, weight_precision="NF4 base + bf16 adapters"))
    assert nested.config is not None and plain.config is not None
    assert (nested.config.quant, plain.config.quant) == ("nf4-dq", "nf4")
