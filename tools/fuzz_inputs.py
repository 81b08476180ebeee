"""Mutate real input files and run the command that reads each, in-process; print every escape.

Run from the repository root: ``python tools/fuzz_inputs.py KIND [--seed N] [--runs N]``, KIND one
of ``check`` (the fixtures in tests/data/check), ``scenario`` (scenarios/*.yaml), ``fleet``
(scenarios/fleet-example.yaml), ``launch`` (a member of ``search --json``), ``csv`` (rows of the
shipped calibration CSVs given to ``fitplan accuracy``), ``model`` (an HF config.json, with the
keys other architectures use, given as ``--model`` to the planning commands) or ``flags`` (one to
four of a command's own flags with odd values). Each run replaces, deletes or adds one to three
values anywhere in the document (deep) and runs the command on it. An escape is an exit
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
#: config.json keys of other architectures (MoE, MLA, GPT-2/OPT/Falcon names, multimodal)
HF_KEYS = [
    "num_key_value_heads", "head_dim", "tie_word_embeddings", "num_local_experts",
    "num_experts_per_tok", "moe_intermediate_size", "num_experts", "sliding_window",
    "rope_scaling", "torch_dtype", "model_type", "architectures", "hidden_act",
    "max_position_embeddings", "quantization_config", "text_config", "n_embd", "n_layer",
    "n_head", "ffn_dim", "word_embed_proj_dim", "multi_query", "new_decoder_architecture",
    "partial_rotary_factor", "q_lora_rank", "kv_lora_rank", "first_k_dense_replace",
    "n_routed_experts", "shared_expert_intermediate_size", "attention_bias", "mlp_bias",
    "layer_types", "dtype", "vocab_size", "num_hidden_layers", "intermediate_size",
]  # fmt: skip
MODEL_COMMANDS = [
    ["explain", "--gpu", "h100-sxm"],
    ["explain", "--gpu", "h100-sxm", "--method", "qlora"],
    ["explain", "--gpu", "h100-sxm", "--tp", "2", "--gpus", "2"],
    ["search", "--gpu", "a100-80gb", "--gpus", "2"],
    ["serve", "--gpu", "h100-sxm"],
    ["max", "--gpu", "h100-sxm"],
]
#: the base arguments each command of ``flags`` starts from (a valid call)
FLAG_BASES = {
    "explain": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"],
    "search": ["--model", "llama-3.2-1b", "--gpu", "a100-80gb", "--gpus", "2"],
    "fits": ["--gpu", "rtx-4090"],
    "max": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"],
    "serve": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"],
    "models": [],
    "gpus": [],
}
FLAG_VALUES = [
    "0", "-1", "1", "2", "3", "7", "16", "1e9", "nan", "inf", "-0", "0.5", "1.5",
    "99999999999999999999", "", " ", "abc", "llama-3.1-8b", "h100-sxm", "bf16", "fp8", "lora",
    "qlora", "full", "none", "all", "zero3", "fsdp", "80GiB", "1GB", "-5GiB", "1,2", "a=b", "é",
    "--", "-x", "/dev/null", "/nonexistent", "out", "nf4", "131072", "1e-30",
]  # fmt: skip
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


def _flags_argv(rng: random.Random) -> list[str]:
    """A command with one to four of its own flags, each with a choice or an odd value."""
    import argparse as ap

    from searcher.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, ap._SubParsersAction))
    cmd = rng.choice(sorted(FLAG_BASES))
    flags = [
        a
        for a in sub.choices[cmd]._actions
        if a.option_strings and a.option_strings[0] not in ("-h", "--help")
    ]
    argv = [cmd, *FLAG_BASES[cmd]]
    for a in rng.sample(flags, min(len(flags), rng.randint(1, 4))):
        flag = a.option_strings[-1]
        if a.nargs == 0:
            argv.append(flag)
        elif a.choices and rng.random() < 0.6:
            argv += [flag, str(rng.choice(list(a.choices)))]
        else:
            argv += [flag, rng.choice(FLAG_VALUES)]
    return argv


def _model_config(rng: random.Random) -> dict[str, Any]:
    """tests/data/tiny_llama_config.json with one to three keys set (any architecture's) or
    deleted, or one value deep inside replaced."""
    cfg = json.loads(Path("tests/data/tiny_llama_config.json").read_text(encoding="utf-8"))
    if rng.random() < 0.3:
        return mutate(cfg, rng)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*cfg, *HF_KEYS])
        if rng.random() < 0.1:
            cfg.pop(key, None)
        else:
            cfg[key] = copy.deepcopy(rng.choice(VALUES))
    return cfg


def _argv(kind: str, path: str, out: str, rng: random.Random) -> list[str]:
    if kind == "model":
        cmd, *rest = rng.choice(MODEL_COMMANDS)
        return [cmd, "--model", path, *rest]
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
    ap.add_argument(
        "kind", choices=["check", "scenario", "fleet", "launch", "csv", "model", "flags"]
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    rng = random.Random(args.seed)
    sources = [] if args.kind in ("csv", "model", "flags") else _sources(args.kind)
    escapes = 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            if args.kind == "csv":
                argv = ["accuracy", _write_csv(d, rng)]
                shown = Path(argv[1]).read_text(encoding="utf-8")
            elif args.kind == "flags":
                argv = _flags_argv(rng)
                shown = " ".join(argv)
            elif args.kind == "model":
                path = os.path.join(d, "config.json")
                shown = json.dumps(_model_config(rng))
                Path(path).write_text(shown, encoding="utf-8")
                argv = _argv(args.kind, path, os.path.join(d, "out"), rng)
            else:
                obj, name = rng.choice(sources)
                obj = mutate(copy.deepcopy(obj), rng)
                path = os.path.join(d, name)
                shown = json.dumps(obj) if name.endswith(".json") else yaml.safe_dump(obj)
                Path(path).write_text(shown, encoding="utf-8")
                argv = _argv(args.kind, path, os.path.join(d, "out"), rng)
            if args.kind == "flags":  # a written --out, --csv or --report lands in the temp dir
                cwd = os.getcwd()
                os.chdir(d)
                try:
                    rc, err = run_one(argv)
                finally:
                    os.chdir(cwd)
            else:
                rc, err = run_one(argv)
        if rc not in (0, 1, 2) or "Traceback" in err or (rc == 2 and err.strip().count("\n")):
            escapes += 1
            print(f"ESCAPE exit {rc}: {err.strip()[-400:]}\n  input: {shown[:600]!r}", flush=True)
    print(f"{escapes} escapes in {args.runs} runs ({args.kind}, seed {args.seed})")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
