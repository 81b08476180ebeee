"""Pieces several formats share: paths inside --out and the plan file written with every emission."""

from __future__ import annotations

import json
import shlex

from searcher.emitters.base import EmitOptions, EmittedFile
from searcher.emitters.plan import Plan

PLAN_FILE = "plan.json"


def raw_path(options: EmitOptions, name: str) -> str:
    """``name`` inside --out as the user typed it (what cross-file references use)."""
    out = options.out.rstrip("/") or "/"
    return name if out in (".", "") else f"{out}/{name}"


def out_path(options: EmitOptions, name: str) -> str:
    """``raw_path`` quoted for a shell command."""
    return shlex.quote(raw_path(options, name))


def plan_file(plan: Plan) -> EmittedFile:
    """The plan itself, so that ``fitplan launch PLAN.json`` can re-emit it in another format."""
    return EmittedFile(PLAN_FILE, json.dumps(plan.to_json(), indent=2, default=str) + "\n")


def commented_yaml(entries: list[tuple[str, object, str | None]]) -> str:
    """Top-level ``key: value  # comment`` lines (mappings as indented blocks, lists in flow
    style), so every knob's line can say where it came from."""
    import yaml

    out: list[str] = []
    for key, value, comment in entries:
        tail = f"  # {comment}" if comment else ""
        if (isinstance(value, dict) and value) or (
            isinstance(value, list) and value and isinstance(value[0], dict)
        ):
            out.append(f"{key}:{tail}")
            block = yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
            out.extend("  " + line for line in block.rstrip("\n").splitlines())
        else:
            text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
            text = text.removesuffix("...").strip()
            out.append(f"{key}: {text}{tail}")
    return "\n".join(out) + "\n"
