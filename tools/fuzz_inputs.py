"""Mutate real input files and run the command that reads each, in-process; print every escape.

Run from the repository root: ``python tools/fuzz_inputs.py KIND [--seed N] [--runs N]``, KIND one
of ``check`` (the fixtures in tests/data/check), ``scenario`` (scenarios/*.yaml), ``fleet``
(scenarios/fleet-example.yaml), ``launch`` (a member of ``search --json``) or ``csv`` (rows of the
shipped calibration CSVs given to ``fitplan accuracy``). Each run replaces, deletes or adds one to
three values anywhere in the document (deep) and runs the command on it. An escape is an exit
code other than 0/1/2, a traceback, or a refusal longer than one line: the contract of the
hostile corpus (tests/conftest.py). Found cases go into tools/hostile_corpus.py by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

VALUES: list[Any] = [
    None,
    0,
    -1,
    1,
    2,
    2**63,
    1e308,
    float("nan"),
    float("inf"),
    -0.5,
    0.5,
    "",
    " ",
]
VALUES += [
    "abc",
    "auto",
    True,
    False,
    [],
    {},
    [1, 2],
    {"a": 1},
    "1e9",
    "-3",
    "bf16",
    "nf4",
    "zero3",
]
VALUES += [
    "llama-3.1-8b",
    "h100-sxm",
    "é",
    "x" * 3000,
    3.7,
    "all-linear",
    ["q_proj"],
    131072,
    10**12,
]
VALUES += ["80GiB", "-5GiB", "1e-30", "0GB", [[]], {"": None}]
CELLS = [
    "",
    " ",
    "0",
    "-1",
    "nan",
    "inf",
    "1e400",
    "abc",
    "2",
    "99999999999999",
    "0.5",
    "é",
    '"',
    ",",
]
CELLS += ["none", "on", "off", "full", "H100 80GB SXM", "A100 80GB", "LoRA", "QLoRA", "bf16", "fp8"]
CELLS += ["GB (1e9 bytes)", "GiB", "per GPU", "measured", "Llama 2 7B", "FSDP full shard", "-0"]
CALIBRATION = Path("constraints/data/calibration")
DELETE = object()


def _walk(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    children = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in children:
        yield from _walk(value, (*path, key))


def mutate(obj: Any, rng: random.Random) -> Any:
    """``obj`` with one to three values replaced or deleted anywhere in it."""
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _walk(obj) if p]
        if not paths:
            return copy.deepcopy(rng.choice(VALUES))
        *parents, last = rng.choice(paths)
        holder = obj
        for key in parents:
            holder = holder[key]
        value = DELETE if rng.random() < 0.15 else copy.deepcopy(rng.choice(VALUES))
        if value is DELETE:
            del holder[last]
        else:
            holder[last] = value
    return obj


def _sources(kind: str) -> list[tuple[Any, str]]:
    if kind == "check":
        out = []
        for f in sorted(Path("tests/data/check").glob("*.*")):
            if f.suffix in (".json", ".yaml", ".yml"):
                text = f.read_text(encoding="utf-8")
                out.append(
                    (json.loads(text) if f.suffix == ".json" else yaml.safe_load(text), f.name)
                )
        return out
    if kind == "scenario":
        files = [
            f for f in sorted(Path("scenarios").glob("*.yaml")) if f.name != "fleet-example.yaml"
        ]
        return [(yaml.safe_load(f.read_text(encoding="utf-8")), "s.yaml") for f in files]
    if kind == "fleet":
        return [(yaml.safe_load(Path("scenarios/fleet-example.yaml").read_text()), "fleet.yaml")]
    argv = ["search", "--model", "llama-3.2-1b", "--gpu", "a100-80gb", "--gpus", "2", "--json"]
    plan = json.loads(subprocess.run([sys.executable, "-m", "searcher.cli", *argv],
                                     capture_output=True, text=True, check=True).stdout)  # fmt: skip
    return [(plan["front"][0], "plan.json")]


def _argv(kind: str, path: str, out: str, rng: random.Random) -> list[str]:
    if kind == "check":
        return ["check", path, "--gpu", "a100-80gb"]
    if kind == "scenario":
        return ["scenario", "run", path]
    if kind == "fleet":
        return ["fleet", path, "--json"]
    emit = rng.choice(["hf", "deepspeed", "accelerate", "axolotl", "torchtune", "torchrun"])
    return ["launch", path, "--emit", emit, "--out", out]


def _write_csv(d: str, rng: random.Random) -> str:
    src = rng.choice(["measured_memory.csv", "measured_throughput.csv"])
    with open(CALIBRATION / src, encoding="utf-8") as f:
        head, *body = list(csv.reader(f))
    rows = [list(r) for r in rng.sample(body, rng.randint(1, 4))]
    for r in rows:
        for _ in range(rng.randint(1, 4)):
            r[rng.randrange(len(r))] = rng.choice(CELLS)
    path = os.path.join(d, "rows.csv")
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([head, *rows])
    return path


def run_one(argv: list[str]) -> tuple[Any, str]:
    from searcher.cli.parser import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc: Any = main(argv)
    except SystemExit as e:
        rc = e.code
    except BaseException as e:  # an escape is what this tool reports
        rc = f"escaped {type(e).__name__}: {e}"
    return rc, err.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["check", "scenario", "fleet", "launch", "csv"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    rng = random.Random(args.seed)
    sources = [] if args.kind == "csv" else _sources(args.kind)
    escapes = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            if args.kind == "csv":
                argv = ["accuracy", _write_csv(d, rng)]
                shown = Path(argv[1]).read_text(encoding="utf-8")
            else:
                obj, name = rng.choice(sources)
                obj = mutate(copy.deepcopy(obj), rng)
                path = os.path.join(d, name)
                shown = json.dumps(obj) if name.endswith(".json") else yaml.safe_dump(obj)
                Path(path).write_text(shown, encoding="utf-8")
                argv = _argv(args.kind, path, os.path.join(d, "out"), rng)
            rc, err = run_one(argv)
        if rc not in (0, 1, 2) or "Traceback" in err or (rc == 2 and err.strip().count("\n")):
            escapes += 1
            print(f"ESCAPE exit {rc}: {err.strip()[-400:]}\n  input: {shown[:600]!r}", flush=True)
    print(f"{escapes} escapes in {args.runs} runs ({args.kind}, seed {args.seed})")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
