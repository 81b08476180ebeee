"""Pieces several formats share: paths inside --out and the plan file written with every emission."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from searcher.emitters.base import EmitOptions, EmittedFile
from searcher.emitters.plan import Plan
from searcher.emitters.versions import released_versions

PLAN_FILE = "plan.json"
#: the model's Hugging Face config, written beside the script: ``--random-init`` builds from it,
#: so a smoke test needs no download (HF_HUB_OFFLINE=1 works)
MODEL_CONFIG_FILE = "config.json"


def raw_path(options: EmitOptions, name: str) -> str:
    """``name`` inside --out as the user typed it (what cross-file references use)."""
    out = options.out.rstrip("/") or "/"
    return name if out in (".", "") else f"{out}/{name}"


def out_path(options: EmitOptions, name: str) -> str:
    """``raw_path`` quoted for a shell command."""
    return shlex.quote(raw_path(options, name))


def plan_file(plan: Plan) -> EmittedFile:
    """The plan itself, so that ``fitplan launch PLAN.json`` can re-emit it in another format."""
    return EmittedFile(PLAN_FILE, json.dumps(plan.to_json(), indent=2, default=str) + "\n")


def model_config(plan: Plan) -> dict[str, object] | None:
    """The model's config.json: the user's file when the plan loads a local folder (it wins over
    a catalog model of the same name), else the catalog's copy; None if neither."""
    from constraints.errors import FitplanError
    from constraints.models import catalog_entry

    given = Path(plan.model.name)  # a config file the user named (any file name)
    path = given if given.suffix == ".json" else Path(plan.model_ref) / MODEL_CONFIG_FILE
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        return loaded if isinstance(loaded, dict) else None
    try:
        config: dict[str, object] = dict(catalog_entry(plan.model.id)["config"])
    except (FitplanError, KeyError):
        return None
    return config


def model_config_file(plan: Plan) -> list[EmittedFile]:
    """``config.json`` beside the script (nothing when fitplan has no config for the model), and
    the shrunken copy a CPU smoke test builds (:mod:`searcher.emitters.smoke_model`)."""
    from searcher.emitters.smoke_model import SMOKE_CONFIG_FILE, smoke_config

    config = model_config(plan)
    if config is None:
        return []
    files = [EmittedFile(MODEL_CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")]
    small = smoke_config(config)
    if small is not None:
        files.append(
            EmittedFile(SMOKE_CONFIG_FILE, json.dumps(small[0], indent=2, sort_keys=True) + "\n")
        )
    return files


def smoke_note(plan: Plan) -> str:
    """What the CPU smoke test's shrunken copy changes ("" when it builds the model itself)."""
    from searcher.emitters.smoke_model import smoke_config

    config = model_config(plan)
    small = smoke_config(config) if config is not None else None
    return small[1] if small is not None else ""


def requirements_file(group: str, packages: list[tuple[str, str]]) -> EmittedFile:
    """requirements.txt: ``name==version`` for each (package, why), the released versions the
    files were written for and tested with (install torch first: CPU or CUDA build)."""
    pins = released_versions(group)
    lines = [
        "# the released versions these files were written for (fitplan: data/versions.json)",
        "# install torch first for your platform (CUDA or CPU build), then: pip install -r requirements.txt",
    ]
    for name, why in packages:
        lines.append(f"{name}=={pins[name]}  # {why}")
    return EmittedFile("requirements.txt", "\n".join(lines) + "\n")


def commented_yaml(entries: list[tuple[str, object, str | None]]) -> str:
    """Top-level ``key: value  # comment`` lines (mappings as indented blocks, lists in flow
    style), so every knob's line can say where it came from."""
    import yaml

    out: list[str] = []
    for key, value, comment in entries:
        tail = f"  # {comment}" if comment else ""
        if (isinstance(value, dict) and value) or (
            isinstance(value, list) and value and isinstance(value[0], dict)
        ):
            out.append(f"{key}:{tail}")
            block = yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
            out.extend("  " + line for line in block.rstrip("\n").splitlines())
        else:
            text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
            text = text.removesuffix("...").strip()
            out.append(f"{key}: {text}{tail}")
    return "\n".join(out) + "\n"


#: the caching allocator's environment variable; the value for a plan with expandable segments
ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_CONF = "expandable_segments:True"


def alloc_conf_export(plan: Plan) -> list[str]:
    """The launch script's line that sets the allocator mode the plan was modelled with (a value
    the user already exported wins); none for the default mode."""
    if not plan.config.expandable_segments:
        return []
    return [f'export {ALLOC_CONF_VAR}="${{{ALLOC_CONF_VAR}:-{EXPANDABLE_CONF}}}"']
