"""Writing files the way a careful tool does: atomically, never clobbering without --force."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from constraints.errors import FitplanError


def atomic_write_text(path: str | Path, text: str, *, force: bool = True) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so a
    reader never sees half a file. With ``force=False`` an existing file is an error."""
    p = Path(path)
    if p.exists() and not force:
        raise FitplanError(f"{p} exists", "pass --force to overwrite it")
    if p.is_dir():
        raise FitplanError(f"{p} is a directory", "give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise FitplanError(
            f"folder {parent} does not exist", "create it first or choose another path"
        )
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as err:
        raise FitplanError(f"cannot write in {parent}: {err.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, p)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise FitplanError(f"cannot write {p}: {err.strerror}") from None
    return p
