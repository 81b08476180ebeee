"""The installed stack: what a configuration needs, detection, and the 4-objective front
(cost, memory, quality, "needs a package outside the stack") checked by brute force."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from front_brute_force import assert_front_by_brute_force

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.search import stack as S
from searcher.search.run import run_search
from searcher.search.space import SearchProblem, knob_values
from searcher.search.stack_front import run_stack_search
from searcher.search.strategies import ExhaustiveStrategy


def problem(stack: frozenset[str] | None, **pins: object) -> SearchProblem:
    return SearchProblem(
        model=resolve_model("qwen2.5-0.5b"),
        gpu=resolve_gpu("rtx-4090"),
        max_gpus=2,
        target_batch=4,
        seq_len=1024,
        pins=dict(pins),
        stack=stack,
    )


# ---- what a configuration needs (each expectation written from the packages' own docs) ----


@pytest.mark.parametrize(
    ("knobs", "needs"),
    [
        # plain torch: SDPA attention, torch AdamW, torch cross-entropy, one GPU
        ({"attention": "sdpa", "backend": "single"}, ()),
        ({"attention": "eager", "optimizer": "sgd", "backend": "ddp", "dp": 2}, ()),
        # HF attn_implementation="flash_attention_2" imports flash_attn
        ({"attention": "flash", "backend": "single"}, ("flash-attn",)),
        # TrainingArguments optim adamw_bnb_8bit / paged_adamw_8bit / lion_32bit are bitsandbytes
        (
            {"attention": "sdpa", "optimizer": "paged-adamw-8bit", "backend": "single"},
            ("bitsandbytes",),
        ),
        ({"attention": "sdpa", "optimizer": "lion", "backend": "single"}, ("bitsandbytes",)),
        # BitsAndBytesConfig(load_in_4bit) for QLoRA; use_liger_kernel for the fused loss
        (
            {
                "method": "qlora",
                "quant": "nf4",
                "loss": "fused",
                "attention": "sdpa",
                "backend": "single",
            },
            ("bitsandbytes", "liger-kernel"),
        ),
        # ZeRO-1 runs only under DeepSpeed; inferred when no backend is written
        ({"attention": "sdpa", "zero": 1, "dp": 2, "recipe": "bf16-master"}, ("deepspeed",)),
        ({"attention": "sdpa", "kernels": "te", "backend": "single"}, ("transformer-engine",)),
        (
            {
                "attention": "sdpa",
                "compute_dtype": "fp8",
                "fp8_recipe": "rowwise",
                "backend": "single",
            },
            ("torchao",),
        ),
    ],
)
def test_config_needs(knobs: dict[str, object], needs: tuple[str, ...]) -> None:
    assert S.config_needs(TrainConfig(**knobs)) == needs  # type: ignore[arg-type]


def test_missing_is_what_the_stack_lacks() -> None:
    cfg = TrainConfig(method="qlora", quant="nf4", attention="flash", backend="single")
    assert S.missing_for(cfg, None) == ()
    assert S.missing_for(cfg, frozenset({"bitsandbytes"})) == ("flash-attn",)
    assert S.missing_for(cfg, frozenset()) == ("flash-attn", "bitsandbytes")


def test_parse_stack_names_all_none_and_refuses_unknown() -> None:
    assert S.parse_stack("flash-attn, Bitsandbytes").packages == {"flash-attn", "bitsandbytes"}
    assert S.parse_stack("none").packages == frozenset()
    assert S.parse_stack("all").packages == set(S.KNOWN_PACKAGES)
    with pytest.raises(FitplanError) as err:
        S.parse_stack("flash-attn,flash_attention")
    assert "'flash_attention'" in err.value.message
    assert "liger-kernel" in (err.value.hint or "")


def test_detect_reports_what_find_spec_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    found = {"flash_attn", "deepspeed"}
    monkeypatch.setattr(
        S.importlib.util, "find_spec", lambda name: object() if name in found else None
    )
    stack = S.detect_stack()
    assert stack.packages == {"flash-attn", "deepspeed"}
    assert stack.source == "detected"


def test_detect_imports_nothing_heavy() -> None:
    code = (
        "import sys; from searcher.search.stack import detect_stack; s = detect_stack(); "
        "print(sorted(m for m in ('deepspeed', 'bitsandbytes', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the narrowed space ------------------------------------------------------------------


def test_an_empty_stack_narrows_every_unpinned_knob() -> None:
    v = knob_values(problem(frozenset()))
    assert v["attention"] == ("sdpa",)
    assert v["optimizer"] == ("adamw",)
    assert v["loss"] == ("standard",)
    assert knob_values(problem(None))["attention"] == ("flash",)  # an sm89 card


def test_a_pin_outside_the_stack_stays_and_is_marked() -> None:
    result = run_stack_search(problem(frozenset(), optimizer="adamw-8bit"), ExhaustiveStrategy())
    assert result.front
    assert all(m.config.optimizer == "adamw-8bit" for m in result.front)
    assert all("bitsandbytes" in missing for missing in result.stack_missing)
    assert result.default_pick() == 1  # nothing runs with the stack: the best, marked


def test_an_unrestricted_stack_is_the_plain_search() -> None:
    plain = run_search(problem(None), ExhaustiveStrategy())
    full = run_stack_search(problem(frozenset(S.KNOWN_PACKAGES)), ExhaustiveStrategy())
    assert [m.config for m in full.front] == [m.config for m in plain.front]
    assert not any(full.stack_missing)


def test_the_front_is_the_four_objective_front_by_brute_force() -> None:
    stack: frozenset[str] = frozenset()
    result = run_stack_search(problem(stack), ExhaustiveStrategy())
    assert result.front and any(result.stack_missing) and not all(result.stack_missing)
    assert_front_by_brute_force(
        result, (problem(None), problem(stack)), lambda c: bool(S.missing_for(c, stack))
    )
    # marks agree with the configurations, and the default pick runs with the stack
    for m, missing in zip(result.front, result.stack_missing, strict=True):
        assert missing == S.missing_for(m.config, stack)
    pick = result.front[result.default_pick() - 1]
    assert S.config_needs(pick.config) == ()
    assert not any(not missing for missing in result.stack_missing[: result.default_pick() - 1])


def test_the_problem_stack_does_not_leak_into_the_search_of_other_callers() -> None:
    p = problem(frozenset({"deepspeed"}))
    assert dataclasses.replace(p, stack=None).stack is None
    assert run_stack_search(p, ExhaustiveStrategy()).problem.stack == {"deepspeed"}
