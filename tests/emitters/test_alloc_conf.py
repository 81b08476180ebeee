"""--expandable-segments reaches every format's launch environment (and nothing else changes)."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from searcher.emitters import format_names, get_emitter
from searcher.emitters.base import EmitOptions
from searcher.emitters.plan import make_plan

CONF = "PYTORCH_CUDA_ALLOC_CONF"


#: plans every format writes one of: single-GPU plain torch; 2-GPU ZeRO-2 with an fp32 master
CANDIDATES = (
    dict(recipe="bf16-torch"),
    dict(recipe="bf16-master", zero=2, dp=2),
)


def _emission(fmt: str, expandable: bool) -> dict[str, str]:
    from constraints.errors import FitplanError

    for knobs in CANDIDATES:
        cfg = TrainConfig(
            method="full", micro_batch=2, seq_len=1024, expandable_segments=expandable, **knobs
        )
        plan = make_plan(cfg, "llama-3.1-8b", gpu="h100-sxm")
        try:
            em = get_emitter(fmt).emit(plan, EmitOptions("o"))
        except FitplanError:
            continue
        return {"command": em.command, **{f.name: f.text for f in em.files}}
    raise AssertionError(f"no candidate plan emits as {fmt}")


@pytest.mark.parametrize("fmt", format_names())
def test_expandable_segments_are_set_in_the_launch_environment(fmt: str) -> None:
    on, off = _emission(fmt, True), _emission(fmt, False)
    assert any(f"{CONF}" in t and "expandable_segments:True" in t for t in on.values()), fmt
    assert not any(CONF in t for t in off.values()), fmt


def test_train_py_sets_it_before_torch_loads() -> None:
    text = _emission("hf", True)["train.py"]
    line = 'os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")'
    assert line in text
    assert text.index(line) < text.index("import torch")


def test_a_search_keeps_the_pinned_mode(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from searcher.cli import main

    args = ["search", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--target-batch", "8"]
    assert main([*args, "--expandable-segments", "--json"]) == 0
    front = json.loads(capsys.readouterr().out)["front"]
    assert front and all(m["config"]["expandable_segments"] for m in front)
    assert main([*args, "--json"]) == 0
    assert not any(
        m["config"]["expandable_segments"] for m in json.loads(capsys.readouterr().out)["front"]
    )
