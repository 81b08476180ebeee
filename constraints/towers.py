"""A multimodal wrapper's other towers (vision / audio encoders and their projector): the text
model is planned, the towers are weights the step holds without running them."""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.config import CODE, QUANT_NAMES
from constraints.config_batch import ConfigBatch
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
