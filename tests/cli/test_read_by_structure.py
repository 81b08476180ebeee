"""A config.json of a type fitplan has no parser for is read as the family whose structure the
model transformers builds from it has (checked on the meta device), when that family's parser
then counts transformers' parameters; otherwise it stays refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searcher.cli import main

pytestmark = pytest.mark.heavy

#: types transformers 5.25 builds with a family's structure: SmolLM3 and Granite Llama's, Seed-OSS
#: Qwen2's (q/k/v biases), OLMo-3 OLMo-2's (q/k norms, norms after each block); Cohere (one
#: norm per layer, LayerNorm, attention and MLP in parallel) has none of them
READ_AS = {"smollm3": "llama", "granite": "llama", "seed_oss": "qwen2", "olmo3": "olmo2"}


def _config(tmp_path: Path, model_type: str, **changes: object) -> Path:
    from transformers import AutoConfig

    cfg = {**AutoConfig.for_model(model_type).to_dict(), **changes}
    layers = cfg["num_hidden_layers"]
    # per-layer lists (layer_types, no_rope_layers) follow the layer count
    cfg = {k: v for k, v in cfg.items() if not (isinstance(v, list) and len(v) == layers)}
    cfg.update(num_hidden_layers=2, hidden_size=256, intermediate_size=512, vocab_size=1024)
    cfg.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg.update(num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(cfg))
    return path


def _count(path: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = json.loads(path.read_text())
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize(("model_type", "family"), READ_AS.items())
def test_a_type_is_read_as_its_structure_with_transformers_count(
    model_type: str, family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, model_type)
    assert main(["explain", "--model", str(path), "--gpu", "a100-80gb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"]["total"] == _count(path)
    assert any(f"model_type '{model_type}' read as {family}" in n for n in out["notes"])


def test_another_structure_stays_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "diffllama")
    assert main(["explain", "--model", str(path), "--gpu", "a100-80gb"]) == 2
    err = capsys.readouterr().err
    assert "model_type 'diffllama' is not supported" in err and err.count("\n") == 1
