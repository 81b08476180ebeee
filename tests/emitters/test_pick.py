"""One member, one name: ``search --pick N --emit`` shows and writes the same member, and says
which (``front member N of M``); the files carry the model's config.json and requirements.txt."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from searcher.emitters.plan import load_plan
from searcher.search.briefs import config_brief

ROOT = Path(__file__).resolve().parents[2]


def fitplan(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "searcher.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"},
        timeout=300,
    )


def test_pick_shows_and_writes_the_same_member(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = fitplan(
        "search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "8",
        "--seq-len", "512", "--method", "lora", "--recipe", "bf16-torch",
        "--pick", "2", "--emit", "hf", "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    shown = re.search(r"^front member 2 of (\d+) \(", r.stdout, re.M)
    assert shown, r.stdout
    written = load_plan(str(out / "plan.json"))
    brief = config_brief(written.config)
    # the explanation printed is of the member written, and the emit line names it the same
    assert f"config: {brief}" in r.stdout
    assert f"front member 2 of {shown.group(1)}: " in r.stdout
    # offline by construction: the catalog's config.json beside the script
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["hidden_size"] == 896
    pins = (out / "requirements.txt").read_text()
    assert re.search(r"^transformers==\d+\.\d+", pins, re.M) and "peft==" in pins


def test_launch_names_the_member_of_a_front(tmp_path: Path) -> None:
    r = fitplan(
        "search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "8",
        "--seq-len", "512", "--method", "lora", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (tmp_path / "front.json").write_text(r.stdout)
    n = len(json.loads(r.stdout)["front"])
    r2 = fitplan(
        "launch", str(tmp_path / "front.json"), "--pick", "3", "--emit", "deepspeed", "--out",
        str(tmp_path / "ds"),
    )  # fmt: skip
    if r2.returncode == 0:
        assert f"front member 3 of {n} in " in r2.stdout
    else:  # member 3 is not expressible by DeepSpeed: the refusal names it
        assert "cannot express" in r2.stderr


def test_the_front_is_numbered_alike_with_and_without_emit(tmp_path: Path) -> None:
    """``search --pick N`` and ``search --emit F --pick N`` name one plan: --emit does not narrow
    the front; the members the format cannot write (tensor parallelism under the HF Trainer) are
    said under the table and refused by name when picked."""
    ask = [
        "search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8",
        "--method", "full", "--target-batch", "64", "--seq-len", "2048",
    ]  # fmt: skip
    plain = fitplan(*ask, "--json")
    assert plain.returncode == 0, plain.stderr
    front = json.loads(plain.stdout)["front"]
    with_tp = [i + 1 for i, m in enumerate(front[:10]) if m["config"]["tp"] > 1]
    assert with_tp, "the question's front should hold TP plans within its first ten members"
    emitted = fitplan(*ask, "--emit", "hf", "--out", str(tmp_path / "run"))
    assert emitted.returncode == 0, emitted.stderr
    rows = re.findall(r"^│\s*▶?(\d+) │ (.+?) │", emitted.stdout, re.M)
    assert [int(n) for n, _ in rows] == list(range(1, 11))
    said = re.search(r"--emit hf does not write front members? ([\d, ]+) \(", emitted.stdout)
    assert said, emitted.stdout
    assert [int(n) for n in said.group(1).split(", ")] == with_tp
    picked = fitplan(*ask, "--emit", "hf", "--out", str(tmp_path / "tp"), "--pick", str(with_tp[0]))
    assert picked.returncode == 2
    assert f"pick {with_tp[0]}: --emit hf cannot express tp=" in picked.stderr
