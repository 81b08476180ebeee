"""``fitplan autotune`` on the CPU: optuna drives measured trials of a tiny Llama, the analytic
Pareto front first; the report names the measured best."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from searcher.cli import main

pytestmark = pytest.mark.heavy

TINY = str(Path(__file__).resolve().parents[1] / "data" / "tiny_llama_config.json")


def test_autotune_measures_the_front_first(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "autotune",
            "--model",
            TINY,
            "--device",
            "cpu",
            "--target-batch",
            "4",
            "--seq-len",
            "32",
            "--trials",
            "3",
            "--steps",
            "1",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(out["trials"]) == 3
    assert out["trials"][0]["seeded_from_front"]  # the analytic front is enqueued first
    done = [t for t in out["trials"] if t["state"] == "complete"]
    assert done and all(t["measured_tokens_per_s"] > 0 for t in done)
    best = out["best"]
    assert best["measured_tokens_per_s"] == max(t["measured_tokens_per_s"] for t in done)
    for t in out["trials"]:
        c = t["config"]
        assert c["micro_batch"] * c["grad_accum"] * c["dp"] == 4
        assert c["zero"] == 0 and c["tp"] == 1 and c["pp"] == 1  # one process


def test_autotune_respects_pins(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "autotune",
            "--model",
            TINY,
            "--device",
            "cpu",
            "--target-batch",
            "2",
            "--seq-len",
            "16",
            "--trials",
            "2",
            "--steps",
            "1",
            "--method",
            "lora",
            "--rank",
            "8",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert all(
        t["config"]["method"] == "lora" and t["config"]["lora_rank"] == 8 for t in out["trials"]
    )


@pytest.mark.parametrize(
    "extra", [["--trials", "0"], ["--steps", "0"], ["--device", "tpu"], ["--target-batch", "0"]]
)
def test_autotune_bad_input(extra: list[str]) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "searcher.cli",
            "autotune",
            "--model",
            TINY,
            "--device",
            "cpu",
            "--seq-len",
            "16",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        len(
            [
                x
                for x in proc.stderr.splitlines()
                if x.strip() and "Warning" not in x and "warn" not in x
            ]
        )
        == 1
    )
