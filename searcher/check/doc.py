"""A user's config file as text and data, and edits written back into that text, line by line.

Edits keep everything the user wrote — comments, key order, quoting of the other keys — and
change only the lines of the keys that change, so the diff shows exactly the suggested change.
Both block YAML and pretty-printed JSON have one key per line, nested keys indented below their
parent; that is all the editor relies on (a flow-style ``{a: 1}`` parent is rewritten whole).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen
from searcher.validate import MAX_YAML_BYTES, read_text, yaml_text

#: a value that removes the key
DELETE = object()


@frozen
class Document:
    """One file: where it is, its text, its kind (yaml, json, python, shell) and its data."""

    path: Path
    text: str
    kind: str
    data: Any

    @property
    def name(self) -> str:
        return self.path.name


def parse(path: Path, text: str) -> Document:
    """The file's data by its suffix (YAML is the fallback); one clear line when it is broken."""
    suffix = path.suffix.lower()
    if suffix == ".py":
        return Document(path, text, "python", None)
    if suffix == ".sh":
        return Document(path, text, "shell", None)
    if suffix == ".json":
        from constraints.limits import strict_json

        return Document(path, text, "json", strict_json(text, str(path)))
    if not text.strip():
        return Document(path, text, "yaml", None)
    data, _root = yaml_text(text, path, "training config")
    return Document(path, text, "yaml", data)


def read_document(path: str | Path, overlay: dict[Path, str] | None = None) -> Document:
    p = Path(path)
    if overlay and p.resolve() in overlay:
        return parse(p, overlay[p.resolve()])
    if p.is_dir():
        raise FitplanError(f"{p} is a folder; name the config files in it")
    if not p.exists():
        raise FitplanError(f"no such file: {p}", "give the training config you run (YAML or JSON)")
    text = read_text(p, "training config", max_bytes=MAX_YAML_BYTES)
    return parse(p, text)


def get(data: Any, dotted: str, default: Any = None) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``, or ``default`` when any level is missing."""
    cur = data
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def flat_keys(data: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf as ``a.b.c`` → value (a dict holding ``_component_`` counts as a leaf too)."""
    out: dict[str, Any] = {}
    if not isinstance(data, dict):
        return out
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_keys(value, name + "."))
        else:
            out[name] = value
    return out


# ---- writing ------------------------------------------------------------------------------

_KEY = re.compile(
    r'^(?P<indent>\s*)(?:-\s+)?(?P<q>["\']?)(?P<key>[^"\':#]+?)(?P=q)\s*:(?P<rest>.*)$'
)


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][\w./\-]*", text) and text.lower() not in (
        "true",
        "false",
        "yes",
        "no",
        "null",
        "on",
        "off",
    ):
        return text
    return json.dumps(text)


def _fmt(kind: str, value: Any) -> str:
    return json.dumps(value) if kind == "json" else _yaml_scalar(value)


def _key_lines(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(line index, indent, key, rest) of every ``key: …`` line."""
    found = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        m = _KEY.match(line)
        if m:
            found.append((i, len(m.group("indent")), m.group("key").strip(), m.group("rest")))
    return found


def _find(lines: list[str], path: list[str]) -> tuple[int, int] | None:
    """(line, indent) of the key at ``path``, searching each level inside its parent's block."""
    keys = _key_lines(lines)
    lo, hi, parent_indent = 0, len(lines), -1
    hit: tuple[int, int] | None = None
    for part in path:
        hit = None
        for i, indent, key, _rest in keys:
            if i < lo or i >= hi or indent <= parent_indent:
                continue
            if key == part:
                hit = (i, indent)
                break
        if hit is None:
            return None
        lo, parent_indent = hit[0] + 1, hit[1]
        hi = next((i for i, ind, _k, _r in keys if i >= lo and ind <= hit[1]), len(lines))
    return hit


def key_line(doc: Document, dotted: str) -> int | None:
    """The 1-based line of the key at ``dotted`` in the file's text (None when not found)."""
    hit = _find(doc.text.splitlines(), dotted.split("."))
    return hit[0] + 1 if hit else None


def _value_span(line: str) -> tuple[int, int]:
    """Where the value of a ``key: value  # comment`` line starts and ends."""
    m = _KEY.match(line)
    assert m is not None
    start = m.start("rest")
    rest = m.group("rest")
    lead = len(rest) - len(rest.lstrip())
    body = rest.strip()
    end = len(line.rstrip("\n"))
    comment = re.search(r"\s+#", rest) if not body.startswith(("'", '"')) else None
    if comment:
        end = start + comment.start()
    if line.rstrip().endswith(",") and end == len(line.rstrip("\n")):
        end -= 1
    return start + lead, end


def _block_end(lines: list[str], at: int, indent: int) -> int:
    end = at + 1
    while end < len(lines):
        stripped = lines[end].strip()
        if stripped and not stripped.startswith("#"):
            ind = len(lines[end]) - len(lines[end].lstrip())
            if ind <= indent and not stripped.startswith("- ") and not stripped.startswith("]"):
                break
            if ind <= indent and stripped.startswith(("- ",)) and indent > 0:
                break
        end += 1
    while end > at + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def set_key(doc: Document, dotted: str, value: Any, text: str | None = None) -> str:
    """``text`` (default: the document's) with ``dotted`` set to ``value`` (or removed)."""
    if doc.kind == "python":
        from searcher.check.text_edits import set_constant

        return set_constant(doc.text if text is None else text, dotted, value)
    if doc.kind == "shell":
        from searcher.check.text_edits import set_override

        return set_override(doc.text if text is None else text, dotted, value)
    lines = (doc.text if text is None else text).splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    path = dotted.split(".")
    hit = _find(lines, path)
    if hit is not None:
        i, indent = hit
        line = lines[i]
        if value is DELETE:
            end = _block_end(lines, i, indent)
            del lines[i:end]
            if doc.kind == "json" and i > 0 and lines[i].strip().startswith(("}", "]")):
                lines[i - 1] = re.sub(r",(\s*)$", r"\1", lines[i - 1])
            return "".join(lines)
        start, end = _value_span(line)
        old_value = line[start:end]
        if old_value.strip() in ("", "{", "[") or isinstance(value, dict):
            # a block value: replace the whole block by a flow value on this line
            block_end = _block_end(lines, i, indent)
            tail = "," if doc.kind == "json" and lines[block_end - 1].rstrip().endswith(",") else ""
            lines[i:block_end] = [line[:start] + _fmt(doc.kind, value) + tail + "\n"]
            return "".join(lines)
        lines[i] = line[:start] + _fmt(doc.kind, value) + line[end:]
        return "".join(lines)
    if value is DELETE:
        return "".join(lines)
    # the key is new: insert it under the deepest parent that exists
    for depth in range(len(path) - 1, -1, -1):
        parent = _find(lines, path[:depth]) if depth else None
        if depth and parent is None:
            continue
        rest = path[depth:]
        nested: Any = value
        for part in reversed(rest[1:]):
            nested = {part: nested}
        return _insert(doc, lines, parent, rest[0], nested)
    raise AssertionError("unreachable")


def _insert(
    doc: Document, lines: list[str], parent: tuple[int, int] | None, key: str, value: Any
) -> str:
    if doc.kind == "json":
        if parent is None:
            at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("{"))
            child = next((len(ln) - len(ln.lstrip()) for ln in lines[at + 1 :] if ln.strip()), 2)
        else:
            at, pind = parent
            child = next(
                (len(ln) - len(ln.lstrip()) for ln in lines[at + 1 :] if ln.strip()), pind + 2
            )
        lines.insert(at + 1, " " * child + f"{json.dumps(key)}: {json.dumps(value)},\n")
        return "".join(lines)
    if parent is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"{key}: {_yaml_scalar(value)}\n")
        return "".join(lines)
    at, pind = parent
    child = pind + 2
    for ln in lines[at + 1 :]:
        if ln.strip() and not ln.lstrip().startswith("#"):
            ind = len(ln) - len(ln.lstrip())
            child = ind if ind > pind else pind + 2
            break
    lines.insert(at + 1, " " * child + f"{key}: {_yaml_scalar(value)}\n")
    return "".join(lines)


def shown_path(path: Path) -> str:
    """The path relative to the working folder when it is inside it, else absolute."""
    import os

    full = path.resolve()
    rel = os.path.relpath(full)
    return str(full) if rel.startswith("..") else rel


def unified_diff(doc: Document, new_text: str) -> str:
    """A unified diff with plain paths (apply with ``patch -p0`` from the working folder)."""
    name = shown_path(doc.path)
    return "".join(
        difflib.unified_diff(
            doc.text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=name,
            tofile=name,
        )
    )
