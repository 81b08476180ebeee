"""Edits to the two non-YAML/JSON kinds of file ``check`` reads: a Python module's top-level
constants (fitplan's train.py) and the ``key=value`` overrides of a ``tune run`` command. Pure
text functions (no imports from the rest of ``searcher.check``)."""

from __future__ import annotations

import re
from typing import Any


def set_constant(text: str, name: str, value: Any) -> str:
    """``NAME = value  # comment`` with the value replaced (the comment kept)."""
    pat = re.compile(rf"^({re.escape(name)} = )(.*?)(\s+#.*)?$", re.M)
    if not pat.search(text):
        return text
    return pat.sub(lambda m: m.group(1) + repr(value) + (m.group(3) or ""), text, count=1)


def set_override(text: str, key: str, value: Any) -> str:
    """The command with ``key=value`` set (a new override goes before ``"$@"`` or at the end)."""
    if isinstance(value, bool):
        v = "True" if value else "False"
    elif isinstance(value, list):
        v = "[" + ",".join(str(x) for x in value) + "]"
    else:
        v = str(value)
    token = f"{key}={v}"
    if "[" in v or " " in v:
        token = f"'{token}'"
    pat = re.compile(rf"(?<![\w.])'?{re.escape(key)}=[^\s']*'?")
    if pat.search(text):
        return pat.sub(lambda _m: token, text, count=1)
    if '"$@"' in text:
        return text.replace('"$@"', f'{token} \\\n  "$@"', 1)
    return text.rstrip("\n") + f" {token}\n"
