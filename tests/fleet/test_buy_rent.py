"""Buy vs rent in the fleet plan: overrides from the fleet file, utilisation from the placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from searcher.fleet.buy_rent import buy_rent_json, buy_vs_rent
from searcher.fleet.fleet_file import load_fleet
from searcher.fleet.plan import plan_fleet

FLEET = """\
title: buy or rent
ownership: {years: 2, pue: 1.2, usd_per_kwh: 0.15, hosting_usd_per_gpu_year: 400}
pools:
  - name: owned
    gpu: rtx-4090
    count: 2
    link: pcie
    usd_per_gpu_hour: 0.40
    purchase_usd: 2000
    power_w: 500
jobs:
  - name: tiny
    model: qwen2.5-0.5b
    methods: [full]
    target_batch: 8
    seq_len: 512
    tokens: 5M
"""


def test_fleet_file_overrides_and_break_even_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    plan = plan_fleet(load_fleet(path), workers=1)
    (row,) = buy_vs_rent(plan)
    # fixed $2,000 + 2 × $400; 2 × 8,766 h; $0.40/h less 0.5 kW × 1.2 × $0.15 = $0.09/h
    assert row.break_even == pytest.approx(2800 / (17_532 * 0.31), rel=1e-4)
    # one job on the pool: utilisation = its GPU-hours over (2 GPUs × its own hours)
    placed = plan.placed[0].option
    assert row.utilization == pytest.approx(placed.gpus / 2)
    (j,) = buy_rent_json([row])
    assert j["verdict"] == ("buy" if row.utilization > row.break_even else "rent")
    assert j["source"] == "the fleet file"


def test_utilization_override(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        FLEET.replace(
            "hosting_usd_per_gpu_year: 400}", "hosting_usd_per_gpu_year: 400, utilization: 0.9}"
        )
    )
    (row,) = buy_vs_rent(plan_fleet(load_fleet(path), workers=1))
    assert row.utilization == 0.9 and row.verdict == "buy"
    assert row.own_usd < row.rent_usd
