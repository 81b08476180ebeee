"""The page file: self-contained, refuses to overwrite, and carries each view's members."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from searcher.cli import main

pytest.importorskip("plotly")


def _payload(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    return json.loads(re.search(r"const FITPLAN = (.*?);</script>", text, re.S).group(1))


def test_serve_page_is_one_self_contained_file(tmp_path: Path, capsys) -> None:
    page = tmp_path / "serve.html"
    argv = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
    assert main([*argv, "--report", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert re.findall(r"<script[^>]*>", text) == ["<script>"] * 3  # inlined: no src, no CDN
    assert "<link" not in text
    d = _payload(page)
    assert [m["label"].split(":")[0] for m in d["members"]] == ["TP 1", "TP 2", "TP 4", "TP 8"]
    assert d["members"][d["selected"]]["command"].startswith("vllm serve meta-llama/")
    assert "--tensor-parallel-size 1" in d["members"][0]["command"]


def test_an_existing_page_is_not_overwritten_without_force(tmp_path: Path, capsys) -> None:
    page = tmp_path / "p.html"
    page.write_text("mine")
    argv = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--report", str(page)]
    assert main(argv) == 2
    assert "exists" in capsys.readouterr().err and page.read_text() == "mine"
    assert main([*argv, "--force"]) == 0
    assert page.read_text() != "mine"


def test_explain_page_shows_the_configuration_and_its_levers(tmp_path: Path, capsys) -> None:
    page = tmp_path / "e.html"
    argv = ["explain", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--method", "full"]
    main([*argv, "--report", str(page)])
    d = _payload(page)
    first = d["members"][0]
    assert set(first["terms"]) == {"weights", "gradients", "optimizer", "activations", "overhead"}
    assert len(d["members"]) > 1 and all(m["label"].startswith("lever") for m in d["members"][1:])
    assert "--report" not in first["command"]


def test_search_page_has_one_member_per_front_member(tmp_path: Path, capsys) -> None:
    page = tmp_path / "s.html"
    argv = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "4"]
    main([*argv, "--seq-len", "512", "--json", "--report", str(page)])
    front = json.loads(capsys.readouterr().out)["front"]
    d = _payload(page)
    assert len(d["members"]) == len(front)
    assert d["members"][2]["command"].endswith("--pick 3 --emit hf --out run-3/")


def test_search_page_shows_what_each_member_needs_beyond_the_stack(tmp_path: Path, capsys) -> None:
    page = tmp_path / "s.html"
    argv = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "4"]
    main([*argv, "--seq-len", "512", "--stack", "deepspeed", "--json", "--report", str(page)])
    front = json.loads(capsys.readouterr().out)["front"]
    d = _payload(page)
    assert d["facts"]["stack"] == "deepspeed"
    outside = [m["needs_outside_stack"] for m in front]
    assert any(outside) and not all(outside)  # the JSON's marks, member by member
    for member, needs in zip(d["members"], outside, strict=True):
        assert member["needs"] == needs
        assert member["details"]["needs (outside the stack)"] == (", ".join(needs) or "nothing")
        assert ("✗ needs" in member["hover"]) == bool(needs)
