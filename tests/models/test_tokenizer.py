"""The Qwen3 tokenizer encodes as the Hugging Face tokenizer of the same files does."""

import unicodedata

import pytest
from tokenizers import Tokenizer

from entrodrop.models.qwen3._model_builders import QWEN3_SPECIAL_TOKENS, qwen3_tokenizer

TEXTS = [
    "def f(x):\n    return x  # 2 spaces\r\n\n\n\tend",
    "Naïve café — 東京 🙂, don't won't I'LL",
    "<think>reason</think> answer<|endoftext|>",
    "   leading and trailing   ",
]


@pytest.fixture(scope="module")
def tiny(tiny_assets):
    d = tiny_assets / "qwen3"
    ours = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))
    return ours, Tokenizer.from_file(str(d / "tokenizer.json")), d


def test_matches_hugging_face_on_real_text(tiny):
    ours, reference, d = tiny
    texts = TEXTS + [(d.parent / "sample.txt").read_text(encoding="utf-8")]
    for text in texts:
        ids = ours.encode(text, add_bos=False, add_eos=False)
        assert ids == reference.encode(text).ids, text[:40]
        assert ours.decode(ids) == unicodedata.normalize("NFC", text)


def test_documents_end_with_endoftext(tiny):
    ours, reference, _ = tiny
    ids = ours.encode("x = 1", add_bos=True, add_eos=True)
    assert ids[-1] == reference.token_to_id("<|endoftext|>")
    assert ids[:-1] == reference.encode("x = 1").ids


def test_real_qwen3_special_token_ids(tiny):
    _, _, d = tiny
    real = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"))
    assert real.encode("<think>", add_bos=False, add_eos=False) == [151667]
    assert real.eos_id == 151643 and real.pad_id == 151643
    assert min(QWEN3_SPECIAL_TOKENS.values()) == 151643 and max(QWEN3_SPECIAL_TOKENS.values()) == 151668
