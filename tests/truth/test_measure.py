"""``fitplan measure`` on the CPU: a tiny Llama built from a config, a few real optimizer steps.

No GPU here: the CPU run records the step time and says memory is not measured; the CSV row it
appends is in the calibration format (``fitplan accuracy`` reads it).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from constraints.config import TrainConfig
from searcher.cli import main
from searcher.truth.cases import MEMORY_COLUMNS, STRUCTURED_COLUMNS
from searcher.truth.memory_rows import load_memory_cases

pytestmark = pytest.mark.heavy

TINY = str(Path(__file__).resolve().parents[1] / "data" / "tiny_llama_config.json")
BASE = ["measure", "--model", TINY, "--device", "cpu", "--steps", "2", "--seq-len", "32"]


def test_full_finetune_two_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--recipe", "bf16-torch", "--micro-batch", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["measured"]["step_times_s"]) == 2
    assert out["measured"]["tokens_per_s"] > 0
    assert "allocated" not in out["measured"]  # CPU: memory is not measured …
    assert any("not measured" in n for n in out["notes"])  # … and it says so
    assert out["predicted"]["allocated"] > 0
    assert out["config"]["micro_batch"] == 2


def test_lora_appends_a_calibration_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "measured.csv"
    argv = [
        *BASE,
        "--method",
        "lora",
        "--rank",
        "4",
        "--checkpointing",
        "full",
        "--json",
        str(path),
    ]
    assert main(argv) == 0
    assert main(argv) == 0  # appends: one header, two rows
    capsys.readouterr()
    with path.open(encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == [*MEMORY_COLUMNS, *STRUCTURED_COLUMNS]
    assert len(rows) == 2
    row = rows[0]
    assert row["method"] == "LoRA" and row["adapter_details"].startswith("r=4")
    assert row["peak_memory"] == "" and "CPU" in row["memory_metric"]
    cfg = TrainConfig(**json.loads(row["fitplan_config"]))
    assert (cfg.method, cfg.lora_rank, cfg.checkpointing) == ("lora", 4, "full")
    assert float(row["fitplan_step_time_s"]) > 0
    # fitplan accuracy reads it, and leaves CPU rows out with the reason
    cases = load_memory_cases([path])
    assert all(c.excluded and "no peak memory" in c.excluded for c in cases)
    assert main(["accuracy", str(path)]) == 0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--zero", "3", "--gpus", "2"], "one process"),
        (["--recipe", "bf16-pure"], "bf16-pure"),
        (["--method", "qlora", "--quant", "nf4"], "QLoRA"),
        (["--loss", "chunked"], "--loss chunked"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_measure_refuses_clearly(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_measure_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--model", "no-such-model", "--device", "cpu"]) == 2
    assert "unknown model" in capsys.readouterr().err
