"""Qwen3 models with the hyper-parameters of their published ``config.json``, and the tokenizer."""

from typing import Dict, Optional

from torchtune.models.qwen2._tokenizer import ENDOFTEXT
from torchtune.models.qwen2_5._tokenizer import QWEN2_5_SPECIAL_TOKENS, Qwen2_5Tokenizer
from torchtune.modules import TransformerDecoder
from torchtune.modules.transforms.tokenizers import parse_hf_tokenizer_json

from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.shapes import QWEN3_0_6B, QWEN3_1_7B

# Qwen3 adds these to the Qwen2.5 special tokens (ids from Qwen3's tokenizer_config.json).
QWEN3_SPECIAL_TOKENS: Dict[str, int] = {
    **QWEN2_5_SPECIAL_TOKENS,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}


def qwen3_0_6b() -> TransformerDecoder:
    """Qwen3-0.6B with the hyper-parameters of its published ``config.json``."""
    return qwen3(**QWEN3_0_6B)


def qwen3_1_7b() -> TransformerDecoder:
    """Qwen3-1.7B with the hyper-parameters of its published ``config.json``."""
    return qwen3(**QWEN3_1_7B)


def qwen3_tokenizer(
    path: str,
    merges_file: str,
    special_tokens_path: Optional[str] = None,
    max_seq_len: Optional[int] = None,
    eos_token: str = ENDOFTEXT,
) -> Qwen2_5Tokenizer:
    """The Qwen3 tokenizer: Qwen2.5's byte-level BPE with Qwen3's special tokens.

    Args:
        path (str): ``vocab.json``.
        merges_file (str): ``merges.txt``.
        special_tokens_path (Optional[str]): a Hugging Face ``tokenizer.json`` whose
            ``added_tokens`` give the special tokens; Qwen3's own ids if None.
        max_seq_len (Optional[int]): truncate encoded messages to this length.
        eos_token (str): the token ``encode(..., add_eos=True)`` appends. Continual pre-training
            ends each document with ``<|endoftext|>``, the separator Qwen3 was pretrained with;
            chat fine-tuning would use ``<|im_end|>``.

    Returns:
        Qwen2_5Tokenizer: the tokenizer.
    """
    special_tokens = (
        QWEN3_SPECIAL_TOKENS
        if special_tokens_path is None
        else parse_hf_tokenizer_json(special_tokens_path)
    )
    return Qwen2_5Tokenizer(
        path=path,
        merges_file=merges_file,
        special_tokens=special_tokens,
        max_seq_len=max_seq_len,
        eos_token=eos_token,
    )
