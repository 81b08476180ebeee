"""A user's calibration CSV with a measured value that is not one: the row is left out with the
reason (``fitplan accuracy --excluded``), never divided by or averaged in."""

from __future__ import annotations

import csv

import pytest

from searcher.truth.throughput_rows import THROUGHPUT_CSV, throughput_case


def _row(row_id: str) -> dict[str, str]:
    with open(THROUGHPUT_CSV, encoding="utf-8") as f:
        return next(r for r in csv.DictReader(f) if r["row_id"].strip() == row_id)


def test_the_shipped_row_is_used() -> None:
    case = throughput_case(_row("30"))
    assert case.excluded is None and case.measured_tokens_per_s_per_gpu == 4800


@pytest.mark.parametrize("cell", ["0", "-4800", "nan", "inf"])
def test_a_measured_rate_that_is_not_positive_and_finite_excludes_the_row(cell: str) -> None:
    row = {**_row("30"), "tokens_per_sec_per_gpu": cell}
    case = throughput_case(row)
    assert case.excluded is not None and "must be a positive number" in case.excluded
