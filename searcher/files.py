"""The one writer: every file any command writes goes through :func:`write_outputs`.

- atomic: each file is written to a temporary file beside it, then renamed into place, so a reader
  never sees half a file;
- never overwriting: an existing file is refused unless ``force``, before anything is written;
- all or nothing across every file of one command (the launch files and the CSV beside them): if
  any step fails, files already renamed are removed, overwritten ones restored, appended ones
  truncated back and folders this call created removed;
- appends (``Output(append=True)``, for a CSV) check the header of the existing file and add a
  missing final newline before the new rows, without rewriting a single existing byte.

:func:`check_outputs` runs the same refusals without writing: commands call it before their work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.limits import MAX_FILE_BYTES, excerpt


@frozen
class Output:
    """One file a command writes.

    ``append``: add ``text`` (rows without header) to the file; a missing file is created with
    ``header`` first. ``make_folders``: create missing parent folders (a launch ``--out``).
    """

    path: Path
    text: str
    executable: bool = False
    append: bool = False
    header: str | None = None
    make_folders: bool = False
    flag: str = "the output"


def _shown(p: Path) -> str:
    text = str(p)
    return text if len(text) <= 80 else excerpt(text, 80)[1:-1]


def check_outputs(outputs: Sequence[Output], force: bool) -> None:
    """Every refusal :func:`write_outputs` would make from the file system as it is, none written."""
    seen: set[str] = set()
    for o in outputs:
        p = o.path
        if not p.name or p.name in (".", ".."):
            raise FitplanError(f"{o.flag}: {_shown(p)} is not a file name")
        try:
            key = os.path.realpath(p)
        except (OSError, ValueError) as err:
            raise FitplanError(f"{o.flag}: bad path {_shown(p)}: {err}") from None
        if key in seen:
            raise FitplanError(f"{o.flag}: {_shown(p)} would be written twice by one command")
        seen.add(key)
        try:
            is_dir, exists = p.is_dir(), p.exists() or p.is_symlink()
        except (OSError, ValueError) as err:
            raise FitplanError(f"{o.flag}: bad path {_shown(p)}: {err}") from None
        if is_dir:
            raise FitplanError(f"{o.flag}: {_shown(p)} is a folder", "give a file name")
        if exists and not p.is_file():
            raise FitplanError(f"{o.flag}: {_shown(p)} exists and is not a regular file")
        if exists and not o.append and not force:
            raise FitplanError(f"{_shown(p)} exists", "pass --force to overwrite it")
        if exists and o.append:
            _check_append_target(o)
        parent = _parent(p)
        ancestor = parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor != parent and not o.make_folders:
            raise FitplanError(
                f"{o.flag}: the folder {_shown(parent)} does not exist",
                "create it first or choose another path",
            )
        if not ancestor.is_dir():
            raise FitplanError(
                f"{o.flag}: cannot create folder {_shown(parent)}: {_shown(ancestor)} is a file"
            )
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise FitplanError(f"{o.flag}: cannot write in {_shown(ancestor)}: permission denied")


def _parent(p: Path) -> Path:
    return p.parent if str(p.parent) else Path(".")


def _check_append_target(o: Output) -> None:
    """An existing CSV we append to: UTF-8 text whose first line is our header."""
    from constraints.limits import read_text

    p = o.path
    if p.stat().st_size == 0:
        return
    text = read_text(p, "CSV file", max_bytes=MAX_FILE_BYTES)
    first = text.splitlines()[0].strip() if text.strip() else ""
    if o.header is not None and first != o.header.strip():
        raise FitplanError(
            f"{_shown(p)} has other columns than this CSV (its header: {excerpt(first, 50)})",
            "append to a CSV this command wrote, or give a new file",
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_outputs(outputs: Sequence[Output], *, force: bool = False) -> list[Path]:
    """Write every output, all or none (see the module docstring). Returns the paths."""
    import tempfile  # here, not at import: random and its hashes are ~2 ms of a cold search

    check_outputs(outputs, force)
    created: list[Path] = []  # folders this call made, deepest first
    temps: list[tuple[Path, Output]] = []
    renamed: list[Path] = []
    backups: dict[Path, Path] = {}
    appended: list[tuple[Path, int]] = []
    mask = _umask()
    try:
        for o in outputs:
            _make_folders(_parent(o.path), created)
        for o in outputs:
            if o.append and o.path.exists() and o.path.stat().st_size > 0:
                continue
            text = (o.header.rstrip("\n") + "\n" + o.text) if o.append and o.header else o.text
            fd, tmp = tempfile.mkstemp(
                dir=_parent(o.path), prefix=f".{o.path.name}.", suffix=".tmp"
            )
            temps.append((Path(tmp), o))
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            os.chmod(tmp, (0o777 if o.executable else 0o666) & ~mask)
        for tmp_path, o in temps:
            target = o.path
            if target.exists():
                backup = target.with_name(f".{target.name}.fitplan-old")
                os.replace(target, backup)
                backups[target] = backup
            os.replace(tmp_path, target)
            renamed.append(target)
        for o in outputs:
            if o.path in renamed:
                continue
            size = o.path.stat().st_size
            with o.path.open("rb") as f:
                f.seek(max(0, size - 1))
                last = f.read(1)
            appended.append((o.path, size))
            with o.path.open("ab") as f:
                f.write((b"\n" if last not in (b"\n", b"") else b"") + o.text.encode("utf-8"))
    except OSError as err:
        failed = Path(err.filename) if err.filename else _parent(outputs[0].path)
        for p, size in appended:
            with contextlib.suppress(OSError):
                os.truncate(p, size)
        for t in renamed:
            t.unlink(missing_ok=True)
        for t, backup in backups.items():
            os.replace(backup, t)
        for tmp_path, _o in temps:
            tmp_path.unlink(missing_ok=True)
        for d in created:
            try:
                d.rmdir()
            except OSError:
                break
        raise FitplanError(f"cannot write in {_shown(failed)}: {err.strerror or err}") from None
    for backup in backups.values():
        backup.unlink(missing_ok=True)
    return [o.path for o in outputs]


def _make_folders(folder: Path, created: list[Path]) -> None:
    missing: list[Path] = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        created.insert(0, d)


def atomic_write_text(
    path: str | Path, text: str, *, force: bool = True, flag: str = "the output"
) -> Path:
    """One file, through :func:`write_outputs`."""
    return write_outputs([Output(Path(path), text, flag=flag)], force=force)[0]


def folder_outputs(folder: str | Path, files: Sequence[tuple[str, str, bool]]) -> list[Output]:
    """(name, text, executable) files inside ``folder`` (created if missing) as outputs."""
    root = Path(folder)
    for name, _text, _x in files:
        if not name or "/" in name or name in (".", ".."):
            raise FitplanError(f"bad file name {excerpt(name)}")
    if root.exists() and not root.is_dir():
        raise FitplanError(f"{_shown(root)} is a file, not a folder", "give --out a folder")
    return [
        Output(root / name, text, executable=x, make_folders=True, flag="--out")
        for name, text, x in files
    ]


def atomic_write_files(
    folder: str | Path,
    files: Sequence[tuple[str, str, bool]],
    *,
    force: bool = False,
    also: Sequence[Output] = (),
) -> list[Path]:
    """Several files into ``folder`` (and ``also`` elsewhere, e.g. a CSV), all or none."""
    outputs = folder_outputs(folder, files)
    return write_outputs([*outputs, *also], force=force)[: len(outputs)]
