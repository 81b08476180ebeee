"""YAML with line numbers: read a file, and turn a field's location into an error naming its line.

Every fleet-file error is one line: ``fleet.yaml:12: jobs[1].target_batch: must be ≥ 1 (got -4)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from constraints.errors import FitplanError


class Lines:
    """Where each value of a YAML document sits, for errors that name the line."""

    def __init__(self, path: str, root: Any) -> None:
        self.path = path
        self.root = root

    def line(self, loc: tuple[str | int, ...]) -> int | None:
        import yaml

        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for key in loc:
            if isinstance(node, yaml.MappingNode):
                hit = next((v for k, v in node.value if k.value == key), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
                hit = node.value[key] if 0 <= key < len(node.value) else None
            else:
                hit = None
            if hit is None:
                break
            node, line = hit, hit.start_mark.line + 1
        return line

    def error(self, loc: tuple[str | int, ...], message: str, hint: str | None = None):
        line = self.line(loc)
        where = f"{self.path}:{line}" if line else self.path
        field = f" {field_name(loc)[:120]}:" if loc else ""
        return FitplanError(f"{where}:{field} {message}", hint)


def field_name(loc: tuple[str | int, ...]) -> str:
    out = ""
    for k in loc:
        key = str(k) if len(str(k)) <= 40 else str(k)[:39] + "…"
        out += f"[{k}]" if isinstance(k, int) else (f".{key}" if out else key)
    return out


def pydantic_message(err: dict[str, Any], model: type[BaseModel] | None) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "missing (required)"
    if kind == "extra_forbidden":
        known = ", ".join(model.model_fields) if model else ""
        return f"unknown field{f' (known: {known})' if known else ''}"
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ")
    msg = msg.replace("Input should be greater than or equal to", "must be ≥")
    msg = msg.replace("Input should be greater than", "must be >")
    msg = msg.replace("Input should be less than", "must be <")
    from constraints.limits import excerpt

    msg = excerpt(msg, 160)[1:-1]
    return (
        f"{msg} (got {excerpt(err.get('input'))})" if "input" in err and kind != "missing" else msg
    )


def read_yaml(path: str | Path) -> tuple[Any, Lines]:
    """A fleet file's data and its line map, through the one safe YAML reader (size- and
    alias-capped, ``!!python`` tags refused; see searcher.validate)."""
    from searcher.validate import load_yaml

    p = Path(path)
    data, root = load_yaml(p, "fleet file")
    return data, Lines(str(p), root)
