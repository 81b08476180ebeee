"""Lever advice: the printed flags make exactly the configuration the lever was costed on."""

from __future__ import annotations

import argparse
import importlib
import random

import pytest

from constraints.breakdown import breakdown_of
from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.inputs import config_fields_from_args
from searcher.search.levers import FLAG_OF_FIELD, advise, flags_of


def _explain_parser() -> argparse.ArgumentParser:
    parser = importlib.import_module("searcher.cli.parser").build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["explain"]


def test_every_field_maps_to_an_explain_option_of_that_field():
    by_flag = {s: a.dest for a in _explain_parser()._actions for s in a.option_strings}
    for field, flag in FLAG_OF_FIELD.items():
        assert flag in by_flag, flag
        # the option's dest is the field, or the CLI's short name for it (--rank -> lora_rank)
        assert by_flag[flag] in (field, field.removeprefix("lora_")), (field, flag)
    # loss_chain and kbit_saves_input follow the transformers and bitsandbytes releases
    # (--transformers, --bitsandbytes), not knobs of their own
    derived = {"dp", "loss_chain", "kbit_saves_input"}
    assert set(FLAG_OF_FIELD) == set(TrainConfig.model_fields) - derived


def test_flags_follow_the_change_in_order():
    assert flags_of({"zero": 3, "offload": "optimizer"}) == "--zero 3 --offload optimizer"
    assert flags_of({"optimizer_in_backward": True, "grad_accum": 1}) == (
        "--optimizer-in-backward --grad-accum 1"
    )
    assert flags_of({"loss": "fused"}) == "--fused-ce"


BASES = [
    # FSDP2 2-D (torchtune / torchtitan): full fine-tune, bf16 model, torch AdamW
    dict(method="full", recipe="bf16-torch", zero=3, dp=4, tp=2, micro_batch=4),
    dict(method="full", recipe="amp", attention="eager", micro_batch=2),
    dict(method="qlora", quant="nf4", micro_batch=8, seq_len=4096),
]


@pytest.mark.parametrize("base", BASES)
def test_printed_flags_make_the_costed_configuration(base):
    spec, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("rtx-4090")
    cfg = TrainConfig(**base)
    levers = advise(spec, cfg, gpu).levers
    assert levers
    parser = _explain_parser()
    for lv in levers:
        args = parser.parse_args(
            ["--model", "llama-3.1-8b", "--gpu", "rtx-4090", *lv.flags.split()]
        )
        asked, _ = config_fields_from_args(args, spec, gpu)
        old, new = cfg.model_dump(), lv.config.model_dump()
        # dp has no flag: it follows from --gpus / (tp · pp) (the test below runs that too)
        changed = {k: v for k, v in new.items() if old[k] != v and k != "dp"}
        assert changed, lv.change
        for field, value in changed.items():
            assert asked.get(field) == value, (lv.change, lv.flags, field)


def _argv_of(cfg: TrainConfig, model: str, gpu: str) -> list[str]:
    """The explain command line that makes ``cfg`` (every field that differs from the default;
    the recipe, attention and checkpointing always, since explain fills them from the stack)."""
    default = TrainConfig().model_dump()
    argv = ["--model", model, "--gpu", gpu, "--gpus", str(cfg.gpus)]
    named = ("backend", "recipe", "attention", "checkpointing")
    for field, value in cfg.model_dump().items():
        if field == "dp" or (field not in named and value == default[field]):
            continue
        if field == "backend" and value == cfg.inferred_backend():
            continue
        argv += flags_of({field: value}).split()
    return argv


def _random_base(rng: random.Random) -> TrainConfig | None:
    method = rng.choice(["full", "full", "lora", "qlora"])
    try:
        cfg = TrainConfig(
            method=method,
            quant=rng.choice(["nf4", "nf4-dq"]) if method == "qlora" else "none",
            recipe=rng.choice(["bf16-master", "bf16-torch", "amp"]),
            optimizer=rng.choice(["adamw", "adamw-8bit", "sgd"]),
            micro_batch=rng.choice([1, 2, 4, 8]),
            seq_len=rng.choice([1024, 2048, 4096]),
            grad_accum=rng.choice([1, 4]),
            checkpointing=rng.choice(["none", "full"]),
            attention=rng.choice(["flash", "sdpa", "eager"]),
            loss=rng.choice(["standard", "fused"]),
            zero=rng.choice([0, 1, 2, 3]),
            tp=rng.choice([1, 1, 2]),
            dp=rng.choice([1, 2, 4, 8]),
        )
    except (FitplanError, ValueError):
        return None
    return cfg if cfg.backend_problem() is None else None


def test_every_printed_lever_run_as_printed_saves_what_it_says():
    """A few hundred random runnable configurations (seeded): each printed lever's flags, run
    through the explain parser on top of the base command line, give the configuration the lever
    was costed on, and its total is the base total less the printed saving."""
    from searcher.inputs import explain_config

    rng = random.Random(11)
    parser = _explain_parser()
    checked = 0
    for model, gpu in (("llama-3.1-8b", "a100-80gb"), ("qwen2.5-0.5b", "rtx-4090")):
        spec, card = resolve_model(model), resolve_gpu(gpu)
        bases = [b for b in (_random_base(rng) for _ in range(300)) if b is not None]
        for base in bases[:120]:
            argv = _argv_of(base, model, gpu)
            _s, _g, again, _h, _n, _a = explain_config(parser.parse_args(argv))
            assert again == base, argv
            total = breakdown_of(spec, [base], card)[0].total
            for lv in advise(spec, base, card).levers:
                _s, _g, made, _h, _n, _a = explain_config(
                    parser.parse_args(argv + lv.flags.split())
                )
                assert made == lv.config, (argv, lv.change, lv.flags)
                new_total = breakdown_of(spec, [made], card)[0].total
                assert total - new_total == lv.saves, (argv, lv.flags)
                checked += 1
    assert checked > 300
