"""One optuna study shared by several processes or machines: the storage URL, checked and opened.

optuna's RDB storage takes SQLAlchemy URLs. SQLite (``sqlite:///fitplan.db``, a file) is the
embedded default: processes on one machine share it. A team shares one study across machines
through a database server: ``postgresql+psycopg://user:password@host:5432/db`` (psycopg 3, the
``study`` extra); ``postgresql://`` alone is read as ``postgresql+psycopg://``. ``mysql+pymysql://``
works where that driver is installed.

A study records the fingerprint of the problem it was made for, so two searches of different
problems never mix their trials under one name: the default study name is derived from it.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any
from urllib.parse import urlsplit

from constraints.errors import FitplanError
from constraints.limits import excerpt

#: URL schemes (SQLAlchemy dialect+driver) and the module each driver needs
DRIVERS = {
    "sqlite": "sqlite3",
    "postgresql+psycopg": "psycopg",
    "postgresql+psycopg2": "psycopg2",
    "mysql+pymysql": "pymysql",
}
#: a study created by two processes at the same moment: tries before giving up
CREATE_TRIES = 5


def masked(url: str) -> str:
    """The URL with its password hidden (an error message never prints a secret)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return excerpt(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        url = parts._replace(netloc=netloc).geturl()
    return excerpt(url)[1:-1]


def normalised_url(url: str) -> str:
    """``postgresql://`` → ``postgresql+psycopg://`` (SQLAlchemy would look for psycopg2)."""
    for bare, full in (
        ("postgresql://", "postgresql+psycopg://"),
        ("postgres://", "postgresql+psycopg://"),
    ):
        if url.startswith(bare):
            return full + url[len(bare) :]
    return url


def check_storage_url(url: str) -> str:
    """The normalised URL, or one line saying what is wrong with it (before any work)."""
    import importlib.util
    from pathlib import Path

    text = url.strip()
    if not text or len(text) > 2000:
        raise FitplanError(f"--storage {excerpt(url)} is not a database URL", _EXAMPLE)
    text = normalised_url(text)
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme not in DRIVERS:
        raise FitplanError(
            f"--storage {masked(url)}: unknown database scheme {excerpt(scheme or text[:20])}",
            _EXAMPLE,
        )
    if scheme == "sqlite":
        path = text[len("sqlite:///") :] if text.startswith("sqlite:///") else ""
        if not path or path == ":memory:":
            raise FitplanError(
                f"--storage {masked(url)}: an SQLite study needs a file",
                "e.g. sqlite:///fitplan.db (three slashes, then the path)",
            )
        p = Path(path)
        if p.is_dir():
            raise FitplanError(f"--storage: {excerpt(path)} is a folder, not a database file")
        if not p.parent.exists() if str(p.parent) else False:
            raise FitplanError(f"--storage: the folder {excerpt(str(p.parent))} does not exist")
    else:
        try:
            parts = urlsplit(text)
            _ = parts.port
        except ValueError as err:
            raise FitplanError(f"--storage {masked(url)}: {err}", _EXAMPLE) from None
        if not parts.hostname:
            raise FitplanError(f"--storage {masked(url)} names no host", _EXAMPLE)
    module = DRIVERS[scheme]
    if importlib.util.find_spec(module) is None:
        raise FitplanError(
            f"--storage {masked(url)} needs the {module} driver",
            "pip install 'fitplan[study]'" if module == "psycopg" else f"pip install {module}",
        )
    return text


_EXAMPLE = "e.g. sqlite:///fitplan.db or postgresql://user@host:5432/fitplan"


def fingerprint(problem: Any) -> str:
    """A short hash of what a search problem is (model, hardware, target, pins)."""
    data = {
        "model": problem.model.model_dump(mode="json"),
        "gpu": problem.gpu.model_dump(mode="json"),
        "max_gpus": problem.max_gpus,
        "target_batch": problem.target_batch,
        "seq_len": problem.seq_len,
        "headroom": problem.headroom,
        "cpu_ram": problem.cpu_ram_per_node,
        "gpus_per_node": problem.gpus_per_node,
        "pins": {k: str(v) for k, v in sorted(problem.pins.items())},
    }
    if getattr(problem, "stack", None) is not None:  # the space narrowed to the installed stack
        data["stack"] = sorted(problem.stack)
    if getattr(problem, "framework", "hf") != "hf":  # what a knob value needs differs by framework
        data["framework"] = problem.framework
    if getattr(problem, "emit_format", None) is not None:  # the backends it writes, only
        data["emit_format"] = problem.emit_format
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _reason(err: BaseException) -> str:
    """The driver's own first line (connection refused, no such database, bad password)."""
    orig = getattr(err, "orig", None) or err
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    first = next(
        (ln for ln in lines if "refused" in ln or "FATAL" in ln), lines[0] if lines else ""
    )
    return excerpt(first, 160)[1:-1] or type(err).__name__


def open_study(
    storage: str | None,
    study_name: str,
    *,
    problem_key: str | None = None,
    **create_kwargs: Any,
) -> Any:
    """``optuna.create_study`` that loads a shared study, survives two processes creating it at
    the same moment, and turns an unreachable server or a wrong URL into one line."""
    import optuna

    url = check_storage_url(storage) if storage is not None else None
    study = None
    last: BaseException = Exception("unknown error")
    for attempt in range(CREATE_TRIES if url else 1):
        try:
            rdb: Any = url
            if url is not None:
                rdb = optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
            study = optuna.create_study(
                storage=rdb, study_name=study_name, load_if_exists=url is not None, **create_kwargs
            )
            break
        except FitplanError:
            raise
        except Exception as err:  # a race on creation, or a server that is not there
            last = err
            if _unreachable(err):
                break
            time.sleep(0.2 * (attempt + 1))
    if study is None:
        raise FitplanError(
            f"cannot open the optuna study in {masked(storage or '')}: {_reason(last)}",
            "is the database server running and the URL right?",
        )
    if problem_key is not None and url is not None:
        known = study.user_attrs.get("problem")
        if known is None:
            study.set_user_attr("problem", problem_key)
        elif known != problem_key:
            raise FitplanError(
                f"the study '{excerpt(study_name)[1:-1]}' in {masked(storage or '')} was made for "
                "another problem (model, GPUs, batch or pins differ)",
                "pass another --study-name, or the same arguments as the study's other processes",
            )
    return study


def _unreachable(err: BaseException) -> bool:
    text = str(err).lower()
    return any(
        s in text
        for s in (
            "connection refused",
            "could not translate host",
            "name or service not known",
            "password authentication",
            "does not exist",
            "unable to open database",
            "timeout",
            "no route",
        )
    )


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # several processes on one SQLite file: wait for the lock rather than fail at once
        return {"connect_args": {"timeout": 60}}
    return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
