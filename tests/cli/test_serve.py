"""fitplan serve: the JSON contract and the exit codes."""

from __future__ import annotations

import json

import pytest

from searcher.cli import main


def test_serve_json_names_the_kv_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["serve", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--context", "2048", "--json"]
    )
    j = json.loads(capsys.readouterr().out)
    assert code == 0
    assert j["kv_bytes_per_token"] == 524_288
    assert j["kv_bytes_per_request"] == 524_288 * 2048
    assert j["max_concurrency"] >= 1 and j["question"] == "concurrency"
    assert j["speed"]["decode_tokens_per_s"] > 0


def test_serve_exit_1_when_it_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["serve", "--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--context", "2048"]) == 1
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--concurrency", "0"],
        ["--context", "999999"],
        ["--tp", "3"],
        ["--gpu-memory-utilization", "0"],
        ["--block-size", "0"],
        ["--block-size", "17"],
        ["--block-size", "512"],
    ],
)
def test_serve_bad_input_is_one_line_exit_2(argv, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("fitplan: error:")
