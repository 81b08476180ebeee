"""One question, every surface, the same figures.

A user asks "does Llama-3.2-1B LoRA fit my RTX 4090, and how fast is it?" through `check` (their
axolotl file), `explain` (the knobs `check` says it read, as flags), a `search` pinned to those
knobs (and its page), and `fits` (whose cells are then explained). Each surface must print the
same peak, the same room and the same tokens/s for the same plan, on screen and in its JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from constraints.config import TrainConfig
from searcher.cli import main
from searcher.search.levers import FLAG_OF_FIELD

GPU = "rtx-4090"
MODEL = "llama-3.2-1b"
ASKED = ("--model", MODEL, "--gpu", GPU)
AXOLOTL = """\
base_model: meta-llama/Llama-3.2-1B
adapter: lora
lora_r: 16
lora_alpha: 32
lora_dropout: 0.05
lora_target_linear: true
sequence_len: 2048
micro_batch_size: 2
gradient_accumulation_steps: 4
optimizer: adamw_torch
bf16: true
gradient_checkpointing: true
flash_attention: true
"""


#: knobs explain refuses unless the one they qualify is set (--fp8-recipe needs fp8 matmuls, ...)
CONTEXT_ONLY = {"fp8_recipe", "virtual_stages", "tp_comm_overlap"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    main(list(argv))
    return capsys.readouterr().out


def as_flags(config: dict) -> list[str]:
    """The explain options that set every knob of ``config`` (a plan's JSON ``config``); the knobs
    that only mean something beside another (an fp8 recipe without fp8 matmuls) only there."""
    flags: list[str] = []
    for field, flag in FLAG_OF_FIELD.items():
        value, default = config.get(field), TrainConfig.model_fields[field].default
        if value is None or (field in CONTEXT_ONLY and value == default):
            continue
        if field.startswith("lora_") and config["method"] == "full":
            continue
        if isinstance(default, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


def found(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return match


def screen_peak_gib(text: str) -> float:
    return float(found(r"peak \(what nvidia-smi shows\)\s*│\s*([\d.]+)", text).group(1))


def screen_tokens_per_s(text: str) -> int:
    return int(found(r"throughput: ([\d,]+) tokens/s", text).group(1).replace(",", ""))


@pytest.fixture
def axolotl_file(tmp_path: Path) -> Path:
    path = tmp_path / "axolotl.yaml"
    path.write_text(AXOLOTL)
    return path


def test_check_explain_and_a_pinned_search_give_one_peak_and_one_speed(
    capsys: pytest.CaptureFixture[str], axolotl_file: Path
) -> None:
    checked = json.loads(run(capsys, "check", str(axolotl_file), "--gpu", GPU, "--json"))
    config = checked["config"]
    assert (config["method"], config["lora_rank"], config["lora_dropout"]) == ("lora", 16, 0.05)
    knobs = as_flags(config)

    explained = json.loads(run(capsys, "explain", *ASKED, *knobs, "--json"))
    assert explained["needed_bytes"] == checked["explain"]["needed_bytes"]
    assert explained["margin_bytes"] == checked["explain"]["margin_bytes"]
    assert explained["fits"] is checked["fits"] is True

    batch = str(config["micro_batch"] * config["grad_accum"])
    # search pins the accumulation through the target batch
    pinned = as_flags({k: v for k, v in config.items() if k != "grad_accum"})
    searched = json.loads(run(capsys, "search", *ASKED, *pinned, "--target-batch", batch, "--json"))
    (member,) = searched["front"]
    assert member["config"]["lora_dropout"] == 0.05
    assert member["needed_bytes"] == explained["needed_bytes"]
    assert member["tokens_per_s"] == pytest.approx(explained["speed"]["tokens_per_s"], rel=1e-12)

    # on screen: search's row, its explanation of the pick and explain's own table agree
    explain_screen = run(capsys, "explain", *ASKED, *knobs)
    search_screen = run(capsys, "search", *ASKED, *pinned, "--target-batch", batch)
    peak = screen_peak_gib(explain_screen)
    speed = screen_tokens_per_s(explain_screen)
    assert peak == pytest.approx(explained["memory_bytes"]["total"] / 2**30, abs=0.005)
    row = found(r"│\s*▶?1\s*│[^│]*│\s*([\d.]+)\s*│\s*\d+\s*│\s*([\d,]+)\s*│", search_screen)
    assert float(row.group(1)) == pytest.approx(peak, abs=0.05)
    assert int(row.group(2).replace(",", "")) == speed
    assert screen_peak_gib(search_screen) == peak
    assert screen_tokens_per_s(search_screen) == speed
    page = axolotl_file.with_name("page.html")
    run(capsys, "search", *ASKED, *pinned, "--target-batch", batch, "--report", str(page))
    payload = found(r"const FITPLAN = (.*?);</script>", page.read_text(encoding="utf-8")).group(1)
    drawn = json.loads(payload)
    assert drawn["members"][0]["x"] == pytest.approx(explained["memory_bytes"]["total"] / 2**30)
    assert f"{peak:.2f} GiB · {speed:,} tokens/s" in drawn["members"][0]["hover"]
    room = found(r"room on [^:]+: ([\d.]+) GiB", explain_screen).group(1)
    check_screen = run(capsys, "check", str(axolotl_file), "--gpu", GPU)
    assert f": {room} GiB = capacity" in check_screen
    assert drawn["usable_bytes"] / 2**30 == pytest.approx(float(room), abs=0.005)
    assert screen_peak_gib(check_screen) == peak


def test_fits_cell_is_what_explain_says_of_its_plan(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = json.loads(run(capsys, "fits", "--gpu", GPU, "--models", MODEL, "--json"))
    for method in ("qlora", "lora", "full"):
        cell = row[method]
        assert cell["ok"], cell
        explained = json.loads(run(capsys, "explain", *ASKED, *as_flags(cell["config"]), "--json"))
        assert explained["needed_bytes"] == cell["needed_bytes"], method
        assert explained["speed"]["tokens_per_s"] == pytest.approx(cell["tokens_per_s"], rel=1e-12)
        peak = explained["memory_bytes"]["total"] / 2**30
        tokens = f"{explained['speed']['tokens_per_s']:,.0f} tok/s"
        assert f"{peak:.1f} GiB, {tokens}" in cell["summary"], (method, cell["summary"])
