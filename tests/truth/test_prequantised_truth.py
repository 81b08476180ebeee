"""The ground-truth tools refuse a GPTQ / AWQ base in one line: the step tracer quantises with
bitsandbytes only, and a pre-quantised checkpoint cannot be rebuilt from random weights."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.models import catalog_model
from searcher.truth.step_build import check_supported


@pytest.mark.parametrize("quant", ["gptq", "awq"])
def test_step_tracer_refuses_a_prequantised_base(quant: str) -> None:
    with pytest.raises(FitplanError, match=f"--quant {quant}"):
        check_supported(catalog_model("llama-3.2-1b"), TrainConfig(method="qlora", quant=quant))
