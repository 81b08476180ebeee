"""--model org/name: config.json from a pre-filled Hugging Face cache, never the network."""

from __future__ import annotations

import json

import pytest

from constraints.models import catalog_entry
from searcher.cli import main

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An HF_HOME whose hub cache holds NousResearch/Llama-3.2-1B's config.json at commit SHA
    (the snapshot layout huggingface_hub writes: models--org--name/snapshots/<sha>/, refs/main)."""
    import huggingface_hub.constants as hc

    hub = tmp_path / "hub"
    repo = hub / "models--NousResearch--Llama-3.2-1B"
    snap = repo / "snapshots" / SHA
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(catalog_entry("llama-3.2-1b")["config"]))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return hub


def test_hub_id_from_the_cache_pins_the_commit(hf_cache, capsys):
    code = main(
        [
            "explain",
            "--model",
            "NousResearch/Llama-3.2-1B",
            "--gpu",
            "rtx-4090",
            "--method",
            "lora",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert SHA[:12] in out["model"]["name"]
    # the same architecture as the catalog's Llama-3.2-1B: 1,235,814,400 parameters (Meta's card)
    assert out["params"]["total"] == 1_235_814_400


def test_check_reads_the_hub_id_the_config_names(hf_cache, capsys):
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "check"
    code = main(["check", str(data / "axolotl-qlora-1b.yml"), "--gpu", "rtx-4090", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert SHA in out["model"]["source"]


def test_offline_and_not_cached_is_one_line(hf_cache, capsys):
    code = main(["explain", "--model", "someorg/not-cached-7b", "--gpu", "rtx-4090"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "not in the HF cache" in err and "path/to/config.json" in err


def test_search_json_names_the_commit(hf_cache, capsys):
    code = main(
        [
            "search",
            "--model",
            "NousResearch/Llama-3.2-1B",
            "--gpu",
            "rtx-4090",
            "--method",
            "lora",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and SHA in out["model_source"]
