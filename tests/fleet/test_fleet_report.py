"""`fitplan fleet --report`: render the HTML, pull out its PNGs and look at them."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from searcher.cli import main
from searcher.fleet.report import METHOD_COLOURS, TERM_COLOURS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "fleet-example.yaml"


def pngs(html: str) -> dict[str, np.ndarray]:
    import matplotlib.image as mpimg

    out = {}
    for name, data in re.findall(r'<img id="(\w+)"[^>]*src="data:image/png;base64,([^"]+)"', html):
        out[name] = mpimg.imread(io.BytesIO(base64.b64decode(data)), format="png")
    return out


def looks_like_a_chart(img: np.ndarray, min_px: tuple[int, int] = (300, 300)) -> bool:
    """Big enough, not one flat colour, and ink on a real share of it."""
    h, w = img.shape[:2]
    rgb = img[..., :3]
    ink = (rgb < 0.9).any(axis=2).mean()  # share of pixels that are not (near) white
    return h >= min_px[0] and w >= min_px[1] and float(rgb.std()) > 0.05 and ink > 0.02


def pixels_near(img: np.ndarray, hex_colour: str, tol: float = 0.08) -> int:
    want = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img[..., :3] - want).max(axis=2) < tol).sum())


def test_checker_rejects_a_blank_image() -> None:
    assert not looks_like_a_chart(np.ones((400, 600, 4)))
    noise = np.random.default_rng(0).random((400, 600, 4))
    assert looks_like_a_chart(noise)


def test_report_renders_both_charts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    assert main(["fleet", str(EXAMPLE), "--report", str(out), "--workers", "1"]) == 1
    assert "report written" in capsys.readouterr().err
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "http" not in html.split("<body>")[1][:2000]
    for text in ("Capacity matrix", "Placement", "support-bot", "rush-70b", "deadline 2 h"):
        assert text in html
    images = pngs(html)
    assert set(images) == {"pareto", "memory"}
    for name, img in images.items():
        assert looks_like_a_chart(img), name
    pareto, memory = images["pareto"], images["memory"]
    # two placed jobs: two panels side by side, wider than tall
    assert pareto.shape[1] > pareto.shape[0]
    # coloured by method: the 7B LoRA/QLoRA front and the 70B full fine-tune front are both there
    for method in ("full", "lora", "qlora"):
        assert pixels_near(pareto, METHOD_COLOURS[method]) > 50, method
    # stacked memory bars: weights, gradients (the 70B full fine-tune), activations
    for term in ("weights", "gradients", "activations"):
        assert pixels_near(memory, TERM_COLOURS[term]) > 200, term


def test_report_path_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(EXAMPLE), "--report", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["fleet", str(EXAMPLE), "--report", str(tmp_path / "no" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    existing = tmp_path / "r.html"
    existing.write_text("<html>mine</html>")
    assert main(["fleet", str(EXAMPLE), "--report", str(existing)]) == 2  # before the search
    assert "exists (pass --force" in capsys.readouterr().err
    assert existing.read_text() == "<html>mine</html>"
