"""The command-line contract: JSON fields, exit codes, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from searcher.cli import main


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "searcher.cli", *argv], capture_output=True, text=True, timeout=120
    )


def test_explain_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "a100-80gb",
            "--method",
            "lora",
            "--rank",
            "16",
            "--micro-batch",
            "2",
            "--seq-len",
            "2048",
            "--checkpointing",
            "full",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["params"]["total"] == 8_030_261_248
    assert out["params"]["trainable"] == 41_943_040
    mem = out["memory_bytes"]
    five = ("weights", "gradients", "optimizer", "activations", "overhead")
    assert mem["total"] == sum(mem[k] for k in five)
    assert mem["overhead"] == mem["cuda_context"] + mem["allocator_slack"]
    assert mem["peak_allocated"] == mem["total"] - mem["overhead"]
    assert mem["peak_reserved"] == mem["total"] - mem["cuda_context"]
    assert out["gpu"]["capacity_bytes"] == 85_899_345_920  # nvidia-smi 81920 MiB
    assert out["gpu"]["usable_bytes"] < out["gpu"]["capacity_bytes"]
    assert out["fits"] is True


def test_explain_raw_numbers_case_b(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "--params", "7e9", "--recipe", "bf16-pure", "--gpu", "16GB", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["memory_bytes"]["static"] == 84_000_000_000  # seed 000 Step 4
    assert out["fits"] is False


def test_explain_does_not_fit_exit_code() -> None:
    assert main(["explain", "--params", "7e9", "--gpu", "16GB"]) == 1


def test_custom_gpu_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "--params", "1e9", "--gpu", "24GiB", "--json"])
    assert json.loads(capsys.readouterr().out)["gpu"]["capacity_bytes"] == 24 * 2**30
    main(["explain", "--params", "1e9", "--gpu", "16GB", "--json"])
    assert json.loads(capsys.readouterr().out)["gpu"]["capacity_bytes"] == 16 * 10**9


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["explain", "--model", "llama-3.1-9b"], "unknown model"),
        (["explain", "--model", "llama-3.1-8b", "--gpu", "h1000"], "unknown GPU"),
        (["explain", "--model", "llama-3.1-8b", "--rank", "8"], "LoRA"),
        (
            ["explain", "--model", "llama-3.1-8b", "--method", "full", "--quant", "nf4"],
            "cannot be trained",
        ),
        (["explain", "--model", "llama-3.1-8b", "--micro-batch", "0"], "positive"),
        (["explain", "--model", "llama-3.1-8b", "--micro-batch", "-3"], "positive"),
        (["explain", "--model", "gpt2", "--seq-len", "4096"], "context"),
        (["explain", "--params", "-5"], "positive"),
        (["explain", "--params", "1e20"], "absurd"),
        (["explain", "--params", "7e9", "--gpu", "0GB"], "positive"),
        (["explain", "--params", "7e9", "--headroom", "1.5"], "headroom"),
        (["explain", "--model", "gpt2", "--params", "7e9"], "not both"),
        (["explain", "--model", "gpt2", "--gpus", "3", "--tp", "2"], "multiple"),
        (["explain", "--model", "gpt2", "--recipe", "bf17"], "unknown precision recipe"),
        (["explain", "--model", "gpt2", "--optimizer", "adam9"], "unknown optimizer"),
        (["explain", "--model", "gpt2", "--offload", "all", "--zero", "2"], "zero 3"),
        (
            ["explain", "--model", "gpt2", "--method", "lora", "--lora-targets", "nothing"],
            "match no module",
        ),
        (["explain"], "no model"),
        (["explain", "--model", "gpt2", "--bogus-flag"], "unrecognized"),
        (["scenario", "run", "/nonexistent.yaml"], "no such scenario file"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv: list[str], needle: str) -> None:
    proc = run(*argv)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert needle.lower() in lines[0].lower()


def test_malformed_config_files(tmp_path: Path) -> None:
    cases = {
        "broken.json": "{not json",
        "partial.json": json.dumps({"model_type": "llama", "hidden_size": 4096}),
        "negative.json": json.dumps(
            {
                "model_type": "llama",
                "hidden_size": -1,
                "intermediate_size": 1,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "vocab_size": 10,
            }
        ),
        "list.json": "[1, 2]",
        "unknown.json": json.dumps({"model_type": "rwkv", "d_model": 10}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        proc = run("explain", "--model", str(path))
        assert proc.returncode == 2, (name, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = run("explain", "--model", str(tmp_path / "missing" / "config.json"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_config_json_path_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    main(["explain", "--model", str(tmp_path), "--json"])
    assert json.loads(capsys.readouterr().out)["params"]["total"] == 7_241_732_096


def test_models_types_lists_every_reading(capsys: pytest.CaptureFixture[str]) -> None:
    """What the refusal of an unknown model_type points to: every type with its own reader,
    every alias and every type read by its structure, each saying how."""
    from constraints.hf_config_aliases import BUILT_AS, structure_families
    from constraints.model_spec import SUPPORTED_TYPES

    assert main(["models", "--types", "--json"]) == 0
    types = json.loads(capsys.readouterr().out)
    assert set(types) == set(SUPPORTED_TYPES) | set(BUILT_AS) | set(structure_families())
    assert types["gemma4_text"]["read"] == "its own reader"
    assert types["biogpt"]["read"].startswith("as opt (transformers builds")
    assert types["granite"]["read"].startswith("as llama (transformers builds GraniteForCausalLM")
    assert main(["models", "--types"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "falcon_h1 │ its own reader" in shown and "pip install '.[measure]'" in shown


def test_help_and_listing() -> None:
    assert run("--help").returncode == 0
    proc = run("models")
    assert proc.returncode == 0 and "llama-3.1-8b" in proc.stdout
    proc = run("gpus")
    assert proc.returncode == 0 and "rtx-4090" in proc.stdout
