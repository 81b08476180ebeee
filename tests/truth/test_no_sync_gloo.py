"""FSDP's no_sync holds the gradients unsharded until the synced micro-batch (2 gloo ranks, CPU).

Not fitplan's code: torch's own FSDP1 and FSDP2, measured by tools/measure_no_sync.py, against
the arithmetic constraints/backend_memory.py ``unsynced_gradients`` follows: P × 4 bytes (fp32
gradients, unsharded) per rank after each no_sync micro-batch, P × 4 / world after the synced one.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


#: a rank killed by a signal (SIGABRT / SIGTERM) without a Python error: a gloo peer lost on a
#: loaded machine (seen twice in CI while other processes ran; passes alone), run once more;
#: torch 2.13's launcher reports it as "exitcode: -6", older ones as "Signal 6 (SIGABRT)"
_SIGNALLED = (
    "Signal 6 (SIGABRT)",
    "Signal 15 (SIGTERM)",
    "exitcode: -6",
    "exitcode: -15",
    "terminate called without an active exception",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["fsdp1", "fsdp2"])
def test_no_sync_holds_unsharded_gradients_until_the_synced_micro_batch(kind: str) -> None:
    pytest.importorskip("torch")

    def launch() -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_free_port()),
            str(ROOT / "tools" / "measure_no_sync.py"),
            kind,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)

    run = launch()
    if run.returncode != 0 and any(s in run.stderr for s in _SIGNALLED):
        run = launch()  # a rank's own Python error exits 1, not by a signal: it fails again
    assert run.returncode == 0, run.stderr[:2000] + "\n…\n" + run.stderr[-2000:]
    out = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
    p, world = out["params"], out["world"]
    assert p == 4 * 256 * 256
    assert out["held"] == [p * 4, p * 4, p * 4 // world]
