"""`fitplan search` and `fitplan fits` from the command line: JSON contract, CSV, bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from searcher.cli import main

CONFIG_KEYS = {
    "method",
    "rank",
    "recipe",
    "optimizer",
    "quant",
    "checkpointing",
    "zero",
    "offload",
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "grad_accum",
    "gpus",
}


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "searcher.cli", *argv], capture_output=True, text=True, timeout=300
    )


def test_search_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "search",
            "--model",
            "qwen2.5-1.5b",
            "--gpu",
            "rtx-4090",
            "--gpus",
            "2",
            "--target-batch",
            "16",
            "--seq-len",
            "1024",
            "--tokens",
            "1e9",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["front"]
    for m in out["front"]:
        assert set(m["config"]) >= CONFIG_KEYS
        c = m["config"]
        assert c["micro_batch"] * c["grad_accum"] * c["dp"] == 16
        assert c["gpus"] == c["tp"] * c["pp"] * c["dp"] <= 2
        mem = m["memory_bytes"]
        assert mem["total"] == sum(
            mem[k] for k in ("weights", "gradients", "optimizer", "activations", "overhead")
        )
        assert m["tokens_per_s"] > 0 and m["step_time_s"] > 0 and m["usd_per_mtok"] > 0
        assert m["budget"]["hours"] > 0
        assert 1.0 <= m["fidelity"] < 4.0
    costs = [m["usd_per_mtok"] for m in out["front"]]
    assert (
        costs == sorted(costs)
        or max(abs(a - b) / a for a, b in zip(costs, sorted(costs), strict=True)) < 0.02
    )


def test_search_reports_rejected_families(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "search",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "16GB",
            "--target-batch",
            "8",
            "--seq-len",
            "2048",
            "--cpu-ram",
            "32GiB",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    families = {r["family"]: r["reason"] for r in out["rejected"]}
    assert "full" in families
    assert "GiB" in families["full"] and "room" in families["full"]  # peak against room


def test_search_csv(tmp_path: Path) -> None:
    path = tmp_path / "front.csv"
    code = main(
        [
            "search",
            "--model",
            "qwen2.5-0.5b",
            "--gpu",
            "l4",
            "--target-batch",
            "8",
            "--seq-len",
            "512",
            "--csv",
            str(path),
        ]
    )
    assert code == 0
    rows = list(csv.DictReader(path.open()))
    assert rows and "config.method" in rows[0] and "tokens_per_s" in rows[0]


def test_search_csv_appends_the_needs_columns(tmp_path: Path, capsys) -> None:
    """The needs of the terminal table and of --json, as the CSV's last two columns (the
    columns before them keep their names and order)."""
    argv = ["search", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--target-batch", "8"]
    argv += ["--seq-len", "512", "--stack", "deepspeed"]
    main([*argv, "--json"])
    front = json.loads(capsys.readouterr().out)["front"]
    path = tmp_path / "front.csv"
    assert main([*argv, "--csv", str(path)]) == 0
    header, *rows = list(csv.reader(path.open()))
    assert header[-2:] == ["needs_packages", "needs_outside_stack"]
    assert header[:3] == ["config.method", "config.lora_rank", "config.lora_targets"]
    assert header.index("fidelity") == len(header) - 3  # no budget columns without --tokens
    assert len(rows) == len(front)
    for row, member in zip(rows, front, strict=True):
        assert row[-2].split() == member["needs_packages"]
        assert row[-1].split() == member["needs_outside_stack"]
    assert any(row[-1] for row in rows) and not all(row[-1] for row in rows)


def test_search_table_output() -> None:
    proc = run(
        "search",
        "--model",
        "qwen2.5-0.5b",
        "--gpu",
        "l4",
        "--target-batch",
        "8",
        "--seq-len",
        "512",
        "--top",
        "3",
        "--stack",
        "all",  # member 1 is the pick whatever this Python has installed
    )
    assert proc.returncode == 0, proc.stderr
    assert "Pareto" in proc.stdout and "front member 1 of " in proc.stdout
    # one peak figure: the front's peak of member 1 is the breakdown's peak row
    import re

    row = re.search(r"▶1 │.*?│\s+([\d.]+) │", proc.stdout)
    peak = re.search(r"peak \(what nvidia-smi shows\)\s*│\s*([\d.]+)", proc.stdout)
    fits = re.search(r"fits: peak ([\d.]+) GiB", proc.stdout)
    assert row and peak and fits, proc.stdout
    # the same number shown to 1 and to 2 decimals: at most 0.05 apart (plus float error)
    assert abs(float(row.group(1)) - float(peak.group(1))) <= 0.05 + 1e-9
    assert peak.group(1) == fits.group(1)


def test_search_without_a_model_prints_an_example() -> None:
    proc = run("search")
    assert proc.returncode == 2
    assert "fitplan search --model" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["search", "--model", "qwen2.5-0.5b", "--target-batch", "0"], "target-batch"),
        (["search", "--model", "qwen2.5-0.5b", "--gpus", "0"], "gpus"),
        (["search", "--model", "qwen2.5-0.5b", "--gpus", "-2"], "gpus"),
        (["search", "--model", "gpt2", "--seq-len", "4096"], "context"),
        (["search", "--model", "gpt3"], "unknown model"),
        (["search", "--model", "gpt2", "--gpu", "a100-90gb"], "unknown GPU"),
        (["search", "--model", "gpt2", "--strategy", "annealing"], "unknown strategy"),
        (["search", "--model", "gpt2", "--strategy", "optuna", "--trials", "0"], "trials"),
        (["search", "--model", "gpt2", "--gpus", "1", "--tp", "2"], "no parallel layout"),
        (["search", "--model", "gpt2", "--cpu-ram", "lots"], "size"),
        (["search", "--model", "gpt2", "--tokens", "-1"], "tokens"),
        (["search", "--model", "gpt2", "--rank", "8", "--method", "full"], "LoRA"),
        (["fits", "--gpu", "h1000"], "unknown GPU"),
        (["fits", "--models", "nope"], "unknown model"),
        (["fits", "--seq-len", "0"], "seq-len"),
    ],
)
def test_search_bad_input(argv: list[str], needle: str) -> None:
    proc = run(*argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert needle.lower() in lines[0].lower()


def test_fits_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["fits", "--gpu", "rtx-4090", "--models", "llama-3.1-8b", "llama-3.1-70b", "--json"]
    )
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    by_model = {r["model"]: r for r in rows}
    small, big = by_model["llama-3.1-8b"], by_model["llama-3.1-70b"]
    assert small["inference"]["ok"] and small["qlora"]["ok"]
    assert not big["inference"]["ok"] and "GiB" in big["inference"]["summary"]


def test_each_printed_lever_runs_as_a_search() -> None:
    """Every lever the search screen prints is flags `fitplan search` accepts: each is run."""
    import re

    base = ["search", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--target-batch", "8"]
    base += ["--seq-len", "512", "--top", "1"]
    proc = run(*base)
    assert proc.returncode == 0, proc.stderr
    flags = re.findall(r"^\s+(?:lever|also): .*?\((--[^)]*)\) saves", proc.stdout, re.M)
    assert flags, proc.stdout
    for f in flags:
        r = run(*base, *f.split())
        assert r.returncode in (0, 1), (f, r.stderr)
        assert "unrecognized arguments" not in r.stderr and "error:" not in r.stderr, (f, r.stderr)
