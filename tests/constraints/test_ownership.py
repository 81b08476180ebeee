"""Buy vs rent arithmetic: the break-even utilisation, by hand, and the overrides."""

from __future__ import annotations

import pytest

from constraints.errors import FitplanError
from constraints.ownership import ownership_of


def test_break_even_by_hand():
    # $20,000 + 3 × $500 fixed; 26,298 h; $2/h rent less 1 kW × 1.5 × $0.20 = $0.30/h of power
    o = ownership_of(
        "h100-sxm",
        purchase_usd=20_000,
        power_w=1000,
        years=3,
        pue=1.5,
        usd_per_kwh=0.20,
        hosting_usd_per_gpu_year=500,
    )
    assert o.break_even_utilization(2.0) == pytest.approx(21_500 / (26_298 * 1.70), rel=1e-3)
    u = o.break_even_utilization(2.0)
    assert o.own_usd(u) == pytest.approx(o.rent_usd(2.0, u))
    assert o.own_usd(1.0) < o.rent_usd(2.0, 1.0) and o.own_usd(0.1) > o.rent_usd(2.0, 0.1)


def test_renting_below_the_power_cost_never_breaks_even():
    o = ownership_of("rtx-4090", usd_per_kwh=10.0)
    assert o.break_even_utilization(0.30) == float("inf")


def test_unknown_gpu_needs_its_price():
    with pytest.raises(FitplanError, match="purchase price"):
        ownership_of("my-card")
    assert ownership_of("my-card", purchase_usd=1000, power_w=300).purchase_usd == 1000
