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
