"""A model named by its Hugging Face Hub id: only its ``config.json``, through ``huggingface_hub``.

``hf_hub_download(repo_id, "config.json", revision=…)`` keeps it in the usual HF cache
(``HF_HOME`` / ``HF_HUB_CACHE``), takes the token from the usual places (``HF_TOKEN``, the
``hf auth login`` file) for gated models, and honours ``HF_HUB_OFFLINE=1``. The resolved commit
is part of the model's name, so every output says which revision it read. Offline and not
cached is one line: what is missing and how to pass a local path instead.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from constraints.errors import FitplanError
from constraints.models import ModelSpec, resolve_model, spec_from_hf_config
from searcher.wrappers import build_on_meta, config_at, models_buildable

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+(@[\w.\-/]+)?$", re.ASCII)


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
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)  # before any lookup: a bad id never touches the network
        path = Path(
            hf_hub_download(
                repo_id, "config.json", revision=revision, local_files_only=not _hub_reachable()
            )
        )
    except HFValidationError as err:  # e.g. a name over the Hub's 96 characters
        reason = str(err).split(":")[0].removesuffix(".")
        raise FitplanError(
            f"--model {repo_id[:60]}{'…' if len(repo_id) > 60 else ''}: not a valid Hub id "
            f"({reason})",
            "check the id (org/name, each at most 96 characters of letters, digits, '-', '_', "
            "'.'), or pass a local config.json",
        ) from None
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
    from constraints.limits import NONFINITE_CONFIG_KEYS, read_text, strict_json

    repo_id, _, revision = text.strip().partition("@")
    path, commit = hub_config(repo_id, revision or None)
    text = read_text(path, f"--model {repo_id}: the cached config.json")
    cfg = strict_json(text, str(path), NONFINITE_CONFIG_KEYS)
    if not isinstance(cfg, dict):
        raise FitplanError(f"--model {repo_id}: the cached config.json is not a JSON object")
    name = f"{repo_id}@{commit[:12]}"
    source = f"huggingface.co/{repo_id} commit {commit} (config.json only)"
    try:
        return spec_from_hf_config(cfg, id=repo_id, name=name, source=source, family=family)
    except FitplanError as err:
        if family is None and MULTIMODAL in err.message:
            named = {"id": repo_id, "name": name, "source": source}
            return wrapper_or_refusal(str(path), err).model_copy(update=named)
        raise


#: the phrase of hf_config_types' refusal of a config nesting a text_config
MULTIMODAL = "is multimodal"


def wrapper_or_refusal(text: str, err: FitplanError) -> ModelSpec:
    """A multimodal wrapper's text model with its towers counted (searcher/wrappers.py), or the
    refusal, telling how to get the reading where torch and transformers are missing."""
    from searcher.wrappers import read_wrapper

    spec = read_wrapper(text)
    if spec is not None:
        return spec
    if not _structure_readable() and "reads its text_config" in (err.hint or ""):
        raise FitplanError(
            err.message,
            "install torch and transformers (pip install '.[measure]'): fitplan then plans its "
            "text model and counts the other towers from the model itself; or save its "
            "text_config as its own config.json (the other towers not counted)",
        ) from None
    raise err


def resolve_any_model(text: str, family: str | None = None) -> ModelSpec:
    """A catalog id, a local config.json, or a Hub id (``org/name`` or ``org/name@revision``);
    a config of a type fitplan has no parser for is read as Llama where the model transformers
    builds from it has Llama's layers (:func:`read_by_structure`)."""
    try:
        return resolve_model(text, family=family)
    except FitplanError as err:
        if is_hub_id(text):
            return hub_model(text, family=family)
        if family is None and MULTIMODAL in err.message:
            return wrapper_or_refusal(text, err)
        if family is None and "is not supported" in err.message:
            spec = read_by_structure(text)
            if spec is not None:
                return spec
            if not _structure_readable():
                raise FitplanError(
                    err.message,
                    f"{err.hint}; or install torch and transformers (pip install '.[measure]'): "
                    "fitplan then reads a type whose layers are Llama's from the model itself",
                ) from None
        raise


#: the families a causal LM of another type may be read as, the plainest first: the first whose
#: structure transformers builds the same (and whose parser then counts what transformers does)
STRUCTURE_FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "olmo2",
    "gemma2",
    "phi3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
    "glm4_moe",
)
#: fitplan's count of the family's reading against transformers' own (tools/arch_sweep.py's bar)
STRUCTURE_TOLERANCE = 0.005
#: the deepest model built to read its structure (each layer is a module built in Python)
MAX_LAYERS_BUILT = 1024
#: layers a reference model of a family is built with (dense-first MoE families mix both kinds)
REFERENCE_LAYERS = 4


def _structure_readable() -> bool:
    return models_buildable()


def read_by_structure(text: str) -> ModelSpec | None:
    """A local config.json of a type fitplan has no parser for, read as the first family of
    :data:`STRUCTURE_FAMILIES` whose model transformers builds with the same structure (on the
    meta device: no weights) — the same parameter names in every decoder layer and outside
    them (a tied head aside), the same kind of norm — if that family's parser then counts
    transformers' parameters within 0.5 %; None otherwise, or without torch and transformers."""
    found = config_at(text) if _structure_readable() else None
    if found is None:
        return None
    from constraints.hf_config import load_config_file
    from constraints.params import total_params

    path, cfg = found
    try:
        model_type = str(cfg["model_type"])
        layers = int(cfg.get("num_hidden_layers") or 0)
    except Exception:
        return None
    if not 0 < layers <= MAX_LAYERS_BUILT:
        return None
    try:
        signature, counted, model_class = _structure(model_type, cfg)
    except Exception:  # a config transformers cannot build either: the refusal stands
        return None
    references = _reference_signatures()
    for family in STRUCTURE_FAMILIES:
        if references.get(family) != signature:
            continue
        try:  # fitplan's own checks of every value, as that family's parser reads them
            spec = load_config_file(path, family=family)
        except FitplanError:
            continue
        if abs(total_params(spec) / counted - 1) <= STRUCTURE_TOLERANCE:
            caveat = (
                f"model_type {model_type!r} read as {family}: transformers builds {model_class} "
                f"with {family}'s structure (checked on the meta device; {counted:,} parameters)."
            )
            return spec.model_copy(update={"caveats": caveat})
    return None


def _structure(model_type: str, cfg: dict, layers: int | None = None) -> tuple[tuple, int, str]:
    """(the structure's signature, transformers' parameter count, the class) of the causal LM
    transformers builds from ``cfg`` on the meta device, with at most ``layers`` layers."""
    from transformers import AutoModelForCausalLM

    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    depth = fields.get("num_hidden_layers")
    if layers is not None and isinstance(depth, int) and depth > layers:
        # per-layer lists (layer_types, no_rope_layers …) follow the depth
        fields = {
            k: v[:layers] if isinstance(v, list) and len(v) == depth else v
            for k, v in fields.items()
        }
        fields["num_hidden_layers"] = layers
    _config, model = build_on_meta(model_type, fields, AutoModelForCausalLM.from_config)
    in_layers: set[str] = set()
    outside: set[str] = set()
    for key, _p in model.named_parameters(remove_duplicate=False):
        m = re.match(r"model\.layers\.\d+\.(.*)", key)
        if m:
            in_layers.add(m.group(1))
        elif key != "lm_head.weight":  # tied or not is the config's, read by every parser
            outside.add(key)
    norms = frozenset(
        "rms" if type(m).__name__.endswith("RMSNorm") else type(m).__name__
        for m in model.modules()
        if "Norm" in type(m).__name__
    )
    signature = (frozenset(in_layers), frozenset(outside), norms)
    count = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return signature, count, type(model).__name__


@cache
def _reference_signatures() -> dict[str, tuple]:
    """Each family's structure, as transformers builds its default config (a few layers)."""
    from transformers import AutoConfig

    out = {}
    for family in STRUCTURE_FAMILIES:
        try:
            defaults = AutoConfig.for_model(family).to_dict()
            out[family] = _structure(family, defaults, REFERENCE_LAYERS)[0]
        except Exception:  # a family this transformers release builds otherwise: not offered
            continue
    return out
