"""Bad input is refused in one line before any output: empty output names, a pick beyond the
front (issue 26, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from searcher.cli import main

BASE = ["search", "--model", "gpt2", "--gpu", "t4"]


@pytest.mark.parametrize(
    "argv",
    [
        [*BASE, "--csv", ""],
        [*BASE, "--report", " "],
        ["explain", "--model", "gpt2", "--report", ""],
        ["serve", "--model", "gpt2", "--gpu", "t4", "--report", ""],
        ["fleet", "scenarios/fleet-example.yaml", "--report", ""],
        [*BASE, "--emit", "hf", "--out", ""],
    ],
)
def test_an_empty_output_name_is_refused(argv, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and "empty name is not a path" in out.err and out.err.count("\n") == 1


def test_a_pick_beyond_the_front_is_refused_before_the_front_prints(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "run"
    assert main([*BASE, "--emit", "hf", "--out", str(out_dir), "--pick", "100000"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "--pick 100000: the front has" in out.err
    assert not out_dir.exists()


def test_check_of_an_emitted_folder_takes_the_gpu_its_plan_names(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "run"
    assert main([*BASE, "--method", "lora", "--emit", "hf", "--out", str(out_dir)]) in (0, 1)
    capsys.readouterr()
    assert main(["check", str(out_dir), "--json"]) in (0, 1)
    import json

    checked = json.loads(capsys.readouterr().out)
    assert checked["explain"]["gpu"]["id"] == "t4"
    assert any("named by plan.json" in n for n in checked["notes"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        # offload with no sharding: the pins, not the layout rules (issue 26 item 5)
        (
            [
                "search",
                "--model",
                "llama-3.2-1b",
                "--gpu",
                "a100-80gb",
                "--offload",
                "optimizer",
                "--zero",
                "0",
            ],
            "--offload optimizer with --zero 0: the engines offload the optimizer only under "
            "ZeRO-2 or ZeRO-3",
        ),
        (
            [
                "search",
                "--model",
                "llama-3.2-1b",
                "--gpu",
                "a100-80gb",
                "--gpus",
                "2",
                "--offload",
                "all",
                "--zero",
                "2",
            ],
            "only under ZeRO-3",
        ),
        # a format whose engines have no tensor parallelism
        (
            [
                "search",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "a100-80gb",
                "--gpus",
                "8",
                "--emit",
                "deepspeed",
                "--tp",
                "2",
                "--out",
                "{tmp}/run",
            ],
            "the backends the --emit deepspeed files run do not run tensor parallelism (--tp 2)",
        ),
        (
            [
                "search",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "a100-80gb",
                "--gpus",
                "8",
                "--backend",
                "fsdp2",
                "--pp",
                "2",
            ],
            "--backend fsdp2 does not run pipeline parallelism (--pp 2)",
        ),
        # a backend the format does not write: refused before the front prints (it printed the
        # whole front, then refused the pick)
        (
            [
                "search",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "a100-80gb",
                "--gpus",
                "8",
                "--emit",
                "hf",
                "--backend",
                "megatron",
                "--out",
                "{tmp}/run",
            ],
            "--emit hf cannot express --backend megatron: the format writes single, ddp,",
        ),
    ],
)
def test_a_pin_that_rules_out_every_plan_is_named(argv, named, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and named in out.err and out.err.count("\n") == 1, out.err
    assert not (tmp_path / "run").exists()
