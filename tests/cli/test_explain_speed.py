"""``fitplan explain`` reports one configuration's speed, fitting or not (issue 12)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from searcher.cli import main

BASE = ["explain", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--micro-batch", "2"]


def test_speed_in_json_adds_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--method", "lora", "--seq-len", "2048", "--json"]) == 0
    speed = json.loads(capsys.readouterr().out)["speed"]
    parts = speed["decomposition_s"]
    assert sum(parts.values()) == pytest.approx(speed["step_time_s"], rel=1e-9)
    assert sum(speed["gemm_groups_s"].values()) == pytest.approx(parts["gemm_s"], rel=1e-9)
    assert speed["tokens_per_s"] == pytest.approx(2 * 2048 / speed["step_time_s"])
    assert speed["tokens_per_s_per_gpu"] == speed["tokens_per_s"]
    assert 0 < speed["mfu"] < 1
    for part in ("attention_s", "elementwise_s", "launch_s", "bubble_s", "dp_comm_s", "dequant_s"):
        assert part in parts


def test_speed_reported_when_it_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*BASE, "--seq-len", "8192", "--gpus", "8", "--zero", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["fits"] is False
    assert out["speed"]["tokens_per_s"] == pytest.approx(8 * out["speed"]["tokens_per_s_per_gpu"])
    assert out["speed"]["decomposition_s"]["dp_comm_s"] >= 0


def test_speed_table_printed(capsys: pytest.CaptureFixture[str]) -> None:
    main([*BASE, "--method", "lora", "--seq-len", "1024"])
    text = capsys.readouterr().out
    assert "step time" in text and "tokens/s per GPU" in text and "MFU" in text


def test_kernel_stack_changes_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    main([*BASE, "--method", "lora", "--seq-len", "2048", "--json"])
    eager = json.loads(capsys.readouterr().out)["speed"]
    main([*BASE, "--method", "lora", "--seq-len", "2048", "--kernels", "compile", "--json"])
    compiled = json.loads(capsys.readouterr().out)["speed"]
    assert compiled["decomposition_s"]["elementwise_s"] < eager["decomposition_s"]["elementwise_s"]


@pytest.mark.parametrize(
    "bad",
    [["--inter-node-gb-s", "0"], ["--nvlink-domain", "0"], ["--gpus-per-node", "-1"]],
)
def test_bad_topology_is_one_line(bad: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "searcher.cli", *BASE, *bad],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2
