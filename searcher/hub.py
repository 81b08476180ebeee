"""A model named by its Hugging Face Hub id: only its ``config.json``, through ``huggingface_hub``.

``hf_hub_download(repo_id, "config.json", revision=…)`` keeps it in the usual HF cache
(``HF_HOME`` / ``HF_HUB_CACHE``), takes the token from the usual places (``HF_TOKEN``, the
``hf auth login`` file) for gated models, and honours ``HF_HUB_OFFLINE=1``. The resolved commit
is part of the model's name, so every output says which revision it read. Offline and not
cached is one line: what is missing and how to pass a local path instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from constraints.errors import FitplanError
from constraints.models import ModelSpec, resolve_model, spec_from_hf_config

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+(@[\w.\-/]+)?$")


def is_hub_id(text: str) -> bool:
    return bool(HUB_ID.match(text.strip())) and not Path(text).expanduser().exists()


def _hub_reachable() -> bool:
    """Whether the Hub's host name resolves: without a network, huggingface_hub retries for
    about 25 s before it falls back to the cache; a failed lookup answers in milliseconds."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host or "huggingface.co", 443)
    except (OSError, UnicodeError):
        return False
    return True


def hub_config(repo_id: str, revision: str | None = None) -> tuple[Path, str]:
    """(local path of config.json, the commit it came from)."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:  # pragma: no cover - transformers depends on it
        raise FitplanError(
            f"--model {repo_id}: reading a Hub id needs huggingface_hub",
            "pip install huggingface_hub, or pass a local config.json",
        ) from None
    local_hint = (
        f"download it where you are online (hf download {repo_id} config.json) or pass a local "
        "path: --model path/to/config.json"
    )
    import logging

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # its retry lines, not ours
    try:
        path = Path(
            hf_hub_download(
                repo_id, "config.json", revision=revision, local_files_only=not _hub_reachable()
            )
        )
    except GatedRepoError:
        raise FitplanError(
            f"--model {repo_id}: a gated repository; your token has no access",
            "accept its licence on huggingface.co, then set HF_TOKEN or run `hf auth login`",
        ) from None
    except RepositoryNotFoundError:
        raise FitplanError(
            f"--model {repo_id}: no such model on the Hugging Face Hub (or it is private)",
            "check the id, or set HF_TOKEN for a private repository",
        ) from None
    except RevisionNotFoundError:
        raise FitplanError(f"--model {repo_id}: no revision '{revision}'") from None
    except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: first
        raise FitplanError(
            f"--model {repo_id}: offline and its config.json is not in the HF cache", local_hint
        ) from None
    except EntryNotFoundError:
        raise FitplanError(f"--model {repo_id}: the repository has no config.json") from None
    except OSError as err:
        raise FitplanError(
            f"--model {repo_id}: cannot fetch config.json ({err})", local_hint
        ) from None
    commit = path.parent.name if path.parent.parent.name == "snapshots" else (revision or "unknown")
    return path, commit


def hub_model(text: str, family: str | None = None) -> ModelSpec:
    from constraints.limits import read_text, strict_json

    repo_id, _, revision = text.strip().partition("@")
    path, commit = hub_config(repo_id, revision or None)
    cfg = strict_json(read_text(path, f"--model {repo_id}: the cached config.json"), str(path))
    if not isinstance(cfg, dict):
        raise FitplanError(f"--model {repo_id}: the cached config.json is not a JSON object")
    return spec_from_hf_config(
        cfg,
        id=repo_id,
        name=f"{repo_id}@{commit[:12]}",
        source=f"huggingface.co/{repo_id} commit {commit} (config.json only)",
        family=family,
    )


def resolve_any_model(text: str, family: str | None = None) -> ModelSpec:
    """A catalog id, a local config.json, or a Hub id (``org/name`` or ``org/name@revision``)."""
    try:
        return resolve_model(text, family=family)
    except FitplanError:
        if is_hub_id(text):
            return hub_model(text, family=family)
        raise
