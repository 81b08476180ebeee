"""``family:`` in fleet jobs and scenario models: the meaning and the checks of ``--family``
(a config.json whose model_type is missing or unknown is read as that family, never guessed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searcher.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
FLEET = """pools:
  - name: l4
    gpu: l4
    count: 1
jobs:
  - name: a
    model: cfg.json
{family}    methods: [lora]
    target_batch: 4
    seq_len: 128
    tokens: 1e8
"""


def _configs(tmp_path: Path) -> None:
    base = json.loads((DATA / "tiny_llama_config.json").read_text())
    (tmp_path / "cfg.json").write_text(json.dumps({**base, "model_type": "myllama"}))
    (tmp_path / "llama.json").write_text(json.dumps({**base, "model_type": "llama"}))


def test_a_fleet_job_reads_an_unknown_model_type_as_its_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _configs(tmp_path)
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.format(family="    family: llama\n"))
    assert main(["fleet", str(path), "--stack", "all", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["placement"][0]
    # the same job with the config saying model_type llama itself: the same plan
    path.write_text(FLEET.format(family="").replace("cfg.json", "llama.json"))
    assert main(["fleet", str(path), "--stack", "all", "--json"]) == 0
    same = json.loads(capsys.readouterr().out)["placement"][0]
    assert got["config"] == same["config"] and got["needed_bytes"] == same["needed_bytes"]


def test_a_scenario_model_reads_an_unknown_model_type_as_its_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _configs(tmp_path)
    case = "  - name: {name}\n    model: {model}\n    config: {{method: lora, seq_len: 128}}\n"
    case += "    expect: {{params.total: {{value: {params}}}}}\n"
    from constraints.models import resolve_model
    from constraints.params import total_params

    params = total_params(resolve_model(str(tmp_path / "llama.json")))
    text = "title: t\ncases:\n" + case.format(
        name="as-family", model=f"{{config: {tmp_path / 'cfg.json'}, family: llama}}", params=params
    )
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["scenario", "run", str(path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["error"] is None and result["checks"][0]["ok"]


def test_a_scenario_family_is_refused_before_any_case_runs(tmp_path: Path, refuse) -> None:
    _configs(tmp_path)
    good = "  - name: first\n    model: {id: gpt2}\n    expect: {fits: {equals: true}}\n"
    bad = f"  - name: second\n    model: {{config: {tmp_path / 'llama.json'}, family: gpt2}}\n"
    bad += "    expect: {fits: {equals: true}}\n"
    (tmp_path / "s.yaml").write_text("title: t\ncases:\n" + good + bad)
    line = refuse(["scenario", "run", str(tmp_path / "s.yaml")], tmp_path)
    assert "case 'second': model.family:" in line and "contradicts" in line
