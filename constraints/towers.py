"""A multimodal wrapper's other towers (vision / audio encoders and their projector): the text
model is planned, the towers are weights the step holds without running them."""

from __future__ import annotations

from typing import Any

import numpy as np

from constraints import constants as C
from constraints.config import CODE, QUANT_NAMES
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from constraints.model_spec import ModelSpec
from constraints.precision import QUANTS

#: bytes per weight of each quantisation code (ConfigBatch.quant)
QUANT_BYTES = np.array([QUANTS[q].bytes_per_weight for q in QUANT_NAMES])


def tower_bytes(spec: ModelSpec, batch: ConfigBatch) -> np.ndarray:
    """A multimodal wrapper's frozen towers, bytes: in the base's dtype; under QLoRA their Linear
    weights quantised like the text model's (transformers' bitsandbytes integration replaces every
    Linear but the output head, quantizers/base.py ``get_keys_to_not_convert``) and the rest as
    prepare_model_for_kbit_training leaves it (fp32)."""
    tower = float(spec.tower_params)
    if not tower:
        return np.zeros(len(batch))
    linear = float(spec.tower_linear_params)
    b_rest = np.where(batch.kbit_prepared, C.KBIT_PREPARED_BYTES, batch.weight_bytes)
    quantised = linear * QUANT_BYTES[batch.quant] + (tower - linear) * b_rest
    return np.where(batch.quant != CODE["quant"]["none"], quantised, tower * batch.weight_bytes)


def spec_from_wrapper(
    cfg: dict[str, Any], towers: dict[str, Any], *, id: str, name: str, **named: Any
) -> ModelSpec:
    """A wrapper's ``config.json`` (``text_config`` nested) as its text model, with ``towers``:
    ``text_type`` (where the text_config leaves its type out), ``tied`` (the head as the wrapper
    ties it), ``params``, ``linear_params``, ``lora_width`` and ``note`` of the other towers
    (counted by searcher/wrappers.py from the model transformers builds, or stored in the
    catalog)."""
    from constraints.hf_config import spec_from_hf_config

    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise FitplanError(f"{name}: a multimodal config needs its text_config as an object")
    inner = {"model_type": towers["text_type"], **text, "tie_word_embeddings": towers["tied"]}
    spec = spec_from_hf_config(inner, id=id, name=name, **named)
    outer = cfg.get("model_type", "the wrapper")
    return spec.model_copy(
        update={
            "tower_params": int(towers["params"]),
            "tower_linear_params": int(towers["linear_params"]),
            "tower_lora_width": int(towers["lora_width"]),
            "tower_note": str(towers["note"]),
            "caveats": (
                f"{outer}: the text model ({inner['model_type']}) is planned; "
                f"{int(towers['params']):,} parameters of {towers['note']} are loaded, frozen "
                "and not run (a text-only step)"
            ),
        }
    )
