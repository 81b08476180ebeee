"""The torchtune rows carry what their recipe configs and model builders set at the row's commit
(read in the pytorch/torchtune history, not derived from fitplan's code):

- torchtune/models/llama2/_model_builders.py: ``lora_llama2_7b(..., lora_dropout=0.05)`` at
  fef3ed10d (Apr 2024) and 0217d44c2 (May 2024), and the configs do not override it;
  torchtune/models/llama3_1/_model_builders.py: ``lora_dropout=0.0`` at 30b8519e8 (Sep 2024);
- recipes/configs/llama3_1/70B_full.yaml at 30b8519e8: ``custom_sharded_layers:
  ['tok_embeddings', 'output']``; 70B_lora.yaml and 405B_qlora.yaml there do not set it.
"""

from __future__ import annotations

from searcher.truth.memory_rows import load_memory_cases


def _cases() -> dict[str, object]:
    return {c.row_id: c for c in load_memory_cases() if not c.excluded}


def test_llama2_lora_rows_keep_the_builders_dropout() -> None:
    cases = _cases()
    for row in ("tt-2404-2", "tt-2404-3", "tt-2405-1", "tt-2405-2", "tt-loratut-1", "tt-loratut-4"):
        assert cases[row].config.lora_dropout == 0.05, row  # type: ignore[attr-defined]
    assert cases["tt-2409-3"].config.lora_dropout == 0.0  # type: ignore[attr-defined]


def test_70b_full_shards_embedding_and_head_on_their_own() -> None:
    cases = _cases()
    assert cases["tt-2409-6"].config.fsdp_embedding_units is True  # type: ignore[attr-defined]
    for row in ("tt-2409-7", "tt-2409-8"):
        assert cases[row].config.fsdp_embedding_units is False, row  # type: ignore[attr-defined]


def test_405b_qlora_runs_without_cpu_offload() -> None:
    """README 'FSDP2 full shard, no CPU offload'; 405B_qlora.yaml: fsdp.cpu_offload False."""
    assert _cases()["tt-2409-8"].config.offload == "none"  # type: ignore[attr-defined]


def test_rows_before_pr_1390_keep_the_loops_fp32_logits() -> None:
    """recipes/*.py at fef3ed10d and 0217d44c2: ``logits = logits[..., :-1, :].contiguous()``
    stays referenced through ``loss.backward()``; at 30b8519e8 (after PR #1390, 4fba6cd44) the
    recipes shift the labels and ``del logits`` first."""
    cases = _cases()
    for row in ("tt-2404-2", "tt-2404-5", "tt-2405-1", "tt-2405-2", "tt-loratut-3"):
        assert cases[row].config.loss == "standard-held", row  # type: ignore[attr-defined]
    assert cases["tt-flags-2"].config.loss == "standard"  # type: ignore[attr-defined]
