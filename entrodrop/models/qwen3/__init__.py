"""Qwen3 for torchtune 0.6.1, which ships Qwen2 and Qwen2.5 but not Qwen3."""

from entrodrop.models.qwen3._component_builders import HeadNormLinear, qwen3
from entrodrop.models.qwen3._convert_weights import qwen3_hf_to_tune, qwen3_tune_to_hf
from entrodrop.models.qwen3._model_builders import (
    QWEN3_SPECIAL_TOKENS,
    qwen3_0_6b,
    qwen3_1_7b,
    qwen3_tokenizer,
)

__all__ = [
    "QWEN3_SPECIAL_TOKENS",
    "HeadNormLinear",
    "qwen3",
    "qwen3_0_6b",
    "qwen3_1_7b",
    "qwen3_hf_to_tune",
    "qwen3_tokenizer",
    "qwen3_tune_to_hf",
]
