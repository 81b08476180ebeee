"""The edge of every command: each number, size and file an argument names is parsed here, once.

- ``integer(bound)``, ``number(bound)``, ``size(bound)`` are argparse ``type=`` functions. They take
  plain ASCII numbers only, refuse NaN and Infinity, and refuse a value outside its
  :class:`constraints.limits.Bound` naming the range and its unit. argparse turns the refusal into
  ``fitplan: error: argument --layers: …`` (one line, exit 2) before any work starts.
- ``load_yaml(path)`` reads a YAML file safely: UTF-8, size-capped, the safe loader (so
  ``!!python/…`` tags stay refused), and the document's size *after* alias expansion capped, so a
  "billion laughs" alias bomb is refused in milliseconds instead of hanging what walks it.
- ``read_text`` / ``strict_json`` (from constraints.limits) are the file and JSON readers.

A new flag plugs in with ``type=integer(SOME_BOUND)``; a new bound goes into constraints/limits.py.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.limits import MAX_FILE_BYTES, Bound, excerpt, read_text, strict_json

__all__ = [
    "excerpt",
    "integer",
    "load_yaml",
    "number",
    "one_line",
    "read_text",
    "size",
    "strict_json",
    "yaml_text",
]

_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
#: YAML nodes a document may expand to through aliases (a fleet file has a few hundred)
MAX_YAML_NODES = 100_000
#: deepest flow nesting a YAML document may have (a fleet file nests 4 levels)
MAX_YAML_DEPTH = 200
#: the largest YAML file read, bytes (a fleet or scenario file is a few KB)
MAX_YAML_BYTES = 4 << 20


def _refuse(text: str, what: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{excerpt(text)} is not {what}")


def file_name(text: str) -> str:
    """An argparse type for an output path (--csv, --report, --out): a name, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name is not a path: give a file or folder name")
    return text


def integer(bound: Bound) -> Callable[[str], int]:
    """An argparse type: a whole number in ``bound`` (``1e3`` is refused: write 1000)."""

    def parse(text: str) -> int:
        s = text.strip()
        if not _INT_RE.match(s) or len(s) > 30:
            if _FLOAT_RE.match(s):
                try:
                    value = float(s)
                except ValueError:
                    value = math.nan
                if value.is_integer() and abs(value) < 1e30:
                    return parse(str(int(value)))
            raise _refuse(text, f"a whole number of {bound.unit}")
        value = int(s)
        if not bound.low <= value <= bound.high:
            raise argparse.ArgumentTypeError(bound.complaint(value))
        return value

    parse.__name__ = "integer"
    return parse


def number(bound: Bound, open_low: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite real number in ``bound`` (``open_low``: the low end excluded)."""

    def parse(text: str) -> float:
        s = text.strip()
        if s.lower() in _NON_FINITE:
            raise argparse.ArgumentTypeError(
                f"{excerpt(text)} is not a finite number ({bound.describe()})"
            )
        if not _FLOAT_RE.match(s) or len(s) > 40:
            raise _refuse(text, f"a number ({bound.describe()})")
        value = float(s)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{s} is not a finite number ({bound.describe()})")
        if not bound.low <= value <= bound.high:
            raise argparse.ArgumentTypeError(bound.complaint(value))
        if open_low and value == bound.low:
            raise argparse.ArgumentTypeError(f"{s} must be above {bound.low:g} {bound.unit}")
        return value

    parse.__name__ = "number"
    return parse


def check_size(text: str, bound: Bound, name: str) -> int:
    """Bytes from '24GiB'/'16GB', within what hardware exists (FitplanError otherwise)."""
    from constraints.units import parse_size

    if len(text) > 40:
        raise FitplanError(f"{name} {excerpt(text)} is not a size", "e.g. 24GiB, 16GB, 81920MiB")
    value = parse_size(text)
    if not bound.low <= value <= bound.high:
        raise FitplanError(
            f"{name} {text.strip()} is out of range: {bound.unit}",
            bound.largest_real or None,
        )
    return value


def size(bound: Bound, name: str = "size") -> Callable[[str], str]:
    """An argparse type: a size with a unit within ``bound``; the text is kept (it names a card)."""

    def parse(text: str) -> str:
        try:
            check_size(text, bound, name)
        except FitplanError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{name} ")) from None
        return text.strip()

    parse.__name__ = "size"
    return parse


def one_line(message: str, limit: int = 400) -> str:
    """An error message as one line of at most ``limit`` characters."""
    flat = " ".join(message.splitlines())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ---- YAML ---------------------------------------------------------------------------------


def _expanded_nodes(root: Any, limit: int, where: str) -> int:
    """Nodes the document becomes with every alias expanded, counting up to ``limit`` + 1.
    An alias inside its own anchor (a recursive document) is refused."""
    import yaml

    memo: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in memo:
            continue
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [x for pair in node.value for x in pair]
        else:
            memo[id(node)] = 1
            continue
        if children_done:
            open_nodes.discard(id(node))
            total = 1 + sum(memo.get(id(k), 1) for k in kids)
            memo[id(node)] = min(total, limit + 1)
            continue
        if id(node) in open_nodes:
            line = node.start_mark.line + 1
            raise FitplanError(f"{where}:{line}: an alias refers to its own anchor (a cycle)")
        open_nodes.add(id(node))
        stack.append((node, True))
        for k in kids:
            if id(k) in open_nodes:
                line = k.start_mark.line + 1
                raise FitplanError(f"{where}:{line}: an alias refers to its own anchor (a cycle)")
            if id(k) not in memo:
                stack.append((k, False))
    return memo.get(id(root), 1)


def _flow_depth(text: str) -> int:
    """Deepest nesting of flow brackets ([ and {), quotes ignored: a cheap upper bound, exact for
    the ``[[[[…`` documents that make PyYAML's recursive composer crawl."""
    if text.count("[") + text.count("{") <= MAX_YAML_DEPTH:
        return 0
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def _block_depth(text: str) -> int:
    """Deepest block nesting by indentation and ``- `` entries per line: a cheap upper bound for
    the ``- - - …`` and deeply indented documents that make PyYAML's composer recurse."""
    if len(text) <= MAX_YAML_DEPTH * 2:
        return 0
    deepest = 0
    for line in text.splitlines():
        body = line.lstrip(" ")
        dashes = 0
        while body.startswith("- ") or body == "-":
            dashes += 1
            body = body[2:].lstrip(" ")
        deepest = max(deepest, (len(line) - len(line.lstrip(" "))) // 2 + dashes)
    return deepest


def load_yaml(
    path: str | Path, what: str = "YAML file", max_nodes: int = MAX_YAML_NODES
) -> tuple[Any, Any]:
    """(data, composed root node) of a YAML file, or one FitplanError line (file:line: reason)."""
    text = read_text(path, what, max_bytes=min(MAX_YAML_BYTES, MAX_FILE_BYTES))
    return yaml_text(text, path, what, max_nodes)


def yaml_text(
    text: str, path: str | Path, what: str = "YAML file", max_nodes: int = MAX_YAML_NODES
) -> tuple[Any, Any]:
    """(data, composed root node) of YAML text read from ``path``: nesting, alias expansion and
    the loader's recursion capped, each refused as one FitplanError line (file:line: reason)."""
    import yaml

    # PyYAML recurses per level: refuse before it does
    if max(_flow_depth(text), _block_depth(text)) > MAX_YAML_DEPTH:
        raise FitplanError(f"{path}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise FitplanError(f"{path} is empty", f"give a {what} with content")
        n = _expanded_nodes(root, max_nodes, str(path))
        if n > max_nodes:
            raise FitplanError(
                f"{path}: the document expands to over {max_nodes:,} values through aliases",
                "a YAML alias bomb? write the values out",
            )
        data = loader.construct_document(root)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise FitplanError(
            f"{path}{line}: not valid YAML ({excerpt(str(problem), 100)[1:-1]})"
        ) from None
    except RecursionError:
        raise FitplanError(f"{path}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    return data, root


def family_in_file(err: FitplanError, key: str = "family") -> FitplanError:
    """A ``--family`` refusal (constraints/hf_config.py, constraints/models.py) in the words of a
    file's ``family`` field, which has the flag's meaning and checks."""

    def words(text: str | None) -> str | None:
        if text is None:
            return None
        text = text.replace(", or pass raw numbers (--params …)", "")  # flags, not fields
        return text.replace("add --family NAME", f"add {key}: NAME").replace("--family", key)

    return FitplanError(words(err.message) or err.message, words(err.hint))
