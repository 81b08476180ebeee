"""Predictions against published measurements (no torch needed).

The measured numbers are the calibration rows' (constraints/data/calibration/, each with its
source); fitplan's predictions come from its physics. These tests fail when a change to the model
moves it away from the measurements, or when the shipped constants stop being the fit's result.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from constraints import constants as C
from constraints import throughput_constants as T
from constraints.units import GB, GiB, MiB
from searcher.cli import main
from searcher.truth import accuracy as A
from searcher.truth import cases as K
from searcher.truth import memory_rows as MR
from searcher.truth import predict as P
from searcher.truth import row_vocabulary as V

TARGET_MEDIAN = 0.05
#: where the calibration median stands since the allocator slack is fitted to the replayed
#: allocator instead of these rows (issue 34): it may not grow beyond this
MEDIAN_NOW = 0.06
#: why the median target is missed (docs/calibration.md): the nine BERT-large NVML rows
BERT_NVML_MISS = (
    "the allocator slack is fitted to the caching allocator replayed over traced decoder steps "
    "(torch 2.13), not to these rows; the transformers guide's BERT-large NVML rows (2022, torch "
    "1.x, transformers' own AdamW, an encoder the sweep does not trace) read -15 ... +8 %"
)
TARGET_WORST = 0.15
TARGET_THROUGHPUT_MEDIAN = 0.15


@pytest.fixture(scope="module")
def memory() -> tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary]:
    return A.memory_report()


@pytest.fixture(scope="module")
def throughput() -> tuple[list[P.ThroughputResult], list[K.ThroughputCase], A.Summary]:
    return A.throughput_report()


def _case(row_id: str) -> K.MemoryCase:
    return next(c for c in MR.load_memory_cases() if c.row_id == row_id)


# ---- the mapping of published rows ----------------------------------------------------------


def test_torchtune_low_memory_row_maps_to_its_recipe() -> None:
    c = _case("tt-2409-1")
    assert c.excluded is None and c.config is not None and c.spec is not None
    assert c.spec.id == "llama-3.1-8b"
    cfg = c.config
    assert (cfg.recipe, cfg.optimizer, cfg.optimizer_in_backward) == (
        "bf16-torch",
        "paged-adamw-8bit",
        True,
    )
    assert (cfg.checkpointing, cfg.loss, cfg.micro_batch, cfg.seq_len) == (
        "full",
        "chunked",
        2,
        2048,
    )
    assert c.metric == "allocated" and c.measured_bytes == pytest.approx(18.9 * GiB)


def test_fsdp_offload_row_maps_to_zero3_over_the_gpus() -> None:
    cfg = _case("tt-2409-6").config
    assert cfg is not None and (cfg.zero, cfg.offload, cfg.dp) == (3, "all", 8)


def test_amp_row_with_nvml_metric_and_the_guides_own_context() -> None:
    c = _case("hf-bert-4")
    assert c.config is not None and c.spec is not None
    assert (c.config.recipe, c.config.compute_dtype, c.config.attention) == ("amp", "fp16", "eager")
    assert c.metric == "nvml" and c.context_bytes == 1343 * MiB
    assert c.measured_bytes == 13939 * MiB  # the guide prints MiB as "MB"
    assert c.spec.id == "bert-large-uncased"


def test_peft_lora_row_keeps_adapters_in_fp32_and_reports_reserved() -> None:
    c = _case("peft-mc-2")
    assert c.config is not None
    assert (c.config.method, c.config.lora_rank, c.config.lora_targets) == (
        "lora",
        32,
        "q_proj,v_proj",
    )
    assert c.config.adapter_dtype == "fp32" and c.metric == "reserved"


@pytest.mark.parametrize(
    ("text", "bytes_per_unit"),
    [
        ("GiB", GiB),
        ("GB (1e9 bytes)", GB),
        ("MiB (printed as 'MB')", MiB),
        ("GB as labelled (torchtune logged GiB at that commit)", GiB),
        ("GiB (table header says GB; the parser reads torchtune's GiB log)", GiB),
    ],
)
def test_memory_units(text: str, bytes_per_unit: int) -> None:
    assert V.unit_of(text) == bytes_per_unit


def test_every_row_is_used_or_excluded_with_a_reason(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    results, excluded, summary = memory
    with K.MEMORY_CSV.open(encoding="utf-8") as f:
        ids = [r["id"] for r in csv.DictReader(f)]
    assert sorted(ids) == sorted([r.case.row_id for r in results] + [c.row_id for c in excluded])
    assert all(c.excluded and len(c.excluded) > 20 for c in excluded)
    # rows the notes mark low / reject are never used
    with K.MEMORY_CSV.open(encoding="utf-8") as f:
        low = {r["id"] for r in csv.DictReader(f) if r["trust"] in ("low", "reject")}
    assert low.isdisjoint(r.case.row_id for r in results)
    assert summary.used >= 30


# ---- the calibration targets ------------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason=BERT_NVML_MISS)
def test_memory_median_error_meets_the_target(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    assert memory[2].median_abs_error <= TARGET_MEDIAN


def test_memory_median_error_does_not_grow(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    assert memory[2].median_abs_error <= MEDIAN_NOW


@pytest.mark.xfail(
    strict=True,
    reason="known miss, documented in docs/calibration.md and the README: five torchtune rows "
    "(2024-04/05 READMEs, FSDP1 and early recipes; 70B CPU offload) are off by 16-36 %",
)
def test_memory_worst_error_meets_the_target(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    assert memory[2].worst_abs_error <= TARGET_WORST


def test_memory_misses_do_not_grow(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    """Until the worst-case target is met: no more than the documented five rows beyond 15 %,
    none beyond 40 %, and only torchtune rows."""
    results = memory[0]
    beyond = [r for r in results if abs(r.error) > TARGET_WORST]
    assert len(beyond) <= 5, [(r.case.row_id, round(r.error, 3)) for r in beyond]
    assert all(abs(r.error) <= 0.40 for r in results)
    assert all(r.case.source == "pytorch/torchtune" for r in beyond)


def test_throughput_median_error_meets_the_target(
    throughput: tuple[list[P.ThroughputResult], list[K.ThroughputCase], A.Summary],
) -> None:
    assert throughput[2].median_abs_error <= TARGET_THROUGHPUT_MEDIAN
    assert throughput[2].used >= 200


def test_fit_verdicts(
    memory: tuple[list[P.MemoryResult], list[K.MemoryCase], A.Summary],
) -> None:
    """Every measured run fitted its GPU; the runs the sources report as OOM must not fit."""
    from constraints.breakdown import explain

    assert all(r.fits_predicted_no_headroom for r in memory[0])
    ooms = MR.oom_cases()
    assert len(ooms) == 2
    for o in ooms:
        assert not explain(o.spec, o.config, o.gpu).verdict.fits, o.what


# ---- the shipped constants are the fit's result ------------------------------------------------


def test_memory_constants_are_the_fit() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import calibrate

    cases = [c for c in MR.load_memory_cases() if c.excluded is None]
    fit = calibrate.fit_memory(cases)
    assert fit[calibrate.CHUNKED] == pytest.approx(C.LOSS_BYTES_PER_VOCAB["chunked"])
    # the NVML rows, read without their stated context, imply the context the guide measured
    # (1343 MiB) plus what the replay-fitted slack leaves out on these torch 1.x BERT steps
    # (BERT_NVML_MISS): no less than the stated context, and within 600 MiB of it
    assert 1343 - 150 < fit["context_implied_mib"] < 1343 + 600


def test_throughput_constants_are_a_local_optimum(
    throughput: tuple[list[P.ThroughputResult], list[K.ThroughputCase], A.Summary],
) -> None:
    cases = [r.case for r in throughput[0] if not K.held_out(r.case.row_id)]
    assert len(cases) == 227  # the rows the constants were fitted to (held-out rows aside)
    here = {
        "eta_gemm": T.ETA_GEMM,
        "eta_attention": T.ETA_ATTENTION,
        "k_elementwise": T.K_ELEMENTWISE,
    }
    steps = {"eta_gemm": 0.025, "eta_attention": 0.025, "k_elementwise": 0.5}

    def score(params: dict[str, float]) -> float:
        errs = [r.error for r in P.predict_throughput(cases, **params)]
        return float(np.median(np.abs(np.log1p(errs))))

    base = score(here)
    for name, step in steps.items():
        for sign in (-1, 1):
            assert score({**here, name: here[name] + sign * step}) >= base - 1e-9, name


# ---- the command ------------------------------------------------------------------------------


def test_accuracy_command_reports_both(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory"]["summary"]["median_abs_error"] <= MEDIAN_NOW
    assert {"id", "metric", "measured_bytes", "predicted_bytes", "error"} <= set(
        out["memory"]["rows"][0]
    )
    assert all(x["reason"] for x in out["memory"]["excluded"])
    assert out["throughput"]["summary"]["used"] >= 200
    assert main(["accuracy", "--excluded"]) == 0
    text = capsys.readouterr().out
    assert "excluded peft-mc-5" in text and "median absolute error" in text


def test_user_rows_in_the_structured_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row written by `fitplan measure` on a GPU (fitplan_* columns) is compared as it is."""
    path = tmp_path / "mine.csv"
    columns = [*K.MEMORY_COLUMNS, *K.STRUCTURED_COLUMNS]
    row = dict.fromkeys(columns, "")
    row.update(
        id="mine-1",
        source="me",
        model="llama-3.2-1b",
        peak_memory="9.5",
        memory_unit="GiB",
        memory_metric="torch.cuda.max_memory_allocated",
        fitplan_model="llama-3.2-1b",
        fitplan_gpu="a100-80gb",
        fitplan_config=json.dumps({"recipe": "bf16-torch", "micro_batch": 2, "seq_len": 1024}),
        fitplan_metric="allocated",
    )
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerow(row)
    assert main(["accuracy", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "throughput" not in out
    (r,) = out["memory"]["rows"]
    assert r["id"] == "mine-1" and r["metric"] == "allocated"
    assert r["measured_bytes"] == pytest.approx(9.5 * GiB)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("a,b\n1,2\n", "neither a memory CSV"),
        ("id,model,peak_memory\nx,llama-3.2-1b,3\n", "lacks the column"),
    ],
)
def test_bad_csv_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    path = tmp_path / "x.csv"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["accuracy", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_unknown_model_in_a_row_is_excluded_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    columns = list(K.MEMORY_COLUMNS)
    row = dict.fromkeys(columns, "")
    row.update(
        id="u1",
        model="Mystery 9B",
        method="full",
        weight_precision="bf16",
        compute_precision="bf16",
        optimizer="torch AdamW",
        micro_batch_size="1",
        seq_len="512",
        gpu_type="A100 80GB",
        peak_memory="10",
        memory_unit="GiB",
        memory_metric="max_memory_allocated",
    )
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerow(row)
    (case,) = MR.load_memory_cases([path])
    assert case.excluded is not None and "unknown model" in case.excluded
