"""fitplan check on hostile files: each is refused in one line with exit 2, quickly, before any
work (no hang on an alias bomb, a device file or a huge file; no RecursionError on deep nesting;
no ValueError/TypeError from a malformed ``tune run`` line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from searcher.cli import main


def _alias_bomb() -> str:
    """Eleven levels of six-fold mappings: 6**11 ≈ 3.6e8 values once the aliases are expanded."""
    lines = ["a0: &a0 {x: 1, y: 2}"]
    for i in range(1, 12):
        refs = ", ".join(f"k{j}: *a{i - 1}" for j in range(6))
        lines.append(f"a{i}: &a{i} {{{refs}}}")
    return "\n".join(lines) + "\n"


HOSTILE = {
    "bomb.yaml": (_alias_bomb(), "through aliases"),
    "brackets.yaml": ("[" * 30_000 + "]" * 30_000 + "\n", "nested deeper"),
    "dashes.yaml": ("- " * 5_000 + "x\n", "nested deeper"),
    "procs.sh": (
        "tune run lora_finetune_distributed --config llama3/8B_lora --nproc_per_node abc\n",
        "--nproc_per_node 'abc'",
    ),
    "quote.sh": (
        'tune run lora_finetune_distributed --config "llama3/8B_lora\n',
        "No closing quotation",
    ),
    "clash.sh": (
        "tune run lora_finetune_distributed --config llama3/8B_lora model=x model.lora_rank=8\n",
        "also sets to a value",
    ),
    "emptykey.sh": (
        "tune run lora_finetune_distributed --config llama3/8B_lora model..lora_rank=8\n",
        "empty key",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_is_refused_in_one_line(tmp_path: Path, capsys, name: str):
    text, reason = HOSTILE[name]
    path = tmp_path / name
    path.write_text(text)
    code = main(["check", str(path), "--gpu", "rtx-4090"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], err


def test_device_file_is_not_read(capsys):
    code = main(["check", "/dev/zero", "--gpu", "rtx-4090"])
    _out, err = capsys.readouterr()
    assert code == 2 and "not a regular file" in err


def test_file_over_the_yaml_cap_is_refused_before_it_is_parsed(tmp_path: Path, capsys):
    path = tmp_path / "huge.yaml"
    path.write_text("k: " + "x" * (5 << 20) + "\n")
    code = main(["check", str(path), "--gpu", "rtx-4090"])
    _out, err = capsys.readouterr()
    assert code == 2 and "too large" in err


@pytest.mark.parametrize(
    "size", ["99999999999999999999.00 GiB", "1.2.3 GiB", "2048.00 TiB"], ids=["huge", "dots", "pib"]
)
def test_oom_text_with_an_impossible_size_is_refused(capsys, size: str):
    text = (
        f"CUDA out of memory. Tried to allocate {size}. GPU 0 has a total capacity of 23.64 GiB "
        "of which 1.20 GiB is free."
    )
    config = Path(__file__).resolve().parents[1] / "data" / "check" / "axolotl-qlora-1b.yml"
    code = main(["check", str(config), "--oom", text])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "is not a size torch reports" in err and len(err.strip().splitlines()) == 1, err
