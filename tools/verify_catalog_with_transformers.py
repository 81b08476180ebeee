#!/usr/bin/env python
"""Cross-check constraints/data/models.json against Hugging Face transformers.

For every catalog entry the real transformers model class is instantiated from the
entry's ``config`` on the ``meta`` device (no weights are allocated, nothing is
downloaded) and its parameters are counted with ``model.num_parameters()`` (unique
parameters: a tied LM head is counted once; buffers are not parameters).

The result, together with the nn.Linear / GPT-2 Conv1D modules found inside the
layer stacks (for LoRA cross-checks), is written to
tests/data/transformers_param_counts.json.

Reads only the repository's own catalog.  Requires torch and transformers.

Usage:  python tools/verify_catalog_with_transformers.py [--check] [--only ID ...]
  --check   exit non-zero if any entry with a published total does not match
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

import torch
import transformers
from torch import nn

REPO = Path(__file__).resolve().parents[1]
CATALOG = REPO / "constraints" / "data" / "models.json"
OUT = REPO / "tests" / "data" / "transformers_param_counts.json"

try:
    from transformers.pytorch_utils import Conv1D
except Exception:  # pragma: no cover
    Conv1D = None

MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def build_config(cfg: dict):
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)  # class is chosen below; T5 v1.0 names a legacy class
    dtype = cfg.pop("torch_dtype", None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    if dtype is not None:
        config.dtype = dtype  # informational only: meta tensors are built in float32
    return config


def build_model(config):
    with torch.device("meta"):
        if config.model_type == "t5":
            return transformers.T5ForConditionalGeneration(config)
        if config.model_type == "bert":
            return transformers.BertModel(config, add_pooling_layer=True)
        if hasattr(config, "text_config"):  # a multimodal wrapper: the whole checkpoint
            return transformers.AutoModelForImageTextToText.from_config(config)
        return transformers.AutoModelForCausalLM.from_config(config)


def untie_t5_lm_head_if_needed(model, cfg: dict):
    """transformers 5.x T5Config forces tie_word_embeddings=True (the Hub value False is
    re-read only as `scale_decoder_outputs=False`), so a model built from the config alone
    shares lm_head with `shared`.  Loading a T5 v1.1 / Flan-T5 checkpoint, whose
    lm_head.weight differs from shared.weight, leaves them untied (from_pretrained warns and
    skips the tie), so give lm_head its own parameter to count what the real checkpoint
    loads.  Returns the count before untying (the from_config default), or None."""
    if cfg.get("model_type") != "t5" or cfg.get("tie_word_embeddings", True) is not False:
        return None
    if model.lm_head.weight is not model.shared.weight:
        return None
    before = int(model.num_parameters())
    with torch.device("meta"):
        model.lm_head.weight = nn.Parameter(torch.empty_like(model.lm_head.weight))
    return before


def count_parameters(model) -> int:
    """Unique parameters of a built model: a tied head counted once, buffers left out.
    ``num_parameters()`` and the de-duplicated ``parameters()`` must agree."""
    n = int(model.num_parameters())
    n_check = sum(p.numel() for p in model.parameters())  # parameters() de-duplicates ties
    assert n == n_check, (type(model).__name__, n, n_check)
    return n


def _is_linear(mod) -> bool:
    return isinstance(mod, nn.Linear) or (Conv1D is not None and isinstance(mod, Conv1D))


def _in_out(mod):
    if isinstance(mod, nn.Linear):
        return mod.in_features, mod.out_features
    # GPT-2 Conv1D: weight is (in_features, out_features)
    return int(mod.weight.shape[0]), int(mod.nf)


def _split_layer_path(name: str):
    """'model.layers.3.self_attn.q_proj' -> ('model.layers', 'self_attn.q_proj').
    Returns (None, name) for modules outside any numbered layer stack."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            rel = [q for q in parts[i + 1 :] if not q.isdigit()]
            return ".".join(parts[:i]), ".".join(rel)
    return None, name


def _group(records):
    """records: list of (leaf, rel_path, in, out). Key by leaf name when the leaf name
    has one shape everywhere; otherwise by the layer-relative path."""
    by_leaf = OrderedDict()
    for leaf, rel, i, o in records:
        by_leaf.setdefault(leaf, []).append((rel, i, o))
    out = OrderedDict()
    for leaf, items in by_leaf.items():
        shapes = {(i, o) for _, i, o in items}
        if len(shapes) == 1:
            i, o = next(iter(shapes))
            out[leaf] = [i, o, len(items)]
            continue
        for rel, i, o in items:
            key = rel
            prev = out.get(key)
            if prev is not None and (prev[0], prev[1]) != (i, o):
                key = f"{rel}[{i}x{o}]"
                prev = out.get(key)
            if prev is None:
                out[key] = [i, o, 1]
            else:
                prev[2] += 1
    return out


def inspect_modules(model, config):
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    in_layers, outside = [], []
    owners = {}
    for name, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owners[f"{name}.{pname}" if name else pname] = mod
        if not _is_linear(mod) or mod is head or name.split(".")[-1] == "lm_head":
            continue
        stack, rel = _split_layer_path(name)
        i, o = _in_out(mod)
        rec = (name.split(".")[-1], rel, i, o)
        (in_layers if stack is not None else outside).append(rec)

    result = OrderedDict(linear_modules=_group(in_layers))
    if outside:
        result["other_linear_modules"] = _group(outside)

    # Parameters inside layers that are not owned by Linear/Conv1D/Embedding/norm modules:
    # fused MoE expert tensors and non-Linear routers (transformers 5.x).
    odd = OrderedDict()
    for pname, p in model.named_parameters(remove_duplicate=True):
        mod = owners.get(pname)
        if mod is None or _is_linear(mod) or isinstance(mod, (nn.Embedding, nn.LayerNorm)):
            continue
        if "norm" in type(mod).__name__.lower():
            continue
        stack, rel = _split_layer_path(pname)
        if stack is None:
            continue
        key = rel
        shape = list(p.shape)
        if key in odd:
            if odd[key][0] != shape:
                key = f"{rel}{shape}"
                odd.setdefault(key, [shape, 0])
        else:
            odd[key] = [shape, 0]
        odd[key][1] += 1
    is_moe = any(getattr(config, k, None) for k in MOE_KEYS)
    if is_moe:
        experts = {k: v for k, v in odd.items() if ".experts." in f".{k}"}
        result["experts_not_linear"] = bool(experts)
        if odd:
            result["expert_params"] = odd  # {layer-relative param path: [shape, count]}
        bufs = OrderedDict()
        for bname, b in model.named_buffers():
            stack, rel = _split_layer_path(bname)
            if stack is None or "rotary" in bname or "inv_freq" in bname:
                continue
            bufs.setdefault(rel, [list(b.shape), 0])[1] += 1
        if bufs:
            result["layer_buffers_not_counted"] = bufs
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)

    entries = json.loads(CATALOG.read_text(encoding="utf-8"))
    results = OrderedDict()
    failures = []
    for e in entries:
        if args.only and e["id"] not in args.only:
            continue
        config = build_config(e["config"])
        model = build_model(config)
        n_tied_default = untie_t5_lm_head_if_needed(model, e["config"])
        n = count_parameters(model)
        pub = e.get("published_total_params")
        match = None if pub is None else (n == pub)
        rec = OrderedDict(
            transformers_version=transformers.__version__,
            model_class=type(model).__name__,
            num_parameters=n,
            matches_published=match,
        )
        if n_tied_default is not None:
            rec["num_parameters_from_config_tied"] = n_tied_default
            rec["note"] = (
                "transformers 5.x T5Config forces tie_word_embeddings=True; built from the "
                "config alone lm_head is tied to `shared` (num_parameters_from_config_tied). "
                "The Hub checkpoint stores a separate lm_head.weight, which from_pretrained "
                "keeps untied, so num_parameters counts lm_head separately."
            )
        if pub is not None and not match:
            rec["published_total_params"] = pub
            rec["difference"] = n - pub
            failures.append(e["id"])
        if "towers" in e:  # a multimodal checkpoint: the text model's linears are the inventory's
            sys.path.insert(0, str(REPO))
            from searcher.wrappers import text_module

            rec["text_model_class"] = type(text_module(model, config)).__name__
            rec.update(inspect_modules(text_module(model, config), config.get_text_config()))
        else:
            rec.update(inspect_modules(model, config))
        results[e["id"]] = rec
        flag = {True: "match", False: "MISMATCH", None: "withheld"}[match]
        print(
            f"{e['id']:24s} {n:>16,d}  {flag}"
            + ("" if pub is None or match else f"  published {pub:,d}")
        )
        del model

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.only and out.exists():  # partial run: update the existing file in place
        merged = json.loads(out.read_text(encoding="utf-8"), object_pairs_hook=OrderedDict)
        merged.update(results)
        results = OrderedDict((e["id"], merged[e["id"]]) for e in entries if e["id"] in merged)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(results)} entries); mismatches: {failures or 'none'}")
    return 1 if (args.check and failures) else 0


if __name__ == "__main__":
    sys.exit(main())
