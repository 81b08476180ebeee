#!/usr/bin/env python
"""The supported types' configs nobody shipped: each default config with one field changed.

For every type fitplan reads (``SUPPORTED_TYPES``), every boolean field of its transformers
default config is flipped, and the structural whole numbers in ``INT_VARIANTS`` are set to
another value the config class accepts, one at a time. transformers builds each variant on the
meta device (tools/arch_sweep.py ``transformers_count``) and fitplan reads the variant's
``to_dict()`` as ``--model`` would; a variant is ``match`` (within 0.5 %), ``wrong`` (a field
transformers builds from and fitplan does not read, or reads differently), ``refused`` (one clear
line) or ``crashed``. A variant transformers itself rejects is ``invalid`` and left out.

Writes tests/data/arch_variants.json (each variant's fields that differ from the type's default,
``config_diff`` (a null is a null the config holds), those it no longer has, ``config_removed``,
and both counts) for tests/constraints/test_arch_variants.py,
which reads the defaults from tests/data/arch_sweep_configs.json.

Usage:  nice -n 10 python tools/arch_variants.py [--only TYPE ...] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from arch_sweep import REPO, classify, fitplan_count, transformers_count

OUT = REPO / "tests" / "data" / "arch_variants.json"
#: structural whole-number fields and the value a variant gives them (a callable of the default
#: config), where the type's config has the field
INT_VARIANTS = {
    "num_key_value_heads": lambda c: max(1, (c.get("num_attention_heads") or 8) // 4),
    "head_dim": lambda c: 2 * (c.get("head_dim") or 64),
    "first_k_dense_replace": lambda c: 1 + (c.get("first_k_dense_replace") or 0),
    "moe_layer_freq": lambda c: 2,
    "decoder_sparse_step": lambda c: 2,
    "q_lora_rank": lambda c: None,
    "n_shared_experts": lambda c: 2,
    "num_ln_in_parallel_attn": lambda c: 1 if c.get("num_ln_in_parallel_attn") == 2 else 2,
    "n_inner": lambda c: 3 * (c.get("n_embd") or 768),
    "word_embed_proj_dim": lambda c: (c.get("hidden_size") or 768) // 2,
    "num_decoder_layers": lambda c: (c.get("num_layers") or 6) + 2,
    "num_kv_heads": lambda c: max(1, (c.get("num_attention_heads") or 8) // 4),
    "d_kv": lambda c: 2 * (c.get("d_kv") or 64),
}


def variants(base: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, value in sorted(base.items()):
        if isinstance(value, bool) and key not in ("return_dict", "output_hidden_states"):
            out.append({key: not value})
    for key, change in INT_VARIANTS.items():
        if key in base:
            out.append({key: change(base)})
    return out


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoConfig

    from constraints.model_spec import SUPPORTED_TYPES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for t in args.only or SUPPORTED_TYPES:
            base = json.loads(json.dumps(AutoConfig.for_model(t).to_dict(), default=str))
            for change in variants(base):
                name = f"{t} {json.dumps(change)}"
                try:
                    config = AutoConfig.for_model(t, **change)
                except Exception as e:
                    print(f"{name:60s} invalid: {type(e).__name__}", flush=True)
                    continue
                cfg = json.loads(json.dumps(config.to_dict(), default=str))
                cfg["model_type"] = t
                path = Path(d) / "config.json"
                path.write_text(json.dumps(cfg), encoding="utf-8")
                row: dict[str, Any] = {"model_type": t, "change": change}
                row.update(fitplan_count(path))
                row.update(transformers_count(t, row.get("fitplan_arch") == "encoder", change))
                row["class"] = "invalid" if "build_error" in row else classify(row)
                row["config_diff"] = {k: cfg[k] for k in sorted(cfg) if cfg[k] != base.get(k, ...)}
                row["config_removed"] = sorted(set(base) - set(cfg))
                rows.append(row)
                both = f"{row.get('transformers_params')} vs {row.get('fitplan_params')}"
                print(f"{name:60s} {row['class']:8s} {both}", flush=True)
    counts = Counter(r["class"] for r in rows)
    print("classes:", dict(sorted(counts.items())))
    for r in rows:
        if r["class"] in ("wrong", "crashed", "refused"):
            shown = {k: v for k, v in r.items() if k != "config_diff"}
            print(f"  {r['class']:8s} {json.dumps(shown)[:400]}")
    if not (args.no_write or args.only):
        kept = [r for r in rows if r["class"] != "invalid"]  # no reference count to hold
        lines = ",\n".join(json.dumps(r, sort_keys=True) for r in kept)
        OUT.write_text(f"[\n{lines}\n]\n", encoding="utf-8")
        print(f"wrote {OUT} ({len(kept)} variants)")
    return 1 if counts.get("crashed") else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
