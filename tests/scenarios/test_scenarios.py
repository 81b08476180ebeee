"""Every scenario file is a golden test: the source documents' numbers, checked by the runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from searcher.scenarios.runner import run_file

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").rglob("*.yaml"))


def test_scenarios_exist() -> None:
    assert len(SCENARIOS) >= 4


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    results = run_file(path)
    assert results
    failures = [
        f"{r.case}: {r.error or '; '.join(f'{c.metric} expected {c.expected}, got {c.got_text}' for c in r.checks if not c.ok)}"
        for r in results
        if not r.ok
    ]
    assert not failures, "\n".join(failures)


def test_runner_catches_a_miss(tmp_path: Path) -> None:
    """A wrong expectation must fail: the runner is able to say no."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "title: wrong on purpose\ncases:\n"
        "  - name: Case B is not 80 GB\n    model: {params: 7e9}\n    config: {recipe: bf16-pure}\n"
        "    expect:\n      static: {gb: 80.0}\n"
    )
    results = run_file(bad)
    assert not results[0].ok
