"""Writing files the way a careful tool does: atomically, never clobbering without --force."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
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
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, p)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise FitplanError(f"cannot write {p}: {err.strerror}") from None
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_files(
    folder: str | Path,
    files: Sequence[tuple[str, str, bool]],
    *,
    force: bool = False,
) -> list[Path]:
    """Write several files into ``folder`` all or none: (name, text, executable) each.

    The folder is created if missing. Existing files are an error before anything is written
    (unless ``force``). Every file goes to a temporary file first; only when all are written are
    they renamed into place. If anything fails, the temporary files, the files already renamed and
    the folders this call created are removed, and overwritten files are restored.
    """
    root = Path(folder)
    names = [name for name, _text, _x in files]
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            raise FitplanError(f"bad file name {name!r}")
    if len(set(names)) != len(names):
        raise FitplanError("the same file name twice in one emission")
    if root.exists() and not root.is_dir():
        raise FitplanError(f"{root} is a file, not a folder", "give --out a folder")
    created: list[Path] = []
    if not root.exists():
        p = root
        while not p.exists() and p != p.parent:
            created.append(p)
            p = p.parent
        try:
            root.mkdir(parents=True)
        except OSError as err:
            raise FitplanError(f"cannot create folder {root}: {err.strerror or err}") from None

    def remove_created() -> None:
        for d in created:  # deepest first
            try:
                d.rmdir()
            except OSError:
                break

    targets = [root / name for name in names]
    clash = [t for t in targets if t.is_dir()]
    existing = [t for t in targets if t.exists() and not t.is_dir()]
    if clash or (existing and not force):
        remove_created()
        if clash:
            raise FitplanError(f"{clash[0]} is a folder", "choose another --out")
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise FitplanError(f"{existing[0]}{more} exists", "pass --force to overwrite")
    if not os.access(root, os.W_OK | os.X_OK):
        remove_created()
        raise FitplanError(f"cannot write in {root}: permission denied")
    mask = _umask()
    temps: list[Path] = []
    try:
        for name, text, executable in files:
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}.", suffix=".tmp")
            temps.append(Path(tmp))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, (0o777 if executable else 0o666) & ~mask)
    except OSError as err:
        for t in temps:
            t.unlink(missing_ok=True)
        remove_created()
        raise FitplanError(f"cannot write in {root}: {err.strerror or err}") from None
    done: list[Path] = []
    backups: dict[Path, Path] = {}
    try:
        for tmp_path, target in zip(temps, targets, strict=True):
            if target.exists():
                backup = target.with_name(f".{target.name}.fitplan-old")
                os.replace(target, backup)
                backups[target] = backup
            os.replace(tmp_path, target)
            done.append(target)
    except OSError as err:
        for t in done:
            t.unlink(missing_ok=True)
        for t, backup in backups.items():
            os.replace(backup, t)
        for t in temps:
            t.unlink(missing_ok=True)
        remove_created()
        raise FitplanError(f"cannot write in {root}: {err.strerror or err}") from None
    for backup in backups.values():
        backup.unlink(missing_ok=True)
    return targets
