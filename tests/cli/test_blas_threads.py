"""The CLI caps numpy's OpenBLAS thread pool before numpy loads, and keeps a user's own setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Records OPENBLAS_NUM_THREADS at the moment ``import numpy`` starts (the value OpenBLAS reads
#: when the library loads), then runs the README's explain.
PROBE = """
import importlib.abc, os, sys
seen = []
class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.append(os.environ.get("OPENBLAS_NUM_THREADS", "<unset>"))
        return None
sys.meta_path.insert(0, Probe())
from searcher.cli import main
assert "numpy" not in sys.modules, "numpy loaded before main()"
code = main(["explain", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--method", "lora",
             "--micro-batch", "4", "--seq-len", "4096", "--checkpointing", "full", "--json"])
assert "numpy" in sys.modules
print(code, repr(seen[0]))
"""


def _run(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("4", "4"), ("", "")])
def test_blas_threads_set_before_numpy_loads(given: str | None, expected: str) -> None:
    code, _, seen = _run(given).partition(" ")
    assert code == "0"
    assert seen == repr(expected)
