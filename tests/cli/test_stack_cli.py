"""``--stack`` on search / explain / launch: detected by default and said, named explicitly,
plans outside it marked (never picked by default), unknown names refused before any work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from searcher.cli import main

SEARCH = [
    "search",
    "--model",
    "qwen2.5-0.5b",
    "--gpu",
    "rtx-4090",
    "--gpus",
    "2",
    "--target-batch",
    "4",
    "--seq-len",
    "1024",
]
EXPLAIN = [
    "explain",
    "--model",
    "qwen2.5-0.5b",
    "--gpu",
    "rtx-4090",
    "--seq-len",
    "1024",
    "--recipe",
    "bf16-torch",  # the default bf16-master runs under DeepSpeed
]
#: the packages each knob value imports (transformers' docs: attn_implementation,
#: TrainingArguments optim names, BitsAndBytesConfig, use_liger_kernel), written out by hand
OPTIONAL_LINES = ("flash-attn==", "bitsandbytes==", "liger-kernel==", "deepspeed==")


@pytest.mark.parametrize(
    "argv",
    [
        [*SEARCH, "--stack", "flash-attn,flashattn"],
        [*EXPLAIN, "--stack", "cuda"],
        ["launch", "plan.json", "--emit", "hf", "--out", "x", "--stack", "liger"],
    ],
)
def test_unknown_stack_names_are_refused_naming_the_known_ones(
    refuse, tmp_path: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = refuse([*argv, "--out", str(tmp_path / "out")] if argv[0] == "search" else argv)
    assert "flash-attn, bitsandbytes, liger-kernel, deepspeed" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


def test_search_with_an_empty_stack_picks_and_writes_a_plan_that_needs_nothing_optional(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main([*SEARCH, "--stack", "none", "--emit", "hf", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert text.startswith("stack: none (--stack)")
    requirements = (out / "requirements.txt").read_text()
    assert "transformers==" in requirements
    for line in OPTIONAL_LINES:
        assert line not in requirements, requirements
    cfg = json.loads((out / "plan.json").read_text())["config"]
    assert cfg["attention"] == "sdpa"  # torch's own FlashAttention-2 kernel
    assert cfg["optimizer"] in ("adamw", "sgd", "sgd-momentum", "adafactor")
    assert cfg["quant"] == "none" and cfg["loss"] == "standard"
    assert cfg["backend"] in ("single", "ddp", "fsdp2")
    # the front shows marked plans too, explained under it, and the pick is not one of them
    assert "✗ needs: plans outside the stack" in text
    pick = re.search(r"front member (\d+) of", text)
    assert pick and f"front member {pick.group(1)} needs" not in text
    assert "pip install flash-attn==" in text


def test_search_json_marks_exactly_what_each_member_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main([*SEARCH, "--stack", "deepspeed", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["stack"] == ["deepspeed"]
    outside = [m["needs_outside_stack"] for m in data["front"]]
    assert any(outside) and not all(outside)
    for m in data["front"]:
        assert m["needs_outside_stack"] == [p for p in m["needs_packages"] if p != "deepspeed"]


def test_search_without_stack_says_what_it_detected(capsys: pytest.CaptureFixture[str]) -> None:
    from searcher.search.stack import detect_stack

    main([*SEARCH, "--top", "2"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("stack: ") and "importable here" in first
    for name in detect_stack().packages:
        assert name in first


def test_explain_says_what_a_configuration_needs_beyond_the_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main([*EXPLAIN, "--optimizer", "adamw-8bit", "--attention", "flash", "--stack", "none"])
    text = capsys.readouterr().out
    assert (
        "this configuration needs flash-attn, bitsandbytes, not in the stack: "
        "pip install flash-attn==2.8.3.post2 bitsandbytes==0.50.2"
    ) in " ".join(text.split())
    main([*EXPLAIN, "--optimizer", "adamw-8bit", "--stack", "all"])
    assert "not in the stack" not in capsys.readouterr().out
    main(
        [*EXPLAIN, "--optimizer", "adamw-8bit", "--attention", "sdpa", "--stack", "none", "--json"]
    )
    assert json.loads(capsys.readouterr().out)["needs_outside_stack"] == ["bitsandbytes"]


def test_launch_writes_the_plan_and_names_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main([*SEARCH, "--stack", "all", "--method", "lora", "--json"])
    front = json.loads(capsys.readouterr().out)["front"]
    member = next(m for m in front if "flash-attn" in m["needs_packages"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(member))
    code = main(
        ["launch", str(plan), "--emit", "hf", "--out", str(tmp_path / "o"), "--stack", "none"]
    )
    err = capsys.readouterr().err
    assert code == 0
    assert (tmp_path / "o" / "train.py").exists()
    assert "this plan needs flash-attn" in err and "pip install flash-attn==" in err
    main(["launch", str(plan), "--emit", "hf", "--out", str(tmp_path / "p"), "--stack", "all"])
    assert "needs" not in capsys.readouterr().err


def test_launch_torchtune_qlora_needs_torchao_not_bitsandbytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchtune 0.6.1's QLoRA base is torchao's NF4 (torchtune/modules/peft/lora.py), and
    ``import torchtune`` needs torchao (torchtune/__init__.py): bitsandbytes is not needed."""
    pins = ["--method", "qlora", "--quant", "nf4-dq", "--recipe", "bf16-torch"]
    pins += ["--loss", "standard", "--optimizer", "adamw", "--attention", "sdpa"]
    pins += ["--adapter-dtype", "bf16"]  # as torchtune builds them (PEFT's default is fp32)
    llama = [*SEARCH[:2], "llama-3.2-1b", *SEARCH[3:]]  # torchtune ships QLoRA for llama3_2
    main([*llama, *pins, "--gpus", "1", "--stack", "all", "--json"])
    member = json.loads(capsys.readouterr().out)["front"][0]
    assert member["needs_packages"] == ["bitsandbytes"]  # under the HF Trainer
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(member))
    launch = ["launch", str(plan), "--emit", "torchtune"]
    assert main([*launch, "--out", str(tmp_path / "a"), "--stack", "torchao"]) == 0
    assert "needs" not in capsys.readouterr().err
    assert main([*launch, "--out", str(tmp_path / "b"), "--stack", "bitsandbytes"]) == 0
    err = capsys.readouterr().err
    assert "this plan needs torchao, not in the stack: pip install torchao==0.10.0" in err
    assert "bitsandbytes" not in err.split("needs", 1)[1]
    hf = ["launch", str(plan), "--emit", "hf", "--out", str(tmp_path / "c")]
    assert main([*hf, "--stack", "torchao"]) == 0
    assert "this plan needs bitsandbytes" in capsys.readouterr().err
