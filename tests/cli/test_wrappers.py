"""Multimodal wrappers read as ``--model config.json`` (searcher/wrappers.py): the text model
planned, the other towers' weights held and their Linears adapted by PEFT's all-linear.

The references are independent: transformers' own parameter count of the wrapper it builds on
the meta device, and PEFT's own trainable count after ``get_peft_model(all-linear)``. Shapes are
changed from the defaults (layers, widths, vocabularies) so no count is a default's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searcher.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: (wrapper type, its text_config changes): text models of four families
WRAPPERS = [
    ("llava", {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
               "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
               "vocab_size": 3000}),
    ("mistral3", {"model_type": "mistral", "hidden_size": 640, "intermediate_size": 1536,
                  "num_hidden_layers": 2, "num_attention_heads": 10, "num_key_value_heads": 5,
                  "head_dim": 64, "vocab_size": 5000}),
    ("gemma3", {"model_type": "gemma3_text", "hidden_size": 384, "intermediate_size": 1024,
                "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 96, "vocab_size": 4100}),
    ("paligemma", {"model_type": "gemma", "hidden_size": 256, "intermediate_size": 768,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
                   "head_dim": 64, "vocab_size": 2048}),
]  # fmt: skip


def _write(tmp_path: Path, model_type: str, text: dict) -> tuple[Path, object]:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, text_config=text)
    path = tmp_path / model_type / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config.to_dict()), encoding="utf-8")
    return path, config


def _built(config: object) -> object:
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(config)


def _explain(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> dict:
    base = ["explain", "--model", str(path), "--gpu", "a100-80gb", "--seq-len", "128"]
    assert main([*base, "--micro-batch", "1", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("model_type", "text"), WRAPPERS)
def test_text_model_and_towers_count_what_transformers_builds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model_type: str, text: dict
) -> None:
    path, config = _write(tmp_path, model_type, text)
    out = _explain(capsys, path, "--method", "lora", "--rank", "8")
    params = out["params"]
    assert params["total"] + params["other_towers"] == _built(config).num_parameters()
    assert params["other_towers"] > 0


@pytest.mark.parametrize(("model_type", "text"), WRAPPERS[:2])
def test_all_linear_adapts_the_towers_as_peft_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model_type: str, text: dict
) -> None:
    from peft import LoraConfig, get_peft_model

    path, config = _write(tmp_path, model_type, text)
    out = _explain(capsys, path, "--method", "lora", "--rank", "8", "--lora-targets", "all-linear")
    peft_model = get_peft_model(_built(config), LoraConfig(r=8, target_modules="all-linear"))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert out["params"]["trainable"] == trainable


def test_the_towers_are_held_in_the_base_dtype(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """bf16 base: the towers add 2 B per parameter to the base weights, nothing to the
    activations (a text-only step does not run them)."""
    model_type, text = WRAPPERS[0]
    path, _config = _write(tmp_path, model_type, text)
    text_only = tmp_path / "text.json"
    text_only.write_text(json.dumps(json.loads(path.read_text())["text_config"]))
    pins = ["--method", "full", "--recipe", "bf16-torch"]
    wrapped = _explain(capsys, path, *pins)
    alone = _explain(capsys, text_only, *pins)
    towers = wrapped["params"]["other_towers"]
    grown = wrapped["memory_bytes"]["base_weights"] - alone["memory_bytes"]["base_weights"]
    assert grown == pytest.approx(2 * towers)
    saved = "saved_activations"
    assert wrapped["memory_bytes"][saved] == pytest.approx(alone["memory_bytes"][saved])
    assert wrapped["params"]["trainable"] == alone["params"]["trainable"]  # towers frozen


def test_without_torch_the_refusal_says_how_to_read_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import searcher.hub
    import searcher.wrappers

    path, _config = _write(tmp_path, *WRAPPERS[0])
    monkeypatch.setattr(searcher.wrappers, "read_wrapper", lambda _text: None)
    monkeypatch.setattr(searcher.hub, "_structure_readable", lambda: False)
    assert main(["explain", "--model", str(path), "--gpu", "a100-80gb"]) == 2
    err = capsys.readouterr().err
    assert "is multimodal" in err and "pip install '.[measure]'" in err
    assert "Traceback" not in err


def test_a_tower_needing_a_missing_package_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemma 3n's vision tower needs timm: transformers raises ImportError (its message ends
    "You can install it with pip: `pip install timm`"); the refusal names the package."""
    import searcher.wrappers

    path, _config = _write(tmp_path, *WRAPPERS[0])

    def needs_timm(model_type: str, cfg: dict) -> dict:
        raise ImportError(
            "TimmWrapperModel requires the timm library but it was not found in your "
            "environment. You can install it with pip: `pip install timm`. Please note..."
        )

    monkeypatch.setattr(searcher.wrappers, "count_towers", needs_timm)
    assert main(["explain", "--model", str(path), "--gpu", "a100-80gb"]) == 2
    err = capsys.readouterr().err
    assert "other towers of llava only with timm installed" in err and "pip install timm" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("model_id", ["gemma-3-4b", "gemma-3-12b", "gemma-3-27b"])
def test_the_catalogs_towers_are_what_transformers_builds(model_id: str) -> None:
    """The catalog stores each multimodal checkpoint's towers (a base install has no torch to
    count them); the installed transformers builds the same."""
    from constraints.models import catalog_entry
    from searcher.wrappers import count_towers

    entry = catalog_entry(model_id)
    counted = count_towers(entry["config"]["model_type"], entry["config"])
    stored = entry["towers"]
    for key in ("tied", "params", "linear_params", "lora_width", "note"):
        assert counted[key] == stored[key], key


#: audio wrappers (built as transformers' multimodal LM, their head included)
AUDIO = [
    ("qwen2_audio", {"model_type": "qwen2", "hidden_size": 512, "intermediate_size": 1376,
                     "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
                     "vocab_size": 3000}),
    ("voxtral", {"model_type": "llama", "hidden_size": 384, "intermediate_size": 1024,
                 "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
                 "head_dim": 64, "vocab_size": 4096}),
]  # fmt: skip


@pytest.mark.parametrize(("model_type", "text"), AUDIO)
def test_audio_wrappers_plan_the_text_model_with_its_head(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model_type: str, text: dict
) -> None:
    """Qwen2-Audio and Voxtral: transformers builds them as multimodal LMs (not image-text-to-
    text); their untied head is the text model's, not a tower's."""
    from transformers import AutoModelForMultimodalLM

    path, config = _write(tmp_path, model_type, text)
    out = _explain(capsys, path, "--method", "lora", "--rank", "8")
    with torch.device("meta"):
        built = AutoModelForMultimodalLM.from_config(config)
    params = out["params"]
    assert params["total"] + params["other_towers"] == built.num_parameters()
    head = built.get_output_embeddings().weight.numel()
    towers = sum(p.numel() for n, p in built.named_parameters() if "audio" in n or "projector" in n)
    assert params["other_towers"] == towers and head == text["vocab_size"] * text["hidden_size"]
