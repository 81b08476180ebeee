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
        field = f" {field_name(loc)}:" if loc else ""
        return FitplanError(f"{where}:{field} {message}", hint)


def field_name(loc: tuple[str | int, ...]) -> str:
    out = ""
    for k in loc:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
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
    return f"{msg} (got {err.get('input')!r})" if "input" in err and kind != "missing" else msg


def read_yaml(path: str | Path) -> tuple[Any, Lines]:
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FitplanError(f"no such fleet file: {p}") from None
    except IsADirectoryError:
        raise FitplanError(f"{p} is a directory, not a fleet file") from None
    except UnicodeDecodeError:
        raise FitplanError(f"{p} is not a UTF-8 text file") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise FitplanError(
            f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})"
        ) from None
    return data, Lines(str(p), root)
