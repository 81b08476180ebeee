from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def benchmark(name: str) -> ModuleType:
    """A script of benchmarks/ loaded as a module (they are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked heavy build models with torch and transformers (the measure extra): where
    those are not installed they skip, unless FITPLAN_HEAVY_REQUIRED=1 (CI) makes that a failure."""
    import importlib.util
    import os

    if os.environ.get("FITPLAN_HEAVY_REQUIRED") == "1":
        return
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"heavy: needs {', '.join(missing)} (pip install '.[measure]')")
    for item in items:
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that look for a phrase in a command's output read it on one line: output drawn 200
    columns wide (COLUMNS, which subprocesses inherit). The screen at 80, 100 and 200 columns is
    tests/cli/test_widths.py's question, which sets COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "200")


# ---- the hostile-input contract (issue 14) -------------------------------------------------

#: a refusal is one line of at most this many characters
MAX_REFUSAL_CHARS = 500
#: a refusal comes back within this many seconds (a hang is a failure, not a slow test)
REFUSAL_TIMEOUT_S = 60


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (to prove a refusal changed nothing)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() or (p.is_symlink() and p.exists())
    } | {str(p.relative_to(folder)) + "/": b"" for p in folder.rglob("*") if p.is_dir()}


class Refusal:
    """Run the CLI in-process and assert the contract: exit 2, one short line on stderr that
    starts ``fitplan: error:``, no traceback, nothing on stdout, no file under ``folder`` changed,
    and an answer within REFUSAL_TIMEOUT_S (SIGALRM)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, argv: list[str], folder: Path | None = None, needle: str = "") -> str:
        import signal

        from searcher.cli import main

        before = snapshot(folder) if folder else {}
        self.capsys.readouterr()

        def hang(_signum: int, _frame: object) -> None:
            raise TimeoutError(f"no answer within {REFUSAL_TIMEOUT_S} s: {argv!r:.200}")

        old = signal.signal(signal.SIGALRM, hang)
        signal.alarm(REFUSAL_TIMEOUT_S)
        try:
            try:
                code = main(argv)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 2
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        out, err = self.capsys.readouterr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        shown = f"argv={argv!r:.300} stderr={err[:600]!r}"
        assert code == 2, shown
        assert "Traceback" not in err, shown
        assert len(lines) == 1, shown
        assert lines[0].startswith("fitplan: error:"), shown
        assert len(lines[0]) <= MAX_REFUSAL_CHARS, shown
        assert out == "", shown
        if folder:
            assert snapshot(folder) == before, f"files changed: {shown}"
        assert needle.lower() in lines[0].lower(), shown
        return lines[0]


@pytest.fixture
def refuse(capsys: pytest.CaptureFixture[str]) -> Refusal:
    return Refusal(capsys)
