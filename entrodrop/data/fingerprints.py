"""Fingerprints: short content hashes of what a store was computed from, and the keys made of them.

A fingerprint is the first 16 hex digits of a sha256: of a file (a corpus, a tokenizer file), of
a checkpoint (its ``config.json`` and a sample of each weight file's bytes), of a tokenizer (its
builder arguments, each file replaced by its content hash). A store's key (``KEY_FIELDS`` of
``entrodrop.data.sample_store``) holds the fingerprints of the model, tokenizer and corpus it was
computed from, and ``max_seq_len``; its manifest records it, and a store of another key is refused.
A token store's key also holds its tokenizer's ``vocabulary`` fingerprint, which a training run
compares with its own tokenizer's (``entrodrop.data.store_identity``).
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Iterable, Sequence

from entrodrop.data.sample_store import SampleStore

_SAMPLED_BYTES = 1 << 20


def _sha(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:16]


def fingerprint_file(path: Path, sampled: bool = False) -> str:
    """sha256 of a file; with ``sampled``, of its size and three 1 MiB windows (start,
    middle, end), which tells apart checkpoints of many GB in milliseconds."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if not sampled or size <= 3 * _SAMPLED_BYTES:
            return _sha(iter(lambda: f.read(_SAMPLED_BYTES), b""))  # streamed: corpora can be large
        parts = [str(size).encode()]
        for start in (0, size // 2, size - _SAMPLED_BYTES):
            f.seek(start)
            parts.append(f.read(_SAMPLED_BYTES))
        return _sha(parts)


def fingerprint_checkpoint(checkpoint_dir: str, weight_files: Sequence[str]) -> str:
    """The checkpoint's ``config.json`` and a sample of each weight file's bytes."""
    root = Path(checkpoint_dir)
    parts = [fingerprint_file(root / "config.json")]
    parts += [f"{name}:{fingerprint_file(root / name, sampled=True)}" for name in sorted(weight_files)]
    return _sha(["\n".join(parts).encode()])


def fingerprint_tokenizer(tokenizer_cfg: Dict[str, Any]) -> str:
    """The tokenizer's builder and arguments, with each file argument replaced by its
    content hash, so moving the files keeps the fingerprint and editing them changes it."""
    parts = []
    for key, value in sorted(tokenizer_cfg.items()):
        if isinstance(value, str) and Path(value).is_file():
            value = fingerprint_file(Path(value))
        parts.append(f"{key}={value}")
    return _sha(["\n".join(parts).encode()])


# Tokenizer arguments that do not change which token an id names: how ``tokenize_messages``
# frames and cuts a conversation (a store's own cut is its key's ``max_seq_len``). A training
# config names the tokenizer of its stores for lm-eval, often with another max_seq_len; every
# other argument (the builder, its files, the special tokens) is the vocabulary, and counts.
NON_VOCABULARY_KEYS = ("max_seq_len", "prompt_template", "truncation_type")


def fingerprint_vocabulary(tokenizer_cfg: Dict[str, Any]) -> str:
    """``fingerprint_tokenizer`` of the arguments that decide which token each id names: the same
    for a tokenize config and a training config that name one tokenizer with another
    ``max_seq_len`` (``NON_VOCABULARY_KEYS``)."""
    return fingerprint_tokenizer({k: v for k, v in tokenizer_cfg.items() if k not in NON_VOCABULARY_KEYS})


def store_key(tokenizer_cfg: Dict[str, Any], source: Dict[str, Any], max_seq_len: int) -> Dict[str, Any]:
    """The key of a token store written from ``source`` (``entrodrop.data.store_plans``: where the rows
    come from, the data's fingerprint, their selection, rendering and long-sample rule)."""
    return {"model": None, "tokenizer": fingerprint_tokenizer(tokenizer_cfg),
            "corpus": _sha([json.dumps(source, sort_keys=True, default=str).encode()]), "max_seq_len": max_seq_len,
            "vocabulary": fingerprint_vocabulary(tokenizer_cfg)}


def entropy_cache_key(tokens: SampleStore, checkpoint_dir: str, weight_files: Sequence[str]) -> Dict[str, Any]:
    """The key of the entropy cache of a token store's samples under a checkpoint: the store's
    key (tokenizer, corpus, max_seq_len) with the model filled in."""
    return {**tokens.key, "model": fingerprint_checkpoint(checkpoint_dir, weight_files)}
