#!/usr/bin/env python
"""The model types transformers builds with a supported family's structure: the data file
``constraints/data/structure_families.json``, so that a base install (no torch) reads them too.

For every causal-LM ``model_type`` in ``transformers.CONFIG_MAPPING`` that fitplan has no parser
for, its default config is read the way ``--model config.json`` is with torch installed
(``searcher.hub.read_by_structure``: the model and each family's reference built on the meta
device, the structure compared, the family's parser's count checked against transformers'
within 0.5 %). Each type read is written with its family, the class transformers builds, the
parameter count of its default config and the transformers version.

Usage:  nice -n 10 python tools/structure_families.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "constraints" / "data" / "structure_families.json"


def main() -> int:
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from constraints.model_spec import SUPPORTED_TYPES
    from constraints.params import total_params
    from searcher.hub import _structure, read_by_structure

    warnings.filterwarnings("ignore")
    types = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        if model_type in SUPPORTED_TYPES or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            continue
        try:
            cfg = AutoConfig.for_model(model_type).to_dict()
        except Exception:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.json"
            path.write_text(json.dumps(cfg))
            try:
                spec = read_by_structure(str(path))
            except Exception:
                spec = None
            if spec is None:
                continue
            _sig, counted, model_class = _structure(model_type, cfg)
        types[model_type] = {
            "family": spec.family,
            "model_class": model_class,
            "default_config_params": counted,
            "fitplan_params": total_params(spec),
        }
        print(f"{model_type}: {spec.family} ({model_class}, {counted:,})")
    doc = {
        "_doc": "Model types transformers builds with a supported family's structure, read as that "
        "family (constraints/hf_config_aliases.py). Written by tools/structure_families.py: each "
        "type's default config and each family's built on the meta device, the structures "
        "compared, the family's parameter count checked against transformers' within 0.5 %.",
        "transformers_version": transformers.__version__,
        "types": types,
    }
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: {len(types)} types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
