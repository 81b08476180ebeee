#!/usr/bin/env python
"""Every ``model_type`` transformers knows, through fitplan's ``--model config.json``.

For each type in ``transformers.CONFIG_MAPPING`` the default config
(``AutoConfig.for_model(t).to_dict()``) is written as a config.json, the closest model class is
built from it on the ``meta`` device (no weights, nothing downloaded) and its unique parameters
counted (a tied head once: tools/verify_catalog_with_transformers.py ``count_parameters``). Then
fitplan reads the same file the way ``--model file.json`` does (``resolve_model`` →
``load_config_file``) and counts the inventory (``total_params``); and the real CLI runs
``explain --model FILE --gpu a100-80gb`` in-process. Each type is one class:

- ``match``     fitplan's total within 0.5 % of transformers' (read by its own parser, as a
                multimodal wrapper's text model and towers, or by structure: ``fitplan_reading``)
- ``wrong``     fitplan counts, off by more than 0.5 % (both numbers listed)
- ``refused``   fitplan refuses with one clear line (FitplanError)
- ``crashed``   anything else from fitplan's reading, or the CLI exits other than 0/1/2, prints a
                traceback or a refusal over one line (a bug)

The model class: an encoder fitplan reads (BERT) is counted as the base model with its pooler
(``AutoModel``, what fitplan's inventory is); every other type as ``AutoModelForCausalLM``, else
``AutoModelForSeq2SeqLM``, else ``AutoModel`` (a type none of them builds has no reference count).

Writes tests/data/arch_sweep.json (the table) and tests/data/arch_sweep_configs.json (the default
configs of every type fitplan counts, so tests/constraints/test_arch_sweep.py needs no torch).

Usage:  nice -n 10 python tools/arch_sweep.py [--only TYPE ...] [--cache FILE] [--fitplan-only]
  --cache FILE      keep transformers' side (every config and count) in FILE and reuse it
  --fitplan-only    with --cache: redo fitplan's side only (after a fix), no model built
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
TABLE = REPO / "tests" / "data" / "arch_sweep.json"
CONFIGS = REPO / "tests" / "data" / "arch_sweep_configs.json"
#: relative difference under which fitplan's total counts as transformers' (the brief's 0.5 %)
MATCH_TOLERANCE = 0.005
#: seconds one type may take to build on the meta device before it is recorded as a timeout
BUILD_TIMEOUT_S = 120


#: what a type's default config lacks for transformers to build it at all: Lfm2MoeConfig derives
#: no layer_types (its decoder layers index the list); its 32 layers get LFM2's pattern, an
#: attention layer after every three short convolutions
BUILDABLE = {
    "lfm2_moe": {"layer_types": ["conv", "conv", "conv", "full_attention"] * 8},
}


def default_config(model_type: str) -> dict[str, Any]:
    """The default config of a type as its config.json would hold it (JSON values only), with
    what :data:`BUILDABLE` says it needs to be built."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(model_type).to_dict()
    cfg["model_type"] = model_type
    cfg.update(BUILDABLE.get(model_type, {}))
    return json.loads(json.dumps(cfg, default=str))


def _auto_classes(encoder: bool) -> list[Any]:
    import transformers as T

    if encoder:
        return [T.AutoModel]
    return [T.AutoModelForCausalLM, T.AutoModelForSeq2SeqLM, T.AutoModel]


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def transformers_count(
    model_type: str, encoder: bool, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Build the closest class on ``meta`` from the default config (with ``overrides``) and
    count its unique parameters."""
    import torch
    from transformers import AutoConfig
    from verify_catalog_with_transformers import count_parameters

    config = AutoConfig.for_model(
        model_type, **{**BUILDABLE.get(model_type, {}), **(overrides or {})}
    )
    errors = []
    for auto in _auto_classes(encoder):
        if type(config) not in auto._model_mapping:
            continue
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(BUILD_TIMEOUT_S)
        try:
            with torch.device("meta"), contextlib.redirect_stderr(io.StringIO()):
                model = auto.from_config(config)
            n = count_parameters(model)
            name = type(model).__name__
            del model
            return {"model_class": name, "transformers_params": n}
        except _Timeout:
            errors.append(f"{auto.__name__}: timed out after {BUILD_TIMEOUT_S} s")
        except Exception as e:  # a type that cannot be built is recorded
            errors.append(f"{auto.__name__}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        finally:
            signal.alarm(0)
            gc.collect()
    return {"build_error": "; ".join(errors) or "no causal-LM, seq2seq or base model class"}


def fitplan_count(path: Path) -> dict[str, Any]:
    """fitplan's reading of the file, exactly as ``--model FILE`` reads it
    (``searcher.hub.resolve_any_model``): its own parser for the type (``fitplan_reading``
    'parser'); else, for a multimodal wrapper, the text model with the other towers counted
    from the model transformers builds ('wrapper'); else the type read as the family whose
    structure transformers builds it with ('structure'). ``fitplan_params`` is the text model's
    count, ``fitplan_towers`` the other towers' (the reference class may hold them or not)."""
    from constraints.errors import FitplanError
    from constraints.models import resolve_model
    from constraints.params import total_params
    from searcher.hub import resolve_any_model

    try:
        try:
            spec, reading = resolve_model(str(path)), "parser"
        except FitplanError:
            spec = resolve_any_model(str(path))
            reading = "wrapper" if spec.tower_note or spec.tower_params else "structure"
        row = {"fitplan_params": int(total_params(spec)), "fitplan_arch": spec.arch}
        if reading != "parser":
            row["fitplan_reading"] = reading
        if spec.tower_params:
            row["fitplan_towers"] = int(spec.tower_params)
        if reading == "wrapper" and not spec.tie_embeddings:
            row["fitplan_head"] = spec.vocab * spec.hidden  # a base-model reference has none
        return row
    except FitplanError as e:
        return {"fitplan_refusal": e.message.removeprefix(f"{path}: ")}  # its hint left out
    except Exception as e:  # a crash is what this tool reports
        return {"fitplan_crash": f"{type(e).__name__}: {e}"[:300]}


def cli_run(path: Path) -> dict[str, Any]:
    """``fitplan explain --model FILE --gpu a100-80gb`` in-process: exit code and stderr."""
    from searcher.cli.parser import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc: Any = main(["explain", "--model", str(path), "--gpu", "a100-80gb"])
    except SystemExit as e:
        rc = e.code
    except BaseException as e:  # an escape is what this tool reports
        rc = f"escaped {type(e).__name__}: {e}"[:300]
    text = err.getvalue().strip()
    bad = rc not in (0, 1, 2) or "Traceback" in text or (rc == 2 and text.count("\n") > 0)
    row: dict[str, Any] = {"cli_exit": rc}
    if bad:
        row["cli_escape"] = text[-400:]
    return row


def classify(row: dict[str, Any]) -> str:
    if "fitplan_crash" in row or "cli_escape" in row:
        return "crashed"
    if "fitplan_refusal" in row:
        return "refused"
    ref = row.get("transformers_params")
    if ref is None:
        return "no-reference"
    # a wrapper's reference class holds its text model alone (Qwen3_5ForCausalLM) or the towers
    # too (Gemma3ForConditionalGeneration), with its untied output head or, built as the base
    # model (LlavaModel), without it
    text, towers, head = (
        row.get(k, 0) for k in ("fitplan_params", "fitplan_towers", "fitplan_head")
    )
    counts = {text, text + towers, text + towers - head}
    err = min(abs(n - ref) / ref if ref else float(n != 0) for n in counts)
    return "match" if err <= MATCH_TOLERANCE else "wrong"


def sweep(types: list[str], cache: dict[str, Any], fitplan_only: bool) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        for i, t in enumerate(types):
            ref = cache.get(t)
            if ref is None:
                if fitplan_only:
                    continue
                try:
                    ref = {"config": default_config(t)}
                except Exception as e:
                    first = str(e).strip().splitlines()[-1].strip() if str(e).strip() else ""
                    ref = {"config": None, "config_error": f"{type(e).__name__}: {first}"[:200]}
            cache[t] = ref
            path = Path(d) / f"{t}.json"
            if ref["config"] is None:  # transformers' own default does not validate
                rows[t] = {"config_error": ref["config_error"], "class": "no-config"}
                print(f"[{i + 1}/{len(types)}] {t:32s} no-config", flush=True)
                continue
            path.write_text(json.dumps(ref["config"]), encoding="utf-8")
            row = fitplan_count(path)
            if not fitplan_only and "transformers_params" not in ref and "build_error" not in ref:
                ref.update(transformers_count(t, row.get("fitplan_arch") == "encoder"))
            row.update({k: v for k, v in ref.items() if k != "config"})
            row.update(cli_run(path))
            row["class"] = classify(row)
            rows[t] = row
            print(f"[{i + 1}/{len(types)}] {t:32s} {row['class']}", flush=True)
    return rows


def _one_row_a_line(table: dict[str, Any]) -> str:
    """The table as JSON with one line per type, so a re-run's diff shows the types that moved."""
    head = {k: v for k, v in table.items() if k != "types"}
    rows = [
        f"  {json.dumps(t)}: {json.dumps(r, sort_keys=True)}" for t, r in table["types"].items()
    ]
    return json.dumps(head, sort_keys=True)[:-1] + ', "types": {\n' + ",\n".join(rows) + "\n}}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--fitplan-only", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print the summary only")
    args = ap.parse_args(argv)
    import transformers

    cache: dict[str, Any] = {}
    if args.cache and args.cache.exists():
        cache = json.loads(args.cache.read_text(encoding="utf-8"))
    types = args.only or sorted(transformers.CONFIG_MAPPING.keys())
    try:
        rows = sweep(types, cache, args.fitplan_only)
    finally:
        if args.cache:
            args.cache.write_text(json.dumps(cache), encoding="utf-8")
    counts = Counter(r["class"] for r in rows.values())
    print("classes:", dict(sorted(counts.items())))
    for t, r in rows.items():
        if r["class"] in ("wrong", "crashed"):
            print(
                f"  {r['class']:8s} {t}: {json.dumps({k: v for k, v in r.items() if k != 'class'})}"
            )
    if args.no_write or args.only:
        return 0
    table = {
        "transformers_version": transformers.__version__,
        "classes": dict(counts),
        "types": rows,
    }
    TABLE.write_text(_one_row_a_line(table), encoding="utf-8")
    configs = {
        t: cache[t]["config"]
        for t, r in rows.items()
        if "fitplan_params" in r and "fitplan_reading" not in r
    }
    CONFIGS.write_text(json.dumps(configs, indent=None, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TABLE} and {CONFIGS} ({len(configs)} configs)")
    return 1 if counts.get("crashed") else 0


if __name__ == "__main__":
    sys.exit(main())
