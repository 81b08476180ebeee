"""A ``tune run RECIPE --config BASE key=value …`` command (the torchtune.sh fitplan emits, or
one a user wrote): the overrides read as a torchtune config, ``--nproc_per_node`` × ``--nnodes``
as the GPU count; edits rewrite the ``key=value`` tokens in place."""

from __future__ import annotations

import re
import shlex
from typing import Any

from constraints.errors import FitplanError
from constraints.limits import GPU_COUNT
from searcher.check.doc import Document
from searcher.check.reading import Reading
from searcher.check.text_edits import set_override as set_override


def is_tune_run(doc: Document) -> bool:
    return doc.kind == "shell" and re.search(r"\btune run\b", doc.text) is not None


def _command(text: str) -> list[str]:
    body = re.sub(r"\\\n", " ", text)
    for line in body.splitlines():
        if re.search(r"\btune run\b", line) and not line.lstrip().startswith("#"):
            try:
                return shlex.split(line, comments=True, posix=True)
            except ValueError as err:  # an unclosed quote
                raise FitplanError(
                    f"the tune run line cannot be read as a shell command: {err}",
                    "close the quote or escape it",
                ) from None
    return []


def _count(words: list[str], i: int) -> int:
    """The whole number after the flag ``words[i]`` (``--nnodes 1:4`` counts its maximum)."""
    text = words[i + 1].split(":")[-1]
    if not text.isdigit() or not GPU_COUNT.low <= int(text) <= GPU_COUNT.high:
        raise FitplanError(
            f"{words[i]} {words[i + 1]!r} in the tune run line is not a count of "
            f"{GPU_COUNT.low:,.0f} to {GPU_COUNT.high:,.0f}",
            f"write {words[i]} N",
        )
    return int(text)


def _value(text: str) -> Any:
    import yaml

    if text.startswith("[") and text.endswith("]"):
        return [x.strip() for x in text[1:-1].split(",") if x.strip()]
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def overrides(text: str) -> tuple[dict[str, Any], int | None, str | None]:
    """(nested overrides, GPUs, the base config name) of the ``tune run`` line."""
    words = _command(text)
    data: dict[str, Any] = {}
    procs, nodes, base = None, 1, None
    for i, w in enumerate(words):
        if w == "--nproc_per_node" and i + 1 < len(words):
            procs = _count(words, i)
        elif w == "--nnodes" and i + 1 < len(words):
            nodes = _count(words, i)
        elif w == "--config" and i + 1 < len(words):
            base = words[i + 1]
        elif "=" in w and not w.startswith("-") and "$" not in w:
            key, _, value = w.partition("=")
            cur = data
            parts = key.split(".")
            if not all(parts):
                raise FitplanError(f"{w!r} in the tune run line has an empty key")
            for p in parts[:-1]:
                cur = cur.setdefault(p, {})
                if not isinstance(cur, dict):
                    raise FitplanError(
                        f"the tune run line sets {key} under {p}, which it also sets to a value",
                        f"give either {p}=… or {key}=…, not both",
                    )
            cur[parts[-1]] = _value(value)
    return data, (procs * nodes if procs else None), base


def read_tune_run(doc: Document) -> Reading:
    from searcher.check.torchtune import read_torchtune

    data, gpus, base = overrides(doc.text)
    r = read_torchtune(Document(doc.path, doc.text, "shell", data))
    r.format = "torchtune-command"
    r.gpus = gpus or 1
    if base:
        r.notes.append(f"base config {base}: only the key=value overrides are read")
    return r
