"""Sharded, memory-mapped per-sample arrays on disk: the entropy cache and the token stores.

Two kinds share one layout: the entropy cache (``entropy``, fp16, 2 bytes a token, written by
recipes/precompute_entropy.py) and a token store (``tokens``, int32, a pre-tokenized corpus
written by recipes/tokenize_corpus.py, so training never tokenizes). A store directory::

    manifest.json        what the store was computed from (fingerprints of the model
                         checkpoint, tokenizer and corpus, max_seq_len), its kind, the shard
                         size, and "complete": true once every shard is in place, with the
                         size of every file below ("file_sizes")
    samples.npy          per sample: token count and 64-bit hash of its token ids
                         (written when the store is completed)
    shard-00000/         <kind>.npy, the shard's samples concatenated (NaN entropy for a
                         sample's first token, which has no context), and samples.npy, the
                         shard's rows of the table

A shard directory is built under a temporary name and renamed into place when whole, so a
killed run never leaves a shard a reader could take for complete; the next run keeps the
finished shards and computes the rest. Readers refuse a store that is not complete, or one
with a file missing or not of its recorded size (``check_store_files``, before any compute);
the same command that wrote the store writes those shards again.

A manifest says what a store was written with, not what its files hold now: a token id edited
in a shard keeps the manifest. ``SampleStore.check_tokens`` reads a token store back, hashes
every sample and names the shard file and first sample that differ from the table.
"""

import hashlib
import io
import json
import math
import os
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from entrodrop.data.corpus import token_hash, token_hashes
from entrodrop.errors import CacheMismatchError, MissingFileError, naming_full_disk
from entrodrop.storage.files import temp_dir

STORE_VERSION = 1
MANIFEST = "manifest.json"
SAMPLES = "samples.npy"
SAMPLE_DTYPE = np.dtype([("length", "<i4"), ("token_hash", "<u8")])
KEY_FIELDS = ("model", "tokenizer", "corpus", "max_seq_len")
# kind -> (what users call it, dtype on disk, the recipe that writes it)
KINDS = {
    "entropy": ("entropy cache", np.float16, "recipes/precompute_entropy.py"),
    "tokens": ("token store", np.int32, "recipes/tokenize_corpus.py"),
}
_MAX_OPEN_FILES = 64
# Nats an entropy may stray outside [0, ln V]: fp16 rounds ln V of a 256k vocabulary (12.45) by up
# to 2^-8, and the fp32 sum by less; a value a bug or an overwrite left (inf, 60000) is far outside.
ENTROPY_TOLERANCE = 0.02
_HASH_BLOCK_TOKENS = 1 << 20  # read while hashing a shard: 4 MiB of int32, 8 MiB as int64
_MAX_SHARDS_NAMED = 5
_MAX_FILES_NAMED = 10
# kind -> what to do about a missing or cut file: the command that wrote the store, run again
# (its writer takes such a shard for pending, SampleStoreWriter.pending_shards).
_REWRITE = {
    "entropy": "re-run recipes/precompute_entropy.py with the same config (the same cache_dir): it writes these "
               "files again, computing only their shards, and keeps the others",
    "tokens": "re-run recipes/tokenize_corpus.py with the same config: it tokenizes the corpus again and writes "
              "these files again, keeping the others (tokenizing is deterministic: an entropy cache of this store "
              "still fits; recipes/verify_entropy_cache.py checks)",
}



# ---------------------------------------------------------------------------- manifests and tables


def source_differences(old: Optional[Dict[str, Any]], new: Optional[Dict[str, Any]]) -> List[str]:
    """The fields of two stores' recorded sources that differ, as ``source.<field>: store has A, now B``."""
    old, new = old or {}, new or {}
    return [f"source.{k}: store has {old.get(k, '<absent>')!r}, now {new.get(k, '<absent>')!r}"
            for k in sorted(set(old) | set(new)) if old.get(k, "<absent>") != new.get(k, "<absent>")]


def _refuse_other_store(store_dir: Path, old: Dict[str, Any], expected: Dict[str, Any]) -> None:
    """Raise if the manifest ``old`` is not of the store ``expected`` describes (a manifest, or the
    part of one known so far): each differing field named, and the recorded sources' fields."""
    problems = [f"{f}: store has {old[f]}, now {expected[f]}" for f in ("kind", "num_samples", "samples_per_shard")
                if f in expected and old[f] != expected[f]]
    problems += [f"{f}: store has {old['key'][f]}, now {expected['key'][f]}" for f in KEY_FIELDS
                 if old["key"][f] != expected["key"][f]]
    if problems:
        problems += source_differences(old.get("source"), expected.get("source"))
    _raise_if(problems, f"{store_dir} already holds another {KINDS[old['kind']][0]} (delete it or choose another "
              "directory)")


def store_complete(store_dir: str, kind: str, key: Dict[str, Any], source: Optional[Dict[str, Any]] = None) -> bool:
    """Whether ``store_dir`` holds this store complete and whole (False: nothing yet, the same
    store unfinished, or finished with a file since missing or cut, which the writer writes
    again). Checked before any work, so a directory that holds another store is refused
    before anything is computed for it.

    Raises:
        CacheMismatchError: ``store_dir`` holds a store of something else (named field by field).
    """
    manifest_path = Path(store_dir) / MANIFEST
    if not manifest_path.exists():
        return False
    old = json.loads(manifest_path.read_text())
    _refuse_other_store(Path(store_dir), old, {"kind": kind, "key": key, "source": source})
    return old["complete"] and not store_file_problems(Path(store_dir), old)


def sample_table(samples: Sequence[Sequence[int]]) -> np.ndarray:
    """Each sample's token count and token hash, in ``SAMPLE_DTYPE``."""
    table = np.zeros(len(samples), dtype=SAMPLE_DTYPE)
    table["length"] = [len(s) for s in samples]
    table["token_hash"] = [token_hash(s) for s in samples]
    return table


# ---------------------------------------------------------------------------- checks


def _shard_files(kind: str, shard: int) -> List[str]:
    """A shard's files, relative to the store directory."""
    return [f"{_shard_name(shard)}/{kind}.npy", f"{_shard_name(shard)}/{SAMPLES}"]


def _store_files(kind: str, num_shards: int) -> List[str]:
    """Every file of a complete store, relative to its directory: the table, then shard by shard."""
    return [SAMPLES] + [name for shard in range(num_shards) for name in _shard_files(kind, shard)]


def _file_problem(path: Path, size: Optional[int]) -> Optional[str]:
    """What is wrong with a file a manifest names: missing, or not of the ``size`` it was written
    with. ``size`` None: not recorded (a store not finished yet, or finished before sizes were
    recorded), so only that the file exists is checked, and such stores still open."""
    if not path.is_file():
        return f"{path}: missing" + (f" (written with {size} bytes)" if size is not None else "")
    have = path.stat().st_size
    return f"{path}: {have} bytes, written with {size}" if size is not None and have != size else None


def shard_whole(store_dir: Path, kind: str, shard: int, sizes: Dict[str, int]) -> bool:
    """Whether every file of ``shard`` is on disk, at its size where ``sizes`` records one."""
    return not any(_file_problem(store_dir / name, sizes.get(name)) for name in _shard_files(kind, shard))


def store_file_problems(store_dir: Path, manifest: Dict[str, Any]) -> List[str]:
    """Each file the complete store ``manifest`` describes that is missing or not of its recorded
    size, one line each (a ``stat`` a file: milliseconds for thousands of shards)."""
    sizes = manifest.get("file_sizes", {})
    return [problem for name in _store_files(manifest["kind"], manifest["num_shards"])
            if (problem := _file_problem(store_dir / name, sizes.get(name)))]


def check_store_files(store_dir: Path, manifest: Dict[str, Any]) -> None:
    """Raise unless every file the complete store ``manifest`` describes is on disk at the size it
    was written with. Every reader opens a store through this (``SampleStore``), so verify,
    training, evaluation and the precompute all stop here, before any compute: a deleted shard
    file would otherwise open fine and end a run at the first batch that read it, a cut one read short.

    Raises:
        MissingFileError: names each such file (the first ``_MAX_FILES_NAMED``), its recorded
            size, and the command that writes it again.
    """
    problems = store_file_problems(store_dir, manifest)
    if problems:
        more = [f"and {len(problems) - _MAX_FILES_NAMED} more"] if len(problems) > _MAX_FILES_NAMED else []
        raise MissingFileError(
            f"the {KINDS[manifest['kind']][0]} at {store_dir} is missing files its manifest names, or has them at "
            "another size than written:\n  " + "\n  ".join(problems[:_MAX_FILES_NAMED] + more)
            + f"\nFix: {_REWRITE[manifest['kind']]}")


def _first_differing_sample(cached: np.ndarray, current: np.ndarray) -> Optional[str]:
    n = min(len(cached), len(current))
    differs = (cached["length"][:n] != current["length"][:n]) | (cached["token_hash"][:n] != current["token_hash"][:n])
    if differs.any():
        i = int(np.argmax(differs))
        if cached[i]["length"] != current[i]["length"]:
            return f"sample {i}: {cached[i]['length']} tokens in the cache, {current[i]['length']} now"
        return f"sample {i}: same length ({current[i]['length']}), different token ids"
    if len(cached) != len(current):
        return f"sample {n}: the cache has {len(cached)} samples, the corpus has {len(current)}"
    return None


def mismatches(key: Dict[str, Any], table: np.ndarray, cached_key: Dict[str, Any], cached_table: np.ndarray,
               fields: Sequence[str] = KEY_FIELDS) -> List[str]:
    """Everything that differs between a store and what it is checked against."""
    problems = [
        f"{field}: cache has {cached_key[field]}, now {key[field]}"
        for field in fields
        if cached_key[field] != key[field]
    ]
    first = _first_differing_sample(cached_table, table)
    if first:
        problems.append(f"first sample that differs: {first}")
    elif problems and table.size:
        problems.append("every sample's entropies depend on what differs, from sample 0")
    return problems


def _raise_if(problems: List[str], what: str, fix: str = "") -> None:
    if problems:
        raise CacheMismatchError(what + ":\n  " + "\n  ".join(problems) + (f"\n{fix}" if fix else ""))


# ---------------------------------------------------------------------------- writing


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with naming_full_disk(path):
        try:
            tmp.write_text(json.dumps(data, indent=2))
        except BaseException:
            tmp.unlink(missing_ok=True)  # a part written; the old file stays whole
            raise
        os.replace(tmp, path)


def _shard_name(shard: int) -> str:
    return f"shard-{shard:05d}"


def shards_written(store_dir: str) -> Optional[Tuple[int, int, bool]]:
    """(shards on disk, shards in all, complete) of the store begun in ``store_dir``; None where
    none was begun (no manifest). What a run stopped part way leaves, for the line it prints: a
    shard counts when its files are all there, at their recorded sizes (``shard_whole``)."""
    manifest_path = Path(store_dir) / MANIFEST
    if not manifest_path.exists():
        return None
    manifest = json.loads(manifest_path.read_text())
    sizes = manifest.get("file_sizes", {})
    done = sum(shard_whole(Path(store_dir), manifest["kind"], s, sizes) for s in range(manifest["num_shards"]))
    return done, manifest["num_shards"], manifest["complete"]


class SampleStoreWriter:
    """Creates a store directory, or resumes one a killed run left, and fills it shard by shard.

    Args:
        store_dir (str): the store directory.
        kind (str): ``entropy`` or ``tokens``.
        key (Dict[str, Any]): ``model``, ``tokenizer``, ``corpus`` fingerprints and ``max_seq_len``.
        source (Dict[str, Any]): for a token store, what it was written from, in words
            (``entrodrop.data.store_plans``); recorded in the manifest, named when a store differs.
        num_samples (int): samples in the corpus.
        samples_per_shard (int): samples in each shard.
        create (bool): write the manifest (one process does; the others pass False and
            read what it wrote, after a barrier).

    Raises:
        CacheMismatchError: ``store_dir`` holds a store, whole or partial, of something else.
            It is left untouched.
    """

    def __init__(self, store_dir: str, kind: str, key: Dict[str, Any], num_samples: int,
                 samples_per_shard: int, create: bool, source: Optional[Dict[str, Any]] = None) -> None:
        self.dir = Path(store_dir)
        self.kind = kind
        self.key = key
        self.source = source
        self.num_samples = num_samples
        self.samples_per_shard = samples_per_shard
        self.num_shards = max(1, -(-num_samples // samples_per_shard))
        manifest_path = self.dir / MANIFEST
        self._sizes: Dict[str, int] = {}  # each file's size, where a finished store recorded it
        if manifest_path.exists():
            old = json.loads(manifest_path.read_text())
            _refuse_other_store(self.dir, old, self._manifest(complete=False))
            self._sizes = old.get("file_sizes", {})
        elif create:
            self.dir.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(manifest_path, self._manifest(complete=False))
        if create:  # leftovers of a run killed mid-shard
            for tmp in self.dir.glob(".shard-*.tmp-*"):
                shutil.rmtree(tmp)

    def _manifest(self, complete: bool) -> dict:
        return {
            "version": STORE_VERSION,
            "kind": self.kind,
            "dtype": np.dtype(KINDS[self.kind][1]).name,
            "key": self.key,
            "num_samples": self.num_samples,
            "samples_per_shard": self.samples_per_shard,
            "num_shards": self.num_shards,
            "complete": complete,
            **({"source": self.source} if self.source is not None else {}),
        }

    def pending_shards(self) -> List[int]:
        """Shards not on disk whole, in order: not written yet, or, in a store resumed after it
        was finished, with a file since deleted or cut (``_file_problem``). Every process lists
        the same ones: the files and the manifest are not touched until the first shard is written."""
        return [s for s in range(self.num_shards) if not shard_whole(self.dir, self.kind, s, self._sizes)]

    def shard_samples(self, shard: int) -> range:
        start = shard * self.samples_per_shard
        return range(start, min(start + self.samples_per_shard, self.num_samples))

    def write_shard(self, shard: int, values: List[np.ndarray], table: np.ndarray) -> None:
        """Write one shard atomically: each sample's values, in sample order, and its table rows
        (``sample_table`` of the shard's token ids)."""
        lengths = [len(v) for v in values]
        if len(values) != len(self.shard_samples(shard)) or lengths != table["length"].tolist():
            raise ValueError(f"shard {shard}: {len(values)} samples of lengths {lengths[:8]}... do not "
                             f"match the shard's {len(self.shard_samples(shard))} samples")
        dtype = KINDS[self.kind][1]
        flat = np.concatenate(values).astype(dtype) if values else np.zeros(0, dtype)
        with naming_full_disk(self.dir / _shard_name(shard)):
            tmp = temp_dir(self.dir, f".{_shard_name(shard)}.tmp-")  # the user's umask, not mkdtemp's 0700
            try:
                np.save(tmp / f"{self.kind}.npy", flat)
                np.save(tmp / SAMPLES, table)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)  # the room it took back at once (a rerun would remove it too)
                raise
        if (self.dir / _shard_name(shard)).exists():  # a shard with a file missing or cut: written again whole
            shutil.rmtree(self.dir / _shard_name(shard))
        os.replace(tmp, self.dir / _shard_name(shard))

    def finalize(self) -> None:
        """Gather the shards' tables and mark the store complete; every shard must be on disk."""
        missing = self.pending_shards()
        if missing:
            raise RuntimeError(f"cannot finalize {self.dir}: shards {missing[:8]} are missing")
        table = np.concatenate([np.load(self.dir / _shard_name(s) / SAMPLES) for s in range(self.num_shards)])
        with naming_full_disk(self.dir / SAMPLES):  # read only once the manifest says complete, written after
            np.save(self.dir / SAMPLES, table)
        sizes = {name: (self.dir / name).stat().st_size for name in _store_files(self.kind, self.num_shards)}
        manifest = {**self._manifest(complete=True), "num_tokens": int(table["length"].sum()), "file_sizes": sizes}
        _write_json_atomic(self.dir / MANIFEST, manifest)


# ---------------------------------------------------------------------------- reading


def table_digest(raw: bytes) -> str:
    """The first 16 hex digits of the sha256 of a store's ``samples.npy`` bytes: each sample's length
    and token hash, so it tells two stores' token ids apart."""
    return hashlib.sha256(raw).hexdigest()[:16]


def _data_offset(path: Path, dtype: np.dtype) -> int:
    """Where the values start in a ``.npy`` shard file, after checking that they are ``dtype``."""
    with path.open("rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, found = read_header(f)
        if found != dtype:
            raise CacheMismatchError(f"{path} holds {found}, expected {dtype}")
        return f.tell()


class SampleStore:
    """A complete store: ``store[i]`` is sample ``i``'s values, read from its shard on demand.

    Only the sample table is held in memory. A sample is read with one ``pread`` of exactly
    its bytes rather than through ``mmap``: on this kernel a memory-mapped read maps whole
    page-cache folios around each sample into the process, and random access over a 100M-token
    store grew the resident set by ~570 MB (benchmarks/bench_loader.py); ``pread`` keeps it flat.
    The shard files are plain ``.npy``, so ``np.load(path, mmap_mode="r")`` works on them too.

    Args:
        store_dir (str): the store directory.
        kind (str): ``entropy`` or ``tokens``; a store of the other kind is refused.

    Raises:
        FileNotFoundError: no store at ``store_dir``.
        CacheMismatchError: the store is incomplete (a run that did not finish), or of another kind.
        MissingFileError: a file the manifest names is missing or cut (``check_store_files``).
    """

    def __init__(self, store_dir: str, kind: str) -> None:
        self.dir = Path(store_dir)
        name, _, recipe = KINDS[kind]
        manifest_path = self.dir / MANIFEST
        if not manifest_path.exists():
            raise FileNotFoundError(f"no {name} at {store_dir} ({MANIFEST} missing): run {recipe}")
        self.manifest = json.loads(manifest_path.read_text())
        if self.manifest["kind"] != kind:
            found, _, writer = KINDS.get(self.manifest["kind"], (f"store of kind {self.manifest['kind']!r}", None,
                                                                 "another recipe"))
            raise CacheMismatchError(f"{store_dir} holds the {found} that {writer} writes; give the {name} that "
                                     f"{recipe} wrote")
        if not self.manifest["complete"]:
            raise CacheMismatchError(f"the {name} at {store_dir} is incomplete: rerun {recipe} to finish it")
        check_store_files(self.dir, self.manifest)
        self.kind = kind
        self.key = self.manifest["key"]
        raw = (self.dir / SAMPLES).read_bytes()
        self.table = np.load(io.BytesIO(raw))
        self.table_digest = table_digest(raw)  # part of the store's identity (entrodrop.data.store_identity)
        per_shard = self.manifest["samples_per_shard"]
        # Offset of each sample within its shard's flat array.
        lengths = self.table["length"].astype(np.int64)
        self._offsets = np.zeros(len(lengths), dtype=np.int64)
        for start in range(0, len(lengths), per_shard):
            block = lengths[start : start + per_shard]
            self._offsets[start : start + len(block)] = np.cumsum(block) - block
        self._per_shard = per_shard
        self._dtype = np.dtype(KINDS[kind][1])
        self._data_offsets: Dict[int, int] = {}
        self._files: "OrderedDict[int, int]" = OrderedDict()  # shard -> open fd, least recent first

    def __len__(self) -> int:
        return len(self.table)

    def _fd(self, shard: int) -> int:
        """An open file of the shard; at most ``_MAX_OPEN_FILES`` stay open."""
        if shard in self._files:
            self._files.move_to_end(shard)
            return self._files[shard]
        path = self.dir / _shard_name(shard) / f"{self.kind}.npy"
        if shard not in self._data_offsets:
            self._data_offsets[shard] = _data_offset(path, self._dtype)
        if len(self._files) >= _MAX_OPEN_FILES:
            os.close(self._files.popitem(last=False)[1])
        self._files[shard] = os.open(path, os.O_RDONLY)
        return self._files[shard]

    def __getitem__(self, i: int) -> np.ndarray:
        shard, length = i // self._per_shard, int(self.table[i]["length"])
        fd = self._fd(shard)
        start = self._data_offsets[shard] + int(self._offsets[i]) * self._dtype.itemsize
        return np.frombuffer(os.pread(fd, length * self._dtype.itemsize, start), dtype=self._dtype)

    def __del__(self) -> None:
        for fd in getattr(self, "_files", {}).values():
            os.close(fd)

    def shard_file(self, shard: int) -> Path:
        """The file of a shard's values."""
        return self.dir / _shard_name(shard) / f"{self.kind}.npy"

    def check_sample(self, i: int, ids: Sequence[int]) -> None:
        """Raise if sample ``i``'s token ids are not the ones this store was computed on (an
        entropy cache) or written with (a token store checking the ids read from its own file)."""
        row = self.table[i]
        if row["length"] != len(ids) or row["token_hash"] != token_hash(ids):
            hint = ("was the corpus, tokenizer or max_seq_len changed? Check with recipes/verify_entropy_cache.py"
                    if self.kind == "entropy" else f"{self.shard_file(i // self._per_shard)} was changed after it "
                    f"was written: {_rewrite_tokens(self.dir)}")
            raise CacheMismatchError(
                f"{KINDS[self.kind][0]} {self.dir}, sample {i}: computed for {row['length']} tokens with "
                f"hash {row['token_hash']:016x}, but the loader has {len(ids)} tokens with hash "
                f"{token_hash(ids):016x}; {hint}"
            )

    def token_table(self) -> np.ndarray:
        """The table (``SAMPLE_DTYPE``) of the token ids actually in a token store's shard files:
        each sample's length from the manifest's table, and the hash of the ids read back.

        Shard by shard, in blocks of whole samples of about ``_HASH_BLOCK_TOKENS`` tokens, read
        with plain reads: a memory map would keep every page it touched in the resident set until
        it is closed (see the class docstring), and this way start-up memory stays flat. About
        2 s per 100M tokens on one core (benchmarks/bench_loader.py).

        Raises:
            CacheMismatchError: a shard file holds more or fewer tokens than its samples' lengths
                add up to (a file cut short or replaced).
        """
        if self.kind != "tokens":
            raise ValueError(f"{self.dir} is a store of {self.kind!r}: only a token store holds token ids")
        lengths = self.table["length"].astype(np.int64)
        hashes = np.zeros(len(lengths), np.uint64)
        for start in range(0, len(lengths), self._per_shard):
            shard_lengths = lengths[start : start + self._per_shard]
            path = self.shard_file(start // self._per_shard)
            offset = _data_offset(path, self._dtype)
            num_tokens = (path.stat().st_size - offset) // self._dtype.itemsize
            if num_tokens != shard_lengths.sum():
                raise CacheMismatchError(
                    f"{path} holds {num_tokens} tokens, but its samples {start} to {start + len(shard_lengths) - 1} "
                    f"have {shard_lengths.sum()} in {self.dir / SAMPLES}: the file was cut short or replaced; "
                    + _rewrite_tokens(self.dir))
            ends = np.cumsum(shard_lengths)
            with path.open("rb") as f:
                f.seek(offset)
                i = 0
                while i < len(shard_lengths):
                    # Samples i..j-1: whole samples, at least one, about _HASH_BLOCK_TOKENS tokens.
                    limit = ends[i] - shard_lengths[i] + _HASH_BLOCK_TOKENS
                    j = max(i + 1, int(np.searchsorted(ends, limit, side="right")))
                    block_lengths = shard_lengths[i:j]
                    block = np.frombuffer(f.read(int(block_lengths.sum()) * self._dtype.itemsize), self._dtype)
                    hashes[start + i : start + j] = token_hashes(block, block_lengths)
                    i = j
        table = np.zeros(len(lengths), SAMPLE_DTYPE)
        table["length"], table["token_hash"] = self.table["length"], hashes
        return table

    def differences(self, actual: np.ndarray, expected: np.ndarray) -> List[str]:
        """Where two tables of this store's samples differ (``actual``: usually ``token_table()``):
        for each shard, its file, how many of its samples differ and the first one; empty if none.
        A line reads ``.../shard-00002/tokens.npy: 1 of 16 samples differ, the first is sample 37
        (same length, 12, other token ids)``."""
        n = min(len(actual), len(expected))
        differs = ((actual["length"][:n] != expected["length"][:n])
                   | (actual["token_hash"][:n] != expected["token_hash"][:n]))
        shards = np.unique(np.flatnonzero(differs) // self._per_shard)
        problems = []
        for shard in shards[:_MAX_SHARDS_NAMED].tolist():
            rows = range(shard * self._per_shard, min((shard + 1) * self._per_shard, n))
            bad = np.flatnonzero(differs[rows.start : rows.stop]) + rows.start
            i = int(bad[0])
            have, want = int(actual[i]["length"]), int(expected[i]["length"])
            detail = f"same length, {have}, other token ids" if have == want else f"{have} tokens here, {want} in the table"
            problems.append(f"{self.shard_file(shard)}: {len(bad)} of {len(rows)} samples differ, "
                            f"the first is sample {i} ({detail})")
        if len(shards) > _MAX_SHARDS_NAMED:
            problems.append(f"and {len(shards) - _MAX_SHARDS_NAMED} more shards")
        if len(actual) != len(expected):
            problems.append(f"the store has {len(actual)} samples, the table {len(expected)}")
        return problems

    def check_tokens(self) -> None:
        """Raise unless the token ids in the shard files are the ones the store was written with
        (its table, ``samples.npy``): every token is read and hashed (``token_table``). Training
        runs this before its first step; the per-sample ``check_sample`` catches only what it reads."""
        _raise_if(self.differences(self.token_table(), self.table),
                  f"the token store {self.dir} holds other token ids than it was written with "
                  f"(its table, {self.dir / SAMPLES})", "Fix: " + _rewrite_tokens(self.dir))

    def entropy_problems(self, vocab_size: int) -> Dict[Path, str]:
        """Each shard file of an entropy cache holding values that are no entropy over ``vocab_size``
        tokens, and a line naming it, how many and the first (sample, position, value). An entropy is
        finite and in [0, ln V], to ``ENTROPY_TOLERANCE``; NaN only at a sample's first token.
        A manifest and the files' sizes cannot tell: a shard overwritten at its size (with +inf,
        say) keeps both. Every value is read once, shard by shard (2 bytes a token)."""
        top = math.log(vocab_size)
        lengths = self.table["length"].astype(np.int64)
        problems = {}
        for start in range(0, len(lengths), self._per_shard):
            shard_lengths = lengths[start : start + self._per_shard]
            path = self.shard_file(start // self._per_shard)
            values = np.fromfile(path, self._dtype, offset=_data_offset(path, self._dtype)).astype(np.float32)
            ends = np.cumsum(shard_lengths)
            if len(values) != ends[-1]:
                problems[path] = f"{path}: holds {len(values)} values, its samples have {ends[-1]} tokens"
                continue
            ok = (values >= -ENTROPY_TOLERANCE) & (values <= top + ENTROPY_TOLERANCE)  # False for NaN
            firsts = (ends - shard_lengths)[shard_lengths > 0]
            ok[firsts] |= np.isnan(values[firsts])  # a first token has no context, no entropy
            if not ok.all():
                i = int(np.argmin(ok))
                sample = int(np.searchsorted(ends, i, side="right"))
                position = i - int(ends[sample] - shard_lengths[sample])
                problems[path] = (f"{path}: {int((~ok).sum())} of {len(values)} values are not entropies over "
                                  f"{vocab_size} tokens (finite, 0 to ln {vocab_size} = {top:.3f}); the first is "
                                  f"{values[i]} at sample {start + sample}, token {position}")
        return problems

    def check_entropies(self, vocab_size: int) -> None:
        """Raise unless every value of this entropy cache is an entropy over ``vocab_size`` tokens
        (``entropy_problems``), naming each shard file that holds others and how to compute it again."""
        problems = self.entropy_problems(vocab_size)
        shards = [path.parent for path in problems]
        _raise_if(list(problems.values()), f"the entropy cache {self.dir} holds values that are not entropies",
                  f"Fix: delete {' '.join(map(str, shards))} and re-run recipes/precompute_entropy.py with the same "
                  "config (the same cache_dir): it computes those shards again and keeps the others")

    def verify(self, key: Dict[str, Any], table: np.ndarray) -> None:
        """Raise one error naming everything that differs and the first sample where it does."""
        _raise_if(mismatches(key, table, self.key, self.table),
                  f"the {KINDS[self.kind][0]} at {self.dir} does not match")


def _rewrite_tokens(store_dir: Path) -> str:
    return (f"delete {store_dir} and re-run recipes/tokenize_corpus.py to write it again (tokenizing is "
            "deterministic: an entropy cache of the original store still fits, recipes/verify_entropy_cache.py checks)")


def write_store(store_dir: str, kind: str, key: Dict[str, Any], values: Sequence[np.ndarray],
                table: np.ndarray, samples_per_shard: int) -> "SampleStore":
    """Write a whole store in one process (tests, benchmarks, small corpora) and open it."""
    writer = SampleStoreWriter(store_dir, kind, key, len(values), samples_per_shard, create=True)
    for shard in writer.pending_shards():
        rows = writer.shard_samples(shard)
        writer.write_shard(shard, [values[i] for i in rows], table[rows.start : rows.stop])
    writer.finalize()
    return SampleStore(store_dir, kind)
