"""``search --emit FMT`` searches what FMT writes: every front member is a plan the format's own
emitter expresses (the emitters are the independent judge here: searcher/emitters/formats/*),
and the table the search keeps to (searcher/search/launch_formats.py) agrees with them."""

from __future__ import annotations

import argparse

import pytest

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from searcher.cli.commands import run_cli_search
from searcher.cli.parser import build_parser
from searcher.emitters import format_names, get_emitter
from searcher.emitters.base import EmitOptions
from searcher.emitters.commands import _expresses, default_emit_pick
from searcher.emitters.plan import make_plan
from searcher.search.launch_formats import FORMAT_VALUES, NO_TENSOR_PARALLEL
from searcher.search.stack import parse_stack

#: Llama-family problems (every format has builders and plans for the family), small to search
PROBLEMS = (
    ("--model", "llama-3.2-1b", "--gpu", "a100-80gb", "--gpus", "8", "--target-batch", "32"),
    ("--model", "llama-3.2-1b", "--gpu", "rtx-4090", "--gpus", "1", "--target-batch", "8"),
    ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "16", "--method", "full"),
    ("--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--gpus", "2", "--method", "qlora"),
)


def _args(fmt: str | None, problem: tuple[str, ...]) -> argparse.Namespace:
    emit = ["--emit", fmt, "--out", "o"] if fmt else []
    return build_parser().parse_args(["search", *problem, *emit, "--stack", "all"])


@pytest.mark.parametrize("fmt", format_names())
def test_every_front_member_of_search_emit_is_written_by_the_format(fmt: str) -> None:
    for problem in PROBLEMS:
        args = _args(fmt, problem)
        result = run_cli_search(args, parse_stack("all"))
        assert result.front, problem
        refused = [i + 1 for i in range(len(result.front)) if not _expresses(result, i, args)]
        assert not refused, (fmt, problem, refused)


def test_the_unrestricted_front_holds_plans_torchtune_and_hf_refuse() -> None:
    """The restriction is needed (so the test above can fail): without --emit the front holds
    fused-loss plans torchtune refuses and tensor-parallel plans the HF Trainer refuses."""
    single = run_cli_search(_args(None, PROBLEMS[0]), parse_stack("all"))
    multi = run_cli_search(_args(None, PROBLEMS[2]), parse_stack("all"))
    assert any(m.config.loss == "fused" for m in single.front)
    assert any(m.config.tp > 1 for m in multi.front)


def _refusal(fmt: str, **knobs) -> str | None:
    # a plain DeepSpeed JSON keeps the fp32 master copy without ZeRO (its emitter says so)
    recipe = "bf16-master" if fmt == "deepspeed" else "bf16-torch"
    base = dict(method="full", micro_batch=1, seq_len=1024, recipe=recipe)
    if fmt == "torchtune" and knobs.get("method", "full") != "full":
        # the search pins what torchtune builds: adapters in the model's dtype (space.py)
        base["adapter_dtype"] = "bf16"
    cfg = TrainConfig(**{**base, **knobs})
    try:
        get_emitter(fmt).emit(make_plan(cfg, "llama-3.1-8b", gpu="h100-sxm"), EmitOptions("o"))
    except FitplanError as err:
        return err.message
    return None


@pytest.mark.parametrize("fmt", sorted(FORMAT_VALUES))
def test_values_outside_the_table_are_refused_by_the_emitter(fmt: str) -> None:
    lora = dict(method="lora", lora_rank=16, loss="standard")
    for knob, allowed in FORMAT_VALUES[fmt].items():
        tried = {
            "loss": ("standard", "chunked", "fused"),
            "quant": ("nf4", "nf4-dq", "int8"),
            "optimizer_in_backward": (False, True),
        }
        for value in tried[knob]:
            method = {"quant": "qlora", "optimizer_in_backward": "full"}.get(knob, "lora")
            knobs = {**lora, knob: value, "method": method}
            message = _refusal(fmt, **knobs)
            if value in allowed:
                assert message is None, (knob, value, message)
            else:
                assert message and f"cannot express {knob}={value}" in message


@pytest.mark.parametrize("fmt", format_names())
def test_tensor_parallel_table_agrees_with_the_emitter(fmt: str) -> None:
    message = _refusal(fmt, tp=2, dp=1, backend="fsdp2", zero=3)
    if fmt in NO_TENSOR_PARALLEL:
        assert message and "cannot express tp=2" in message
    else:
        assert message is None or "cannot express tp" not in message, message


def test_the_default_pick_is_a_member_the_format_writes() -> None:
    """Qwen2.5 has no torchtune QLoRA builder or TP plan (a model-family refusal the search
    does not know): the pick skips such members."""
    args = _args("torchtune", ("--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--gpus", "16"))
    result = run_cli_search(args, parse_stack("all"))
    pick = default_emit_pick(result, args)
    assert _expresses(result, pick - 1, args)
