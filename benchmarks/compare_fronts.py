"""Whether two trees give the same search answers: every case's ``search --json`` answer, diffed.

    python benchmarks/compare_fronts.py --baseline /tmp/fitplan-base     # exit 1 on a difference
    python benchmarks/compare_fronts.py --write-golden TREE             # tests/search/data/...

A speed change must leave the answers alone; this runs the cases of :data:`CASES` (the README's
examples, cluster-scale problems, pinned problems) in a fresh process per tree and compares the
whole JSON answer (the front in its order, the rejection reasons, the counts; the ``pruned``
count excepted). Both trees search unpruned (``ExhaustiveStrategy(prune=False)``), so that
``feasible`` counts every configuration that fits whatever a tree's default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (label, SearchProblem keyword arguments): models and GPUs by catalog id
CASES: list[tuple[str, dict]] = [
    ("readme: llama-3.1-8b, 8 × a100-80gb", dict(model="llama-3.1-8b", gpu="a100-80gb",
        max_gpus=8, target_batch=64, seq_len=4096)),
    ("single node h100", dict(model="llama-3.1-8b", gpu="h100-sxm", max_gpus=8,
        target_batch=64, seq_len=4096)),
    ("24 GB card", dict(model="qwen2.5-7b", gpu="rtx-4090", max_gpus=1, target_batch=16,
        seq_len=2048)),
    ("512 × h100, batch 1024", dict(model="llama-3.1-8b", gpu="h100-sxm", max_gpus=512,
        target_batch=1024, seq_len=4096)),
    ("4,096 × h100, batch 4,096", dict(model="llama-3.1-8b", gpu="h100-sxm", max_gpus=4096,
        target_batch=4096, seq_len=4096)),
    ("16,384 × h100, batch 16,384", dict(model="llama-3.1-8b", gpu="h100-sxm", max_gpus=16384,
        target_batch=16384, seq_len=4096)),
    ("70b on 64 × h100", dict(model="llama-3.1-70b", gpu="h100-sxm", max_gpus=64,
        target_batch=256, seq_len=8192)),
    ("pinned: lora zero 3, 16 × a10g", dict(model="llama-3.2-3b", gpu="a10g", max_gpus=16,
        target_batch=48, seq_len=1024, pins={"method": "lora", "zero": 3})),
    ("pinned: qlora 8-bit optimizer, t4", dict(model="llama-3.2-1b", gpu="t4", max_gpus=4,
        target_batch=12, seq_len=2048, pins={"optimizer": "paged-adamw-8bit"})),
    ("all gpu counts, l40s", dict(model="qwen2.5-1.5b", gpu="l40s", max_gpus=12,
        target_batch=24, seq_len=4096, all_gpu_counts=True, gpus_per_node=4)),
]  # fmt: skip

ANSWER = """
import json, sys
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.search.run import run_search
from searcher.search.space import SearchProblem
from searcher.search.strategies import ExhaustiveStrategy
from searcher.search.views import result_json
kw = json.loads(sys.argv[1])
kw["model"], kw["gpu"] = resolve_model(kw["model"]), resolve_gpu(kw["gpu"])
try:  # unpruned: ``feasible`` then counts every configuration that fits, in any tree
    strategy = ExhaustiveStrategy(prune=False)
except TypeError:  # a tree before pruning (e4350a1)
    strategy = ExhaustiveStrategy()
out = result_json(run_search(SearchProblem(**kw), strategy))
out.pop("pruned")
print(json.dumps(out, sort_keys=True, default=str))
"""


def answer(tree: Path, kw: dict) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", ANSWER, json.dumps(kw)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return run.stdout.strip().splitlines()[-1]


#: the cases small enough for the test suite (tests/search/test_fronts_unchanged.py)
GOLDEN_CASES = (0, 2, 7, 8, 9)
GOLDEN = ROOT / "tests" / "search" / "data" / "fronts_golden.json"


#: what the golden keeps of a front member: its configuration and the figures it is ranked by
MEMBER_KEYS = ("config", "fidelity", "needed_bytes", "step_time_s", "tokens_per_s", "usd_per_mtok")


def summary(answer_json: dict) -> dict:
    """The part of an answer the golden holds (the member's memory terms left out: the total
    needed is kept, and a term moved from one line to another is not this file's question)."""
    out = {k: v for k, v in answer_json.items() if k != "front"}
    out["front"] = [{k: m[k] for k in MEMBER_KEYS} for m in answer_json["front"]]
    return out


def write_golden(tree: Path) -> None:
    """The small cases' answers from ``tree`` (a checkout of the commit named in the file)."""
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    cases = [{"label": CASES[i][0], "problem": CASES[i][1], "answer": summary(json.loads(
        answer(tree, CASES[i][1])))} for i in GOLDEN_CASES]  # fmt: skip
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({"commit": commit, "cases": cases}, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} from {tree} at {commit}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="a git worktree to compare with")
    ap.add_argument("--write-golden", type=Path, metavar="TREE", help="write the test's golden")
    args = ap.parse_args()
    if args.write_golden:
        write_golden(args.write_golden.resolve())
        return 0
    if not args.baseline:
        ap.error("give --baseline TREE or --write-golden TREE")
    differ = 0
    for label, kw in CASES:
        new, old = answer(ROOT, kw), answer(args.baseline.resolve(), kw)
        same = new == old
        differ += not same
        fronts = len(json.loads(new)["front"])
        print(f"{'same' if same else 'DIFFERENT'}: {label} ({fronts} front members)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
