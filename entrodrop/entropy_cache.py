"""The on-disk entropy cache: written once by the precompute, memory-mapped by training.

Layout of a cache directory::

    manifest.json        what the cache was computed from (fingerprints of the model
                         checkpoint, tokenizer and corpus, max_seq_len), the shard size,
                         and "complete": true once every shard is in place
    samples.npy          per sample: token count and 64-bit hash of its token ids
    shard-00000/entropy.npy
                         fp16 entropies of the shard's samples, concatenated (2 bytes a
                         token; NaN for a sample's first token, which has no context)

A shard directory is built under a temporary name and renamed into place when whole, so a
killed precompute never leaves a shard a reader could take for complete; the next run
keeps the finished shards and computes the rest. Readers refuse a cache whose manifest is
not complete.
"""

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from entrodrop.corpus import token_hash

CACHE_VERSION = 1
MANIFEST = "manifest.json"
SAMPLES = "samples.npy"
SAMPLE_DTYPE = np.dtype([("length", "<i4"), ("token_hash", "<u8")])
KEY_FIELDS = ("model", "tokenizer", "corpus", "max_seq_len")
_SAMPLED_BYTES = 1 << 20


class CacheMismatchError(ValueError):
    """A cache that was not computed from the model, tokenizer, corpus or length in use."""


# ---------------------------------------------------------------------------- fingerprints


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:16]


def fingerprint_file(path: Path, sampled: bool = False) -> str:
    """sha256 of a file; with ``sampled``, of its size and three 1 MiB windows (start,
    middle, end), which tells apart checkpoints of many GB in milliseconds."""
    size = path.stat().st_size
    if not sampled or size <= 3 * _SAMPLED_BYTES:
        return _sha(path.read_bytes())
    parts = [str(size).encode()]
    with path.open("rb") as f:
        for start in (0, size // 2, size - _SAMPLED_BYTES):
            f.seek(start)
            parts.append(f.read(_SAMPLED_BYTES))
    return _sha(*parts)


def fingerprint_checkpoint(checkpoint_dir: str, weight_files: Sequence[str]) -> str:
    """The checkpoint's ``config.json`` and a sample of each weight file's bytes."""
    root = Path(checkpoint_dir)
    parts = [fingerprint_file(root / "config.json")]
    parts += [f"{name}:{fingerprint_file(root / name, sampled=True)}" for name in sorted(weight_files)]
    return _sha("\n".join(parts).encode())


def fingerprint_tokenizer(tokenizer_cfg: Dict[str, Any]) -> str:
    """The tokenizer's builder and arguments, with each file argument replaced by its
    content hash, so moving the files keeps the fingerprint and editing them changes it."""
    parts = []
    for key, value in sorted(tokenizer_cfg.items()):
        if isinstance(value, str) and Path(value).is_file():
            value = fingerprint_file(Path(value))
        parts.append(f"{key}={value}")
    return _sha("\n".join(parts).encode())


def fingerprint_corpus(path: str, text_field: str) -> str:
    """The corpus file's bytes and the field read from it."""
    return _sha(fingerprint_file(Path(path)).encode(), text_field.encode())


def cache_key(checkpoint_dir: str, weight_files: Sequence[str], tokenizer_cfg: Dict[str, Any],
              corpus_path: str, text_field: str, max_seq_len: int) -> Dict[str, Any]:
    """What a cache is computed from; a cache is valid only for the same key."""
    return {
        "model": fingerprint_checkpoint(checkpoint_dir, weight_files),
        "tokenizer": fingerprint_tokenizer(tokenizer_cfg),
        "corpus": fingerprint_corpus(corpus_path, text_field),
        "max_seq_len": max_seq_len,
    }


def sample_table(samples: Sequence[Sequence[int]]) -> np.ndarray:
    """Each sample's token count and token hash, in ``SAMPLE_DTYPE``."""
    table = np.zeros(len(samples), dtype=SAMPLE_DTYPE)
    table["length"] = [len(s) for s in samples]
    table["token_hash"] = [token_hash(s) for s in samples]
    return table


# ---------------------------------------------------------------------------- checks


def _first_differing_sample(cached: np.ndarray, current: np.ndarray) -> Optional[str]:
    for i in range(min(len(cached), len(current))):
        if cached[i]["length"] != current[i]["length"]:
            return f"sample {i}: {cached[i]['length']} tokens in the cache, {current[i]['length']} now"
        if cached[i]["token_hash"] != current[i]["token_hash"]:
            return f"sample {i}: same length ({current[i]['length']}), different token ids"
    if len(cached) != len(current):
        i = min(len(cached), len(current))
        return f"sample {i}: the cache has {len(cached)} samples, the corpus has {len(current)}"
    return None


def mismatches(key: Dict[str, Any], table: np.ndarray, cached_key: Dict[str, Any], cached_table: np.ndarray) -> List[str]:
    """Everything that differs between a cache and what it is checked against."""
    problems = [
        f"{field}: cache has {cached_key[field]}, now {key[field]}"
        for field in KEY_FIELDS
        if cached_key[field] != key[field]
    ]
    first = _first_differing_sample(cached_table, table)
    if first:
        problems.append(f"first sample that differs: {first}")
    elif problems and table.size:
        problems.append("every sample's entropies depend on what differs, from sample 0")
    return problems


def _raise_if(problems: List[str], what: str) -> None:
    if problems:
        raise CacheMismatchError(what + ":\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------- writing


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _shard_name(shard: int) -> str:
    return f"shard-{shard:05d}"


class EntropyCacheWriter:
    """Creates a cache directory, or resumes one a killed run left, and fills it shard by shard.

    Args:
        cache_dir (str): the cache directory.
        key (Dict[str, Any]): ``model``, ``tokenizer``, ``corpus`` fingerprints and ``max_seq_len``.
        table (np.ndarray): ``sample_table`` of the samples to compute.
        samples_per_shard (int): samples in each shard file.
        create (bool): write the manifest (one process does; the others pass False and
            read what it wrote, after a barrier).

    Raises:
        CacheMismatchError: ``cache_dir`` holds a cache, whole or partial, of something else.
            It is left untouched.
    """

    def __init__(self, cache_dir: str, key: Dict[str, Any], table: np.ndarray,
                 samples_per_shard: int, create: bool) -> None:
        self.dir = Path(cache_dir)
        self.table = table
        self.samples_per_shard = samples_per_shard
        self.num_shards = max(1, -(-len(table) // samples_per_shard))
        manifest_path = self.dir / MANIFEST
        if manifest_path.exists():
            manifest = json.loads(manifest_path.read_text())
            problems = mismatches(key, table, manifest["key"], np.load(self.dir / SAMPLES))
            if manifest["samples_per_shard"] != samples_per_shard:
                problems.append(f"samples_per_shard: cache has {manifest['samples_per_shard']}, now {samples_per_shard}")
            _raise_if(problems, f"{self.dir} already holds an entropy cache of something else "
                      "(delete it or choose another cache_dir)")
        elif create:
            self.dir.mkdir(parents=True, exist_ok=True)
            np.save(self.dir / SAMPLES, table)
            _write_json_atomic(manifest_path, self._manifest(key, complete=False))
        if create:  # leftovers of a run killed mid-shard
            for tmp in self.dir.glob(".shard-*.tmp-*"):
                shutil.rmtree(tmp)
        self.key = key

    def _manifest(self, key: Dict[str, Any], complete: bool) -> dict:
        return {
            "version": CACHE_VERSION,
            "key": key,
            "num_samples": len(self.table),
            "num_tokens": int(self.table["length"].sum()),
            "samples_per_shard": self.samples_per_shard,
            "num_shards": self.num_shards,
            "dtype": "float16",
            "complete": complete,
        }

    def pending_shards(self) -> List[int]:
        """Shards not yet on disk, in order."""
        return [s for s in range(self.num_shards) if not (self.dir / _shard_name(s)).exists()]

    def shard_samples(self, shard: int) -> range:
        start = shard * self.samples_per_shard
        return range(start, min(start + self.samples_per_shard, len(self.table)))

    def write_shard(self, shard: int, entropies: List[np.ndarray]) -> None:
        """Write one shard's per-sample entropies (in sample order), atomically."""
        rows = self.table[self.shard_samples(shard).start : self.shard_samples(shard).stop]
        lengths = [len(e) for e in entropies]
        if lengths != rows["length"].tolist():
            raise ValueError(f"shard {shard}: entropies of lengths {lengths[:8]}... do not match the samples")
        flat = np.concatenate(entropies).astype(np.float16) if entropies else np.zeros(0, np.float16)
        tmp = Path(tempfile.mkdtemp(prefix=f".{_shard_name(shard)}.tmp-", dir=self.dir))
        np.save(tmp / "entropy.npy", flat)
        os.replace(tmp, self.dir / _shard_name(shard))

    def finalize(self) -> None:
        """Mark the cache complete; every shard must be on disk."""
        missing = self.pending_shards()
        if missing:
            raise RuntimeError(f"cannot finalize {self.dir}: shards {missing[:8]} are missing")
        _write_json_atomic(self.dir / MANIFEST, self._manifest(self.key, complete=True))


# ---------------------------------------------------------------------------- reading


class EntropyCache:
    """A complete cache, memory-mapped: ``cache[i]`` is sample ``i``'s fp16 entropies.

    Raises:
        FileNotFoundError: no cache at ``cache_dir``.
        CacheMismatchError: the cache is incomplete (a precompute that did not finish).
    """

    def __init__(self, cache_dir: str) -> None:
        self.dir = Path(cache_dir)
        manifest_path = self.dir / MANIFEST
        if not manifest_path.exists():
            raise FileNotFoundError(
                f"no entropy cache at {cache_dir} ({MANIFEST} missing): run recipes/precompute_entropy.py"
            )
        self.manifest = json.loads(manifest_path.read_text())
        if not self.manifest["complete"]:
            raise CacheMismatchError(
                f"the entropy cache at {cache_dir} is incomplete: rerun the precompute to finish it"
            )
        self.key = self.manifest["key"]
        self.table = np.load(self.dir / SAMPLES)
        per_shard = self.manifest["samples_per_shard"]
        # Offset of each sample within its shard's flat array.
        lengths = self.table["length"].astype(np.int64)
        self._offsets = np.zeros(len(lengths), dtype=np.int64)
        for start in range(0, len(lengths), per_shard):
            block = lengths[start : start + per_shard]
            self._offsets[start : start + len(block)] = np.cumsum(block) - block
        self._per_shard = per_shard
        self._shards: Dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.table)

    def _shard(self, shard: int) -> np.ndarray:
        if shard not in self._shards:
            self._shards[shard] = np.load(self.dir / _shard_name(shard) / "entropy.npy", mmap_mode="r")
        return self._shards[shard]

    def __getitem__(self, i: int) -> np.ndarray:
        start = self._offsets[i]
        return self._shard(i // self._per_shard)[start : start + self.table[i]["length"]]

    def check_sample(self, i: int, ids: Sequence[int]) -> None:
        """Raise if sample ``i``'s token ids are not the ones its entropies were computed on."""
        row = self.table[i]
        if row["length"] != len(ids) or row["token_hash"] != token_hash(ids):
            raise CacheMismatchError(
                f"entropy cache {self.dir}, sample {i}: cached for {row['length']} tokens with hash "
                f"{row['token_hash']:016x}, but the loader has {len(ids)} tokens with hash "
                f"{token_hash(ids):016x}; was the corpus, tokenizer or max_seq_len changed? "
                "Check with recipes/verify_entropy_cache.py"
            )

    def verify(self, key: Dict[str, Any], table: np.ndarray) -> None:
        """Raise one error naming everything that differs and the first sample where it does."""
        _raise_if(mismatches(key, table, self.key, self.table),
                  f"the entropy cache at {self.dir} does not match")
