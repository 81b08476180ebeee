"""What a plan needs depends on the framework that runs it: torchtune's QLoRA is torchao's NF4,
not bitsandbytes, and ``import torchtune`` (0.6.1) needs torchao whatever the plan.

Expectations from torchtune's own source at tag v0.6.1 (github.com/pytorch/torchtune, commit
a6290a5b): torchtune/__init__.py raises ImportError without torchao (which its pyproject does not
list), torchtune/modules/peft/lora.py imports ``linear_nf4, to_nf4`` from torchao, its attention
is torch SDPA, and its low-memory configs name ``bitsandbytes.optim.PagedAdamW8bit``."""

from __future__ import annotations

import pytest
from front_brute_force import assert_front_by_brute_force

from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.search import stack as S
from searcher.search.run import run_search
from searcher.search.space import SearchProblem, knob_values
from searcher.search.stack_front import run_stack_search
from searcher.search.strategies import ExhaustiveStrategy

QLORA = {"method": "qlora", "quant": "nf4-dq", "attention": "sdpa", "backend": "single"}


@pytest.mark.parametrize(
    ("knobs", "hf", "torchtune"),
    [
        (QLORA, ("bitsandbytes",), ("torchao",)),
        ({**QLORA, "attention": "flash"}, ("flash-attn", "bitsandbytes"), ("torchao",)),
        (
            {**QLORA, "optimizer": "paged-adamw-8bit"},
            ("bitsandbytes",),
            ("bitsandbytes", "torchao"),
        ),
        ({"method": "lora", "attention": "sdpa", "backend": "single"}, (), ("torchao",)),
    ],
)
def test_needs_by_framework(
    knobs: dict[str, object], hf: tuple[str, ...], torchtune: tuple[str, ...]
) -> None:
    cfg = TrainConfig(**knobs)  # type: ignore[arg-type]
    assert S.config_needs(cfg) == hf
    assert S.config_needs(cfg, S.HF) == hf
    assert S.config_needs(cfg, S.TORCHTUNE) == torchtune


def test_formats_map_to_their_framework() -> None:
    assert S.framework_of("torchtune") == S.TORCHTUNE
    assert S.framework_of("torchtune-command") == S.TORCHTUNE  # what `check` reads from tune run
    for fmt in (None, "hf", "axolotl", "accelerate", "deepspeed", "torchrun"):
        assert S.framework_of(fmt) == S.HF


def problem(stack: frozenset[str] | None, framework: str) -> SearchProblem:
    return SearchProblem(
        model=resolve_model("qwen2.5-0.5b"),
        gpu=resolve_gpu("rtx-4090"),
        max_gpus=1,
        target_batch=4,
        seq_len=1024,
        pins={"method": "qlora", "loss": "standard"},
        stack=stack,
        framework=framework,
    )


def test_the_torchtune_space_keeps_torchaos_nf4_without_bitsandbytes() -> None:
    torchao = frozenset({"torchao"})
    assert knob_values(problem(torchao, S.TORCHTUNE))["quant"] == ("nf4-dq",)
    assert knob_values(problem(torchao, S.TORCHTUNE))["attention"] == ("flash",)  # SDPA anyway
    assert knob_values(problem(torchao, S.HF))["attention"] == ("sdpa",)


def test_torchtune_qlora_runs_with_torchao_and_the_hf_one_does_not() -> None:
    torchao = frozenset({"torchao"})
    tt = run_stack_search(problem(torchao, S.TORCHTUNE), ExhaustiveStrategy())
    assert tt.front and not all(tt.stack_missing)
    for m, missing in zip(tt.front, tt.stack_missing, strict=True):
        # in the stack: torchao's nf4-dq; plain nf4 only as bitsandbytes, marked
        eight_bit = S.OPTIMIZER_PACKAGE.get(m.config.optimizer) == "bitsandbytes"
        assert ("bitsandbytes" in missing) == (m.config.quant == "nf4" or eight_bit)
    pick = tt.front[tt.default_pick() - 1].config
    assert pick.quant == "nf4-dq" and not S.missing_for(pick, torchao, S.TORCHTUNE)
    hf = run_stack_search(problem(torchao, S.HF), ExhaustiveStrategy())
    assert hf.front and all("bitsandbytes" in missing for missing in hf.stack_missing)


def test_without_torchao_every_torchtune_plan_is_marked() -> None:
    result = run_stack_search(
        problem(frozenset({"bitsandbytes"}), S.TORCHTUNE), ExhaustiveStrategy()
    )
    assert result.front and all("torchao" in missing for missing in result.stack_missing)
    unrestricted = run_search(problem(None, S.TORCHTUNE), ExhaustiveStrategy())
    assert [m.config for m in result.front] == [m.config for m in unrestricted.front]


def test_the_torchtune_front_is_the_four_objective_front_by_brute_force() -> None:
    stack = frozenset({"torchao"})
    result = run_stack_search(problem(stack, S.TORCHTUNE), ExhaustiveStrategy())
    spaces = (problem(None, S.TORCHTUNE), problem(stack, S.TORCHTUNE))
    assert_front_by_brute_force(
        result, spaces, lambda c: bool(S.missing_for(c, stack, S.TORCHTUNE))
    )
