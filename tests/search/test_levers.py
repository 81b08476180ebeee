"""Lever advice: the printed flags make exactly the configuration the lever was costed on."""

from __future__ import annotations

import argparse
import importlib

import pytest

from constraints.config import TrainConfig
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
    assert set(FLAG_OF_FIELD) == set(TrainConfig.model_fields) - {"dp"}


def test_flags_follow_the_change_in_order():
    assert flags_of({"zero": 3, "offload": "optimizer"}) == "--zero 3 --offload optimizer"
    assert flags_of({"optimizer_in_backward": True, "grad_accum": 1}) == (
        "--optimizer-in-backward --grad-accum 1"
    )
    assert flags_of({"loss": "fused"}) == "--fused-ce"


BASES = [
    dict(method="full", optimizer="adamw-8bit", zero=3, dp=4, tp=2, micro_batch=4),
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
        changed = {k: v for k, v in new.items() if old[k] != v}
        assert changed, lv.change
        for field, value in changed.items():
            assert asked.get(field) == value, (lv.change, lv.flags, field)
