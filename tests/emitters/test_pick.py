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
