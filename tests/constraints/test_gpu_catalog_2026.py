"""The cards people train on in 2026: each resolves by its usual names, and its figures agree
with the other figures of the same datasheet (the tensor rates scale as the vendor states them)."""

from __future__ import annotations

import re

import pytest

from constraints.errors import FitplanError
from constraints.gpus import gpu_catalog, resolve_gpu

NEW = {
    "rtx-4080": "RTX 4080",
    "rtx-4080-super": "4080 super",
    "rtx-4070-ti-super": "4070 Ti Super",
    "rtx-4060-ti-16gb": "4060 ti 16gb",
    "rtx-3060-12gb": "3060",
    "rtx-3080": "3080",
    "rtx-a5000": "A5000",
    "rtx-a4500": "a4500",
    "rtx-a4000": "A4000",
    "rtx-6000-ada": "RTX 6000 Ada",
    "rtx-pro-6000": "RTX PRO 6000",
    "h20": "nvidia h20",
    "gh200": "grace hopper",
    "b300": "blackwell ultra",
    "mi325x": "instinct mi325x",
    "mi355x": "instinct mi355x",
}


@pytest.mark.parametrize(("gpu_id", "alias"), NEW.items())
def test_each_card_resolves_by_its_usual_name(gpu_id: str, alias: str) -> None:
    assert resolve_gpu(alias).id == gpu_id


@pytest.mark.parametrize("gpu_id", NEW)
def test_driver_reported_capacity_is_the_stored_bytes(gpu_id: str) -> None:
    g = gpu_catalog()[gpu_id]
    mib = re.match(r"nvidia-smi (\d+) MiB", g.memory_reported_as)
    if mib:
        assert g.memory_bytes == int(mib.group(1)) * 2**20
    else:
        assert "datasheet" in g.memory_reported_as  # said so where no driver total was seen


def test_geforce_ada_tensor_rates_follow_the_whitepaper_ratios() -> None:
    """Ada GeForce: int8 dense = 4 x fp16 with fp32 accumulate (half of the fp16-accumulate
    rate), fp8 = 2 x; professional Ampere: int8 = 2 x bf16 (full-rate fp32 accumulate)."""
    cat = gpu_catalog()
    for gpu_id in ("rtx-4080", "rtx-4080-super", "rtx-4070-ti-super", "rtx-4060-ti-16gb"):
        g = cat[gpu_id]
        assert g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=0.01)
    for gpu_id in ("rtx-a5000", "rtx-a4500", "rtx-a4000"):
        g = cat[gpu_id]
        assert g.tf32_tflops == pytest.approx(g.bf16_tflops / 2, rel=0.01)
    # a T4-class card and these: bf16 where the architecture has it
    assert not cat["t4"].supports_bf16 and cat["rtx-3060-12gb"].supports_bf16


def test_a_card_the_catalog_lacks_is_met_with_its_neighbours_and_the_raw_form() -> None:
    with pytest.raises(FitplanError) as err:
        resolve_gpu("rtx-4070")
    assert "rtx-4080" in err.value.hint and "--gpu 16GiB" in err.value.hint
