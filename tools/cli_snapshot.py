"""Write the --json output of the README's example commands into a folder, one file per command.

Run it before and after a change that must not change behaviour, then ``diff -r`` the folders::

    python tools/cli_snapshot.py /tmp/before   # on the old tree
    python tools/cli_snapshot.py /tmp/after    # on the new tree
    diff -r /tmp/before /tmp/after && echo byte-identical
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

COMMANDS: dict[str, list[str]] = {
    "search-default": ["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8"],
    "search-4096": [
        "search",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "a100-80gb",
        "--gpus",
        "8",
        "--target-batch",
        "64",
        "--seq-len",
        "4096",
        "--tokens",
        "1e9",
    ],
    "search-4090-lora": [
        "search",
        "--model",
        "mistral-7b-v0.1",
        "--gpu",
        "rtx-4090",
        "--target-batch",
        "16",
        "--method",
        "lora",
        "--optimizer",
        "adamw",
    ],
    "search-h100": ["search", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8"],
    "explain-lora": [
        "explain",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "a100-80gb",
        "--method",
        "lora",
        "--rank",
        "16",
        "--micro-batch",
        "4",
        "--seq-len",
        "4096",
        "--checkpointing",
        "full",
    ],
    "explain-params": ["explain", "--params", "7e9", "--recipe", "bf16-pure", "--gpu", "16GB"],
    "fits-4090": ["fits", "--gpu", "rtx-4090"],
    "fleet-example": ["fleet", "scenarios/fleet-example.yaml"],
}


def _without_timings(text: str) -> str:
    """The output with wall-clock fields (``*_seconds``) blanked: they differ run to run."""
    try:
        json.loads(text)
    except ValueError:
        return text
    return re.sub(r'("\w*seconds": )[0-9.e+-]+', r"\1null", text)


def main(out: str) -> int:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, argv in COMMANDS.items():
        run = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from searcher.cli import main; sys.exit(main())",
                *argv,
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        (folder / f"{name}.json").write_text(_without_timings(run.stdout))
        (folder / f"{name}.rc").write_text(f"{run.returncode}\n")
        print(f"{name}: exit {run.returncode}, {len(run.stdout)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
