"""``--stack`` on fits, max, fleet and check: the same flag and refusal as search/explain, plans
kept to the stack (marked where a pin or the only fitting plan takes them outside it), and the
stack said on the screen and in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searcher.cli import main

ROOT = Path(__file__).resolve().parents[2]
FLEET = "pools:\n  - name: l4\n    gpu: l4\n    count: 2\n"
FLEET += "jobs:\n  - name: a\n    model: qwen2.5-0.5b\n    methods: [{method}]\n"
FLEET += "    target_batch: 4\n    seq_len: 512\n    tokens: 1e8\n"
CHECK = ROOT / "tests" / "data" / "check" / "torchtune-1B-lora-single-device.yaml"
FITS = ["fits", "--gpu", "rtx-4090", "--models", "qwen2.5-0.5b", "--seq-len", "1024"]
MAX = ["max", "micro-batch", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--seq-len", "512"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv",
    [
        FITS,
        MAX,
        ["fleet", "{tmp}/fleet.yaml"],
        ["check", str(CHECK), "--gpu", "rtx-4090", "--model", "llama-3.2-1b"],
    ],
    ids=["fits", "max", "fleet", "check"],
)
def test_every_command_refuses_an_unknown_package_the_same_way(
    refuse, tmp_path: Path, argv: list[str]
) -> None:
    (tmp_path / "fleet.yaml").write_text(FLEET.format(method="lora"))
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    line = refuse([*args, "--stack", "flash-attn,cuda"], tmp_path)
    assert "--stack: unknown package 'cuda'" in line
    assert "flash-attn, bitsandbytes, liger-kernel, deepspeed" in line


def test_fits_keeps_each_family_to_the_stack_and_marks_only_what_needs_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (row,) = _json([*FITS, "--stack", "none"], capsys)  # type: ignore[misc]
    # QLoRA's base is quantised by bitsandbytes (BitsAndBytesConfig): it fits, marked
    assert row["qlora"]["ok"] and row["qlora"]["needs_outside_stack"] == ["bitsandbytes"]
    assert "needs bitsandbytes (outside the stack)" in row["qlora"]["summary"]
    assert row["qlora"]["config"]["attention"] == "sdpa"  # nothing else it does not need
    for family in ("lora", "full"):
        cell = row[family]
        assert cell["ok"] and cell["needs_outside_stack"] == []
        cfg = cell["config"]
        assert cfg["attention"] == "sdpa" and cfg["loss"] != "fused"
        assert cfg["backend"] in ("single", "ddp", "fsdp2")
    assert row["inference"]["needs_outside_stack"] == []  # bf16 weights fit
    (full,) = _json([*FITS, "--stack", "all"], capsys)  # type: ignore[misc]
    assert all(full[f]["needs_outside_stack"] == [] for f in ("qlora", "lora", "full"))
    assert full["qlora"]["tokens_per_s"] >= row["qlora"]["tokens_per_s"]  # a wider space


def test_fits_says_the_stack_and_how_to_install_what_a_marked_plan_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*FITS, "--stack", "deepspeed"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("stack: deepspeed (--stack)")
    assert (
        "a plan marked above needs bitsandbytes, not in the stack: pip install bitsandbytes=="
        in (text)
    )


def test_max_answers_within_the_stack_and_marks_a_pin_outside_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    narrow = _json([*MAX, "--stack", "none"], capsys)
    wide = _json([*MAX, "--stack", "all"], capsys)
    assert narrow["stack"] == [] and narrow["member"]["needs_outside_stack"] == []  # type: ignore[index]
    assert narrow["member"]["config"]["attention"] == "sdpa"  # type: ignore[index]
    assert narrow["value"] <= wide["value"]  # type: ignore[index,operator]
    pinned = _json([*MAX, "--stack", "none", "--optimizer", "adamw-8bit"], capsys)
    assert pinned["member"]["needs_outside_stack"] == ["bitsandbytes"]  # type: ignore[index]
    main([*MAX, "--stack", "none", "--optimizer", "adamw-8bit"])
    out = capsys.readouterr().out
    assert out.startswith("stack: none (--stack)")
    assert "needs bitsandbytes (outside the stack)" in out


def test_fleet_places_jobs_with_the_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.format(method="lora"))
    plan = _json(["fleet", str(path), "--stack", "none"], capsys)
    assert plan["stack"] == []  # type: ignore[index]
    (placed,) = plan["placement"]  # type: ignore[index]
    assert placed["needs_outside_stack"] == [] and placed["config"]["attention"] == "sdpa"
    path.write_text(FLEET.format(method="qlora"))  # a pinned method outside the stack: marked
    assert main(["fleet", str(path), "--stack", "none"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("stack: none (--stack)")
    assert "a placed job needs bitsandbytes, not in the stack" in out


def test_check_marks_the_config_and_reads_torchtune_by_torchtunes_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchtune 0.6.1 needs torchao to import (torchtune/__init__.py) and its QLoRA is torchao
    NF4: a torchtune QLoRA config needs torchao, never bitsandbytes."""
    qlora = tmp_path / "qlora.yaml"
    qlora.write_text(CHECK.read_text().replace("lora_llama3_2_1b", "qlora_llama3_2_1b"))
    argv = ["check", str(qlora), "--gpu", "rtx-4090", "--model", "llama-3.2-1b"]
    out = _json([*argv, "--stack", "bitsandbytes"], capsys)
    assert out["config"]["method"] == "qlora"  # type: ignore[index]
    assert out["needs_outside_stack"] == ["torchao"]  # type: ignore[index]
    assert _json([*argv, "--stack", "torchao"], capsys)["needs_outside_stack"] == []  # type: ignore[index]
    main([*argv, "--stack", "bitsandbytes"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("stack: bitsandbytes (--stack)")
    assert "this configuration needs torchao, not in the stack: pip install torchao==0.10.0" in text


def test_check_marks_a_suggestion_that_needs_more_than_the_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Liger's fused linear cross-entropy is the HF Trainer's ``use_liger_kernel``: the one
    suggestion that needs liger-kernel is marked, the others (chunked, micro-batch) are not."""
    qlora = ROOT / "tests" / "data" / "check" / "axolotl-qlora-1b.yml"
    argv = ["check", str(qlora), "--model", "llama-3.2-1b", "--gpu", "8GiB"]
    out = _json([*argv, "--stack", "bitsandbytes,flash-attn"], capsys)
    assert out["needs_outside_stack"] == []  # type: ignore[index]
    suggestions = out["suggestions"]  # type: ignore[index]
    assert suggestions
    for s in suggestions:
        assert s["needs_outside_stack"] == (
            ["liger-kernel"] if s["config"]["loss"] == "fused" else []
        )
    assert any(s["config"]["loss"] == "fused" for s in suggestions)
    main([*argv, "--stack", "bitsandbytes,flash-attn"])
    text = capsys.readouterr().out
    assert "fused linear cross-entropy [same training]" in text
    assert "needs liger-kernel (outside the stack)" in text


def test_check_lists_the_suggestions_the_stack_can_apply_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without liger-kernel the fused-loss suggestion comes after every one the stack can apply;
    with it, the same suggestions keep their own order (least throughput lost first)."""
    qlora = ROOT / "tests" / "data" / "check" / "axolotl-qlora-1b.yml"
    argv = ["check", str(qlora), "--model", "llama-3.2-1b", "--gpu", "8GiB"]
    without = _json([*argv, "--stack", "bitsandbytes,flash-attn"], capsys)["suggestions"]  # type: ignore[index]
    outside = [bool(s["needs_outside_stack"]) for s in without]
    assert any(outside) and not all(outside)  # both groups are present
    assert outside == sorted(outside)  # in-stack first
    full = _json([*argv, "--stack", "bitsandbytes,flash-attn,liger-kernel"], capsys)["suggestions"]  # type: ignore[index]
    key = [json.dumps(s["config"], sort_keys=True) for s in full]
    inside = [
        json.dumps(s["config"], sort_keys=True) for s in without if not s["needs_outside_stack"]
    ]
    assert [k for k in key if k in inside] == inside  # the same relative order
