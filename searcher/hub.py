"""A model named by its Hugging Face Hub id: only its ``config.json``, through ``huggingface_hub``.

``hf_hub_download(repo_id, "config.json", revision=…)`` keeps it in the usual HF cache
(``HF_HOME`` / ``HF_HUB_CACHE``), takes the token from the usual places (``HF_TOKEN``, the
``hf auth login`` file) for gated models, and honours ``HF_HUB_OFFLINE=1``. The resolved commit
is part of the model's name, so every output says which revision it read. Offline and not
cached is one line: what is missing and how to pass a local path instead.
"""

from __future__ import annotations

import json
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
    """A catalog id, a local config.json, or a Hub id (``org/name`` or ``org/name@revision``);
    a config of a type fitplan has no parser for is read as Llama where the model transformers
    builds from it has Llama's layers (:func:`read_by_structure`)."""
    try:
        return resolve_model(text, family=family)
    except FitplanError as err:
        if is_hub_id(text):
            return hub_model(text, family=family)
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


#: a Llama decoder layer's parameters (transformers ``LlamaDecoderLayer``), and those it may add
#: without leaving Llama's layer kinds: biases (``attention_bias``, ``mlp_bias``)
LLAMA_LAYER = frozenset(
    f"{m}.weight"
    for m in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
        "input_layernorm",
        "post_attention_layernorm",
    )
)
LLAMA_OPTIONAL = frozenset(
    f"{m}.bias"
    for m in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )
)
LLAMA_OUTSIDE = frozenset({"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
#: fitplan's count of the Llama reading against transformers' own (tools/arch_sweep.py's bar)
STRUCTURE_TOLERANCE = 0.005
#: the deepest model built to read its structure (each layer is a module built in Python)
MAX_LAYERS_BUILT = 1024


def _structure_readable() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def read_by_structure(text: str) -> ModelSpec | None:
    """A local config.json whose model transformers builds (on the meta device: no weights)
    with exactly Llama's decoder layers — the same parameters per layer, RMS norms, an
    embedding, a final norm and a head — read as Llama, if fitplan's parameter count then
    equals transformers' (within 0.5 %); None otherwise or without torch and transformers."""
    if not _structure_readable():
        return None
    from constraints.hf_config import load_config_file
    from constraints.params import total_params

    path = Path(text).expanduser()
    path = path / "config.json" if path.is_dir() else path
    try:  # fitplan's own checks of every value first: what transformers builds is bounded
        spec = load_config_file(path, family="llama")
    except FitplanError:
        return None
    if spec.total_layers > MAX_LAYERS_BUILT:
        return None
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        counted, model_class = _llama_structure(cfg)
    except Exception:  # a config transformers cannot build either: the refusal stands
        return None
    if counted is None:
        return None
    if abs(total_params(spec) / counted - 1) > STRUCTURE_TOLERANCE:
        return None
    caveat = (
        f"model_type {cfg.get('model_type')!r} read as llama: transformers builds {model_class} "
        f"with Llama's decoder layers (checked on the meta device; {counted:,} parameters)."
    )
    return spec.model_copy(update={"caveats": caveat})


def _llama_structure(cfg: dict) -> tuple[int | None, str]:
    """(transformers' parameter count, the class) when the causal-LM model built from ``cfg``
    has Llama's structure, else (None, the class)."""
    import warnings

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' notices are not fitplan's output
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = AutoConfig.for_model(cfg["model_type"], **fields)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
    finally:
        hf_logging.set_verbosity(verbosity)
    name = type(model).__name__
    layers: dict[str, set[str]] = {}
    outside: set[str] = set()
    for key, _p in model.named_parameters():
        head, _, rest = key.partition("model.layers.")
        if head == "" and rest:
            index, _, param = rest.partition(".")
            layers.setdefault(index, set()).add(param)
        else:
            outside.add(key)
    norms = {type(m).__name__ for m in model.modules() if "Norm" in type(m).__name__}
    llama = (
        bool(layers)
        and all(LLAMA_LAYER <= ps <= LLAMA_LAYER | LLAMA_OPTIONAL for ps in layers.values())
        and outside <= LLAMA_OUTSIDE
        and all(n.endswith("RMSNorm") for n in norms)
    )
    if not llama:
        return None, name
    seen: set[int] = set()
    count = 0
    for p in model.parameters():
        if id(p) not in seen:  # a tied head once
            seen.add(id(p))
            count += p.numel()
    return count, name
