"""A GPTQ / AWQ base is a pre-quantised checkpoint: the HF-based emitters refuse it in one line
rather than writing a BitsAndBytesConfig that would quantise a 16-bit model instead."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from searcher.emitters.base import EmitOptions
from searcher.emitters.hf_settings import hf_settings
from searcher.emitters.plan import make_plan


@pytest.mark.parametrize("quant", ["gptq", "awq"])
def test_hf_emitters_refuse_a_prequantised_base(quant: str) -> None:
    plan = make_plan(TrainConfig(method="qlora", quant=quant), "llama-3.1-8b")
    with pytest.raises(FitplanError, match=f"cannot express quant={quant}"):
        hf_settings(plan, EmitOptions(out="run"), "hf")


def test_hf_emitters_still_write_bitsandbytes_for_nf4() -> None:
    plan = make_plan(TrainConfig(method="qlora", quant="nf4-dq"), "llama-3.1-8b")
    s = hf_settings(plan, EmitOptions(out="run"), "hf")
    assert s.quant is not None and s.quant["bnb_4bit_use_double_quant"] is True
