"""``fitplan models --types``: the ``model_type``s whose config.json fitplan reads, and how."""

from __future__ import annotations

import json
import sys


def model_types() -> dict[str, dict[str, str]]:
    """model_type -> how fitplan reads it: its own reader, or as the family transformers builds
    it with (an alias, or the same structure)."""
    from constraints.hf_config_aliases import BUILT_AS, structure_families
    from constraints.model_spec import SUPPORTED_TYPES

    out = {t: {"read": "its own reader"} for t in SUPPORTED_TYPES}
    for t, alias in BUILT_AS.items():
        out[t] = {"read": f"as {alias.family} (transformers builds {alias.model_class})"}
    for t, row in structure_families().items():
        out[t] = {
            "read": f"as {row['family']} (transformers builds {row['model_class']} with its structure)"
        }
    return dict(sorted(out.items()))


def print_model_types(as_json: bool) -> int:
    types = model_types()
    if as_json:
        sys.stdout.write(json.dumps(types, indent=2) + "\n")
        return 0
    from rich.table import Table

    from searcher.terminal import console

    table = Table(
        title=f"the {len(types)} config.json model_types fitplan reads (--model FILE or a Hub id)",
        title_justify="left",
    )
    table.add_column("model_type", no_wrap=True)
    table.add_column("read")
    for t, row in types.items():
        table.add_row(t, row["read"])
    out = console()
    out.print(table)
    out.print(
        "a multimodal config (a text_config inside) is planned by its text model when that is "
        "one of these, its other towers counted from the model transformers builds "
        "(pip install '.\\[measure]'); another type: --family NAME reads it as one of these"
    )
    return 0
