"""The published attention-kernel curves (constraints/data/attention_kernels.csv) and their
interpolation. Expected figures are typed from the source figures (the FlashAttention-2 and -3
papers' bar labels), not from the code under test."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from constraints.attention_kernels import (
    ANCHOR_HEAD_DIM,
    ANCHOR_SEQ_LEN,
    CURVES,
    attention_curve,
    published_tflops,
    sequence_shape,
)

DATA = Path(__file__).parents[2] / "constraints" / "data" / "attention_kernels.csv"
A100_FA2 = ("flash_attn_2", "a100-80gb-sxm4", "fwd_bwd")


def _rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_row_names_its_figure_and_commit() -> None:
    rows = _rows()
    assert len(rows) > 150
    for r in rows:
        assert re.search(r"arXiv \d{4}\.\d{5}\) Fig\. \d", r["source"]), r
        assert re.search(r"@[0-9a-f]{40}\b", r["source"]), r
        assert r["panel"] in "abcdef" and r["panel"]


def test_interpolation_reproduces_every_published_point() -> None:
    for r in _rows():
        got = published_tflops(
            r["kernel"],
            r["gpu"],
            r["pass"],
            r["causal"] == "1",
            int(r["head_dim"]),
            np.array([int(r["seq_len"])]),
        )
        assert got[0] == pytest.approx(float(r["tflops"]), abs=1e-9), r


def test_fa2_a100_figure_values() -> None:
    # FlashAttention-2 Fig. 4 (d): causal, head dim 128, forward + backward, A100 80GB SXM4
    seq = np.array([512, 1024, 2048, 4096, 8192, 16384])
    expected = [99, 133, 155, 173, 182, 189]
    got = published_tflops(*A100_FA2[:3], True, 128, seq)
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("curve", [CURVES["ampere_fa2"], CURVES["hopper_fa2"]])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_speed_rises_with_sequence_length(
    curve: tuple[str, str, str], causal: bool, head_dim: int
) -> None:
    seq = np.geomspace(512, 16384, 41)
    tflops = published_tflops(*curve, causal, head_dim, seq)
    assert np.all(np.diff(tflops) >= -1e-9)
    # the sources show a clear rise from 512 to 16k tokens (at least 1.2x on every curve used)
    assert tflops[-1] / tflops[0] > 1.2


def test_cudnn_forward_dips_past_2k_without_mask_as_published() -> None:
    # FlashAttention-3 Fig. 5 (c): cuDNN forward, no mask, head dim 128: 617 at 2k, 595 at 16k
    got = published_tflops(*CURVES["hopper_cudnn"], False, 128, np.array([2048, 16384]))
    np.testing.assert_allclose(got, [617, 595])


def test_published_ratio_8k_over_1k_is_reproduced() -> None:
    # FA2 on A100, forward + backward, causal, head dim 128: 182 / 133 TFLOPS (Fig. 4 (d))
    s = np.array([1024, 8192])
    shape = sequence_shape(A100_FA2, True, 128, s)
    assert shape[1] / shape[0] == pytest.approx(182 / 133, rel=1e-9)
    # H100, the same panel of Fig. 7: 308 / 221
    h100 = sequence_shape(CURVES["hopper_fa2"], True, 128, s)
    assert h100[1] / h100[0] == pytest.approx(308 / 221, rel=1e-9)


def test_between_published_points_and_clamped_outside() -> None:
    # log2 midpoint of 1k and 2k lies between the two labels; beyond 16k the plateau holds
    mid = published_tflops(*A100_FA2, True, 128, np.array([1448, 65536, 128]))
    assert 133 < mid[0] < 155
    assert mid[1] == 189 and mid[2] == 99


def test_head_dim_interpolates_between_published_dims() -> None:
    s = np.array([4096])
    d64 = published_tflops(*A100_FA2, True, 64, s)[0]
    d96 = published_tflops(*A100_FA2, True, 96, s)[0]
    d128 = published_tflops(*A100_FA2, True, 128, s)[0]
    assert (d64, d128) == (156, 173)  # Fig. 4 (c), (d)
    assert d64 < d96 < d128
    assert published_tflops(*A100_FA2, True, 32, s)[0] == d64  # clamped below
    assert published_tflops(*A100_FA2, True, 256, s)[0] == d128  # clamped above


def test_shape_is_one_at_the_anchor_and_below_it_for_short_sequences() -> None:
    s = np.array([ANCHOR_SEQ_LEN, 512])
    for curve in CURVES.values():
        shape = sequence_shape(curve, True, ANCHOR_HEAD_DIM, s)
        assert shape[0] == pytest.approx(1.0)
        assert shape[1] < 0.7


def test_curve_choice_by_generation() -> None:
    assert attention_curve(False, False) == A100_FA2
    assert attention_curve(False, True) == A100_FA2
    assert attention_curve(True, False) == CURVES["hopper_fa2"]
    assert attention_curve(True, True)[0] == "cudnn"


def test_fa1_and_fa2_differ_as_the_figure_shows() -> None:
    # the generations the calibration rows ran: FA2 is 2.0-2.3x FA1 fwd+bwd on A100 at 8k-16k
    s = np.array([8192, 16384])
    fa1 = published_tflops("flash_attn_1", "a100-80gb-sxm4", "fwd_bwd", True, 128, s)
    fa2 = published_tflops(*A100_FA2, True, 128, s)
    np.testing.assert_allclose(fa2 / fa1, [182 / 80, 189 / 83])


def test_row_scale_keeps_eager_flat_and_picks_hopper_curves() -> None:
    from constraints.config import CODE
    from constraints.gpus import resolve_gpu
    from constraints.kernels import attention_efficiency_scale, attention_share

    seq = np.array([1024, 16384])
    eager_stack = np.full(2, CODE["kernels"]["eager"])
    te_stack = np.full(2, CODE["kernels"]["te"])
    flash = np.full(2, CODE["attention"]["flash"])
    eager_attn = np.full(2, CODE["attention"]["eager"])
    a100 = resolve_gpu("a100-80gb")
    h100 = resolve_gpu("h100-sxm")
    scale = attention_efficiency_scale(a100, eager_stack, flash, seq, 128, True)
    np.testing.assert_allclose(scale, [133 / 189, 1.0])  # Fig. 4 (d)
    np.testing.assert_allclose(
        attention_efficiency_scale(a100, eager_stack, eager_attn, seq, 128, True), [1.0, 1.0]
    )
    fa2 = attention_efficiency_scale(h100, eager_stack, flash, seq, 128, True)
    np.testing.assert_allclose(fa2 / attention_share(h100, eager_stack), [221 / 328, 1.0])
    te = attention_efficiency_scale(h100, te_stack, flash, seq, 128, True)
    np.testing.assert_allclose(te / attention_share(h100, te_stack), [410 / 539, 1.0])
