"""benchmarks/gpu_campaign.py's dry run: the campaign's code path on the CPU with a tiny model.

Heavy (torch, transformers): one child process builds a 2-layer Qwen2 from its config, runs three
optimizer steps and writes a CSV row; the CUDA columns stay empty on the CPU.
"""

from __future__ import annotations

import csv
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_writes_one_row_per_configuration(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "campaign.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_campaign.py"), "run", "--dry-run"]
    cmd += ["--limit", "1", "--budget-s", "900", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "dry-run", row["note"]
    assert row["model"] == "qwen2.5-0.5b"
    assert float(row["step_time_s"]) > 0
    # no CUDA here: the memory counters are not invented
    assert row["peak_allocated"] == row["peak_reserved"] == row["cuda_context"] == ""
    assert row["torch"] == importlib.metadata.version("torch")
    assert row["transformers"] == importlib.metadata.version("transformers")


def test_bad_limit_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_campaign.py"), "run", "--dry-run"]
    cmd += ["--limit", "0", "--out", str(tmp_path / "c.csv")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--limit" in p.stderr
    assert not (tmp_path / "c.csv").exists()
