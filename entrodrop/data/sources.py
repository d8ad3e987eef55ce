"""Corpora from ``datasets.load_dataset`` sources: which rows, rendered how, in what order.

A corpus entry of recipes/tokenize_corpus.py names a JSON-lines file (``path``,
``text_field``: ``entrodrop.data.corpus``) or a source that ``datasets.load_dataset`` reads, with
torchtune's ``text_completion_dataset`` key names: ``source`` (a hub name, or a local builder
``json``, ``parquet``, ``arrow``, ``text`` with ``data_files``), ``name``, ``split``,
``data_files``, ``revision``, ``streaming``. Local files go through the same code as the hub.

A row becomes a sample in one of three ways (exactly one key set):

- ``column``: the text of one column;
- ``template``: a ``str.format`` template over columns, ``"{problem}\\n\\n{solution}"``;
- ``conversation_column``: a list of turns, ``{role, content}`` (``conversation_style:
  openai``: NuminaMath-CoT's ``messages``) or ``{from, value}`` (``sharegpt``:
  Infinity-Instruct's ``conversations``), rendered as plain text (each turn's text, a blank
  line between turns, no role names) or, with ``chat_template: True``, by the tokenizer's own
  chat template (``tokenize_messages``).

A row whose column is null or empty (a template field, a turn list) is counted and skipped,
never rendered as "None". Then the selection (``select``): exact duplicates removed (the first
of each kept, the count logged), a shuffle with ``seed``, ``validation_size`` rows (a
fraction, or a count, as ``Dataset.train_test_split`` reads ``test_size``) held out first, and
the training rows in that order. ``max_tokens`` or ``max_samples`` then cut the training rows
to a budget in whole rows (``rows_within_budget``), so a sample is never half in.

A streamed source (``streaming: True``, for corpora larger than memory) is read in its own
order, with ``datasets``' buffered shuffle; its validation rows are the first
``validation_size`` distinct rows, and a training row whose text is one of them is skipped. Its
training side is not deduplicated: that would need memory that grows with the corpus.
"""

import glob
import hashlib
import json
import math
import string
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np

from entrodrop.data.corpus import read_corpus
from entrodrop.data.sample_store import fingerprint_file
from entrodrop.errors import CorpusError, SourceError

STYLES = {"openai": ("role", "content"), "sharegpt": ("from", "value")}
# sharegpt speakers -> torchtune's message roles (torchtune's ShareGPTToMessages reads the same)
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant"}
LOCAL_BUILDERS = ("json", "parquet", "arrow", "text", "csv")
SHUFFLE_BUFFER = 10_000  # rows in datasets' buffered shuffle of a streamed source
Rendered = Union[str, List[Tuple[str, str]]]  # a text, or (role, text) turns for the chat template



# ---------------------------------------------------------------------------- rendering


def template_fields(template: str) -> List[str]:
    """The column names a ``str.format`` template reads.

    Example:
        >>> template_fields("{problem}\\n\\n{solution}")
        ['problem', 'solution']
    """
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def columns_read(entry: Mapping[str, Any]) -> List[str]:
    """The columns a rendering reads."""
    if entry["column"]:
        return [entry["column"]]
    if entry["template"]:
        return list(dict.fromkeys(template_fields(entry["template"])))  # a field may appear twice
    return [entry["conversation_column"]]


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list)) and not (value.strip() if isinstance(value, str) else value))


def render(row: Mapping[str, Any], entry: Mapping[str, Any], where: str) -> Optional[Rendered]:
    """A row as a sample: its text (or turns, with ``chat_template``); None when a column it
    reads is null or empty.

    Raises:
        SourceError: a column that holds no text, or a turn without its role or text key.

    Example:
        >>> entry = {"column": None, "template": None, "conversation_column": "messages",
        ...          "conversation_style": "openai", "chat_template": False}
        >>> render({"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}, entry, "x")
        '1+1?\\n\\n2'
    """
    if entry["column"] or entry["template"]:
        values = {c: row[c] for c in columns_read(entry)}
        if any(_empty(v) for v in values.values()):
            return None
        bad = [c for c, v in values.items() if not isinstance(v, str)]
        if bad:
            raise SourceError(f"{where}: column {bad[0]!r} holds {type(values[bad[0]]).__name__}, not text: name a "
                              "text column, or conversation_column for a list of turns")
        return values[entry["column"]] if entry["column"] else entry["template"].format(**values)
    turns = row[entry["conversation_column"]]
    if _empty(turns):
        return None
    role_key, text_key = STYLES[entry["conversation_style"]]
    if not isinstance(turns, list):
        raise SourceError(f"{where}: {entry['conversation_column']!r} holds {type(turns).__name__}, not a list of turns")
    rendered = []
    for k, turn in enumerate(turns):
        # Arrow gives a turn the keys of every turn of the column: a key it lacks is None there.
        if not isinstance(turn, Mapping) or turn.get(role_key) is None or turn.get(text_key) is None:
            keys = sorted(k for k, v in turn.items() if v is not None) if isinstance(turn, Mapping) else type(turn).__name__
            raise SourceError(f"{where}: turn {k} of {entry['conversation_column']!r} has {keys}, not {role_key!r} and "
                              f"{text_key!r} (conversation_style: {entry['conversation_style']}; the other style reads "
                              f"{' and '.join(repr(k) for s, v in STYLES.items() if s != entry['conversation_style'] for k in v)})")
        rendered.append((turn[role_key], turn[text_key]))
    if entry["chat_template"]:
        return [(SHAREGPT_ROLES.get(role, role), text) for role, text in rendered]
    return "\n\n".join(text for _, text in rendered)


def sample_hash(sample: Rendered) -> int:
    """64 bits of a rendered sample, for finding exact duplicates."""
    data = sample.encode("utf-8") if isinstance(sample, str) else json.dumps(sample).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


# ---------------------------------------------------------------------------- selection


def validation_count(validation_size: Union[None, int, float], num_rows: int) -> int:
    """Rows to hold out: a float is a fraction of ``num_rows``, rounded up, an int a count (as
    ``Dataset.train_test_split`` reads ``test_size``).

    Example:
        >>> validation_count(0.1, 95), validation_count(0.25, 10), validation_count(7, 95), validation_count(None, 95)
        (10, 3, 7, 0)
    """
    if validation_size is None:
        return 0
    if isinstance(validation_size, float):
        return math.ceil(validation_size * num_rows)
    return validation_size


@dataclass
class Selection:
    """Positions, in the candidate rows, of the validation rows and the training rows, each in
    the order they are stored; and how many duplicates were removed."""

    validation: np.ndarray
    train: np.ndarray
    duplicates: int


def select(hashes: np.ndarray, seed: int, validation_size: Union[None, int, float]) -> Selection:
    """Deduplicate, shuffle and split candidate rows by their ``sample_hash``.

    The first row of each distinct text is kept; the kept rows are permuted with
    ``numpy.random.default_rng(seed)``; the first ``validation_count`` of them are the
    validation rows, the rest the training rows. So no text is on both sides.

    Raises:
        SourceError: the held-out rows would leave no training row.

    Example:
        >>> s = select(np.array([5, 7, 5, 9, 11], dtype=np.uint64), seed=0, validation_size=1)
        >>> s.duplicates, len(s.validation), sorted(s.validation.tolist() + s.train.tolist())
        (1, 1, [0, 1, 3, 4])
    """
    _, first = np.unique(hashes, return_index=True)
    kept = np.sort(first)
    order = kept[np.random.default_rng(seed).permutation(len(kept))]
    n = validation_count(validation_size, len(kept))
    if n >= len(kept):
        raise SourceError(f"validation_size={validation_size} holds out {n} rows, but the source has {len(kept)} "
                          f"distinct non-empty rows: none would be left to train on")
    return Selection(order[:n], order[n:], len(hashes) - len(kept))


def rows_within_budget(row_tokens: Sequence[int], max_tokens: Optional[int], max_samples: Optional[int]) -> int:
    """How many rows, from the first, a budget takes: at most ``max_samples`` rows, or the
    longest prefix whose tokens add up to at most ``max_tokens``; every row without either.

    Example:
        >>> rows_within_budget([4, 3, 5, 2], max_tokens=10, max_samples=None)
        2
        >>> rows_within_budget([4, 3, 5, 2], max_tokens=None, max_samples=3)
        3
    """
    if max_samples is not None:
        return min(max_samples, len(row_tokens))
    if max_tokens is None:
        return len(row_tokens)
    return int(np.searchsorted(np.cumsum(row_tokens), max_tokens, side="right"))


# ---------------------------------------------------------------------------- loading


def describe_source(entry: Mapping[str, Any]) -> str:
    """``AI-MO/NuminaMath-CoT (split train)``, ``parquet data/x.parquet (split train)``."""
    files = f" {entry['data_files']}" if entry["source"] in LOCAL_BUILDERS else ""
    name = f" ({entry['name']})" if entry["name"] else ""
    return f"{entry['source']}{files}{name} (split {entry['split']})"


def fetch_command(entry: Mapping[str, Any]) -> str:
    """The one command that puts a hub source in the local cache, on a machine with internet."""
    args = ", ".join(f"{k}={entry[k]!r}" for k in ("name", "split", "revision") if entry[k] is not None)
    return f"python -c \"import datasets; datasets.load_dataset({entry['source']!r}, {args})\""


def load_rows(entry: Mapping[str, Any], where: str):
    """``datasets.load_dataset`` of an entry: a ``Dataset``, or an ``IterableDataset`` when
    streaming (shuffled in a buffer with the entry's seed).

    Raises:
        SourceError: local files that do not exist; a hub source that is neither cached nor
            reachable (an offline cluster), naming the command that fetches it.
    """
    import datasets

    local = entry["source"] in LOCAL_BUILDERS
    if local:
        files = data_file_paths(entry["data_files"])
        missing = [f for f in files if not Path(f).exists()]
        if not files or missing:
            raise SourceError(f"{where}.data_files={entry['data_files']!r}: "
                              + (f"no such file: {missing[0]}" if missing else f"source {entry['source']} reads data_files"))
    try:
        rows = datasets.load_dataset(entry["source"], name=entry["name"], split=entry["split"],
                                     data_files=entry["data_files"], revision=entry["revision"],
                                     streaming=entry["streaming"])
    except ConnectionError as e:
        offline = "HF_DATASETS_OFFLINE=1 keeps datasets from fetching it" if datasets.config.HF_HUB_OFFLINE else (
            "the Hub cannot be reached from here")
        raise SourceError(
            f"{where}: {describe_source(entry)} is not in this machine's Hugging Face cache, and "
            f"{offline}. On a machine with internet, fetch it with\n    {fetch_command(entry)}\n"
            f"(or python scripts/fetch_data.py <this config>), then copy its cache (HF_HOME, by default "
            f"~/.cache/huggingface) here"
            + (" and read it with streaming: False (the cached copy is memory-mapped Arrow; streaming reads the Hub)"
               if entry["streaming"] else "") + f". datasets said: {e}") from None
    except ValueError as e:  # datasets names a wrong split or config name this way
        raise SourceError(f"{where}: {entry['source']}: {e}") from None
    if entry["streaming"]:
        rows = rows.shuffle(seed=entry["seed"], buffer_size=SHUFFLE_BUFFER)
    return rows


def data_file_paths(data_files: Any) -> List[str]:
    """The local paths of ``data_files`` (a path, a list, or a split -> paths mapping), globs expanded."""
    if data_files is None:
        return []
    if isinstance(data_files, str):
        data_files = [data_files]
    elif isinstance(data_files, Mapping):
        data_files = [p for v in data_files.values() for p in ([v] if isinstance(v, str) else v)]
    paths = []
    for pattern in data_files:
        matches = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        paths += matches or [pattern]
    return paths


def _file_names(data_files: Any) -> Any:
    """``data_files`` with each path cut to its file name."""
    if isinstance(data_files, str):
        return Path(data_files).name
    if isinstance(data_files, Mapping):
        return {k: _file_names(v) for k, v in data_files.items()}
    return [_file_names(p) for p in data_files]


def column_names(rows) -> List[str]:
    """The columns of a loaded source (read off its first row when streaming JSON has none declared)."""
    if rows.column_names is not None:
        return list(rows.column_names)
    first = next(iter(rows), None)
    return list(first) if first else []


def check_columns(columns: Sequence[str], entry: Mapping[str, Any], where: str) -> None:
    """Raise unless every column the rendering reads exists, listing those that do."""
    missing = [c for c in columns_read(entry) if c not in columns]
    if missing:
        key = "template" if entry["template"] else "column" if entry["column"] else "conversation_column"
        what = "template field" if entry["template"] else "column"
        raise SourceError(f"{where}.{key}: no {what} {missing[0]!r} in {entry['source']}"
                          f"{'' if entry['name'] is None else ' (' + entry['name'] + ')'}; its columns are {list(columns)}")


# ---------------------------------------------------------------------------- the plan


@dataclass
class StorePlan:
    """One token store to write: its rows, already selected and ordered, and its budget.

    ``blocks(n)`` yields, for each block of ``n`` consecutive rows, a function that renders
    them, so a process renders only the blocks it tokenizes (a streamed source is read
    through by every process, and renders as it reads).
    """

    name: str
    store_dir: str
    blocks: Callable[[int], Iterator[Callable[[], List[Rendered]]]]
    long_samples: str  # entrodrop.data.corpus.sample_pieces: split | truncate
    max_tokens: Optional[int]
    max_samples: Optional[int]
    description: Dict[str, Any]  # what the manifest records: source, revision, selection, rendering
    notes: List[str] = field(default_factory=list)  # what the selection found, for the log


def _in_blocks(n: int, total: int, render_rows: Callable[[int, int], List[Rendered]]):
    for start in range(0, total, n):
        yield lambda start=start: render_rows(start, min(start + n, total))


def plan_source(name: str, entry: Mapping[str, Any]) -> List[StorePlan]:
    """The training store (and the validation store) of a ``source`` entry; every row is
    rendered and checked here, before any store is written, unless the source is streamed."""
    where = f"corpora.{name}"
    rows = load_rows(entry, where)
    check_columns(column_names(rows), entry, where)
    description = {k: entry[k] for k in ("source", "name", "split", "revision", "streaming", "column", "template",
                                         "conversation_column", "conversation_style", "chat_template", "seed",
                                         "max_tokens", "max_samples", "validation_size", "long_samples")}
    # Local files by name: their content is fingerprinted ("data"), so a moved copy is the same source.
    description["data_files"] = _file_names(entry["data_files"]) if entry["source"] in LOCAL_BUILDERS else entry["data_files"]
    if entry["streaming"]:
        return _plan_stream(name, entry, rows, description)
    needed = rows.select_columns(columns_read(entry))
    candidates, hashes, skipped = array("q"), array("Q"), 0  # 8 bytes a row: millions of rows fit
    for i, row in enumerate(needed):
        sample = render(row, entry, f"{where}: row {i}")
        if sample is None:
            skipped += 1
            continue
        candidates.append(i)
        hashes.append(sample_hash(sample))
    if not candidates:
        raise SourceError(f"{where}: none of the {len(needed)} rows of {entry['source']} has a non-empty "
                          f"{' / '.join(columns_read(entry))}")
    try:
        selection = select(np.frombuffer(hashes, dtype=np.uint64), entry["seed"], entry["validation_size"])
    except SourceError as e:
        raise SourceError(f"{where}.{e}") from None
    candidates = np.frombuffer(candidates, dtype=np.int64)
    notes = [f"{where}: {describe_source(entry)}: {len(needed)} rows, {skipped} null or empty skipped, "
             f"{selection.duplicates} exact duplicates removed, {len(selection.validation)} held out for validation"]

    def plan(store_dir: str, positions: np.ndarray, role: str, max_tokens, max_samples) -> StorePlan:
        order = candidates[positions]

        def render_rows(start: int, stop: int) -> List[Rendered]:
            return [render(row, entry, where) for row in needed.select(order[start:stop])]

        return StorePlan(f"{where}{'' if role == 'train' else ' (validation)'}", store_dir,
                         lambda n: _in_blocks(n, len(order), render_rows), entry["long_samples"], max_tokens, max_samples,
                         {**description, "role": role, "data": _data_fingerprint(entry, rows)})

    stores = [plan(entry["store_dir"], selection.train, "train", entry["max_tokens"], entry["max_samples"])]
    if len(selection.validation):
        stores.append(plan(entry["validation_store_dir"], selection.validation, "validation", None, None))
    stores[0].notes = notes
    return stores


def _plan_stream(name: str, entry: Mapping[str, Any], rows, description: dict) -> List[StorePlan]:
    where = f"corpora.{name}"
    held_out = entry["validation_size"] or 0

    def stream(role: str) -> Iterator[Rendered]:
        """The rows of one side, in stream order: the first ``held_out`` distinct non-empty rows
        are the validation side; the training side is every later row not among them."""
        validation = set()
        for i, row in enumerate(rows):
            sample = render(row, entry, f"{where}: row {i}")
            if sample is None:
                continue
            h = sample_hash(sample)
            if len(validation) < held_out:
                if h not in validation:
                    validation.add(h)
                    if role == "validation":
                        yield sample
                continue
            if role == "validation":
                return
            if h not in validation:
                yield sample

    def blocks(role: str, n: int):
        block: List[Rendered] = []
        for sample in stream(role):
            block.append(sample)
            if len(block) == n:
                yield lambda block=block: block
                block = []
        if block:
            yield lambda block=block: block

    data = _data_fingerprint(entry, rows)
    stores = [StorePlan(where, entry["store_dir"], lambda n: blocks("train", n), entry["long_samples"], entry["max_tokens"],
                        entry["max_samples"], {**description, "role": "train", "data": data},
                        [f"{where}: {describe_source(entry)}, streamed: read in order with a shuffle buffer "
                         f"of {SHUFFLE_BUFFER} rows; null or empty rows skipped; training rows not deduplicated"])]
    if held_out:
        stores.append(StorePlan(f"{where} (validation)", entry["validation_store_dir"],
                                lambda n: blocks("validation", n), entry["long_samples"], None, None,
                                {**description, "role": "validation", "data": data}))
    return stores


def _data_fingerprint(entry: Mapping[str, Any], rows) -> Optional[str]:
    """What identifies the data itself: the content of local files, or what ``datasets``
    fingerprints a cached hub dataset by; None for a streamed hub source (pin ``revision``)."""
    if entry["source"] in LOCAL_BUILDERS:
        return ",".join(fingerprint_file(Path(p)) for p in data_file_paths(entry["data_files"]))
    return getattr(rows, "_fingerprint", None)


def plan_jsonl(name: str, entry: Mapping[str, Any]) -> StorePlan:
    """The store of a JSON-lines entry: every record in file order, record ``i`` first at
    sample ``i`` (exactly sample ``i`` when no record is split); blank records are empty
    samples. What reading repaired (a byte-order mark, blank lines, bytes that are not UTF-8)
    is in the notes.

    Raises:
        FileNotFoundError: no such file.
        CorpusError: a malformed line, or no non-blank record.
    """
    path, where = entry["path"], f"corpora.{name}"
    read = read_corpus(path, entry["text_field"])
    if not read.nonblank:
        raise CorpusError(f"{where}.path={path} has no non-blank sample ({len(read.texts)} samples, all empty or blank)")
    notes = [f"{where}: {path}: {len(read.texts)} samples, {read.nonblank} non-blank"]
    if read.bom:
        notes.append(f"{where}: {path}: skipped the UTF-8 byte-order mark at its start")
    if read.blank_lines:
        notes.append(f"{where}: {path}: {read.blank_lines} blank lines kept as empty samples at their line")
    if read.trailing_blank_lines:
        notes.append(f"{where}: {path}: ignored {read.trailing_blank_lines} blank lines at its end")
    if read.non_utf8_lines:
        notes.append(f"{where}: {path}: {read.non_utf8_lines} lines had bytes that are not UTF-8, replaced by U+FFFD; "
                     f"the first is line {read.first_non_utf8_line}")
    texts = read.texts
    long_samples = entry.get("long_samples", "split")  # optional here: entries written before it existed
    return StorePlan(where, entry["store_dir"], lambda n: _in_blocks(n, len(texts), lambda a, b: texts[a:b]),
                     long_samples, None, None, jsonl_description(path, entry["text_field"], long_samples), notes)


def jsonl_description(path: str, text_field: str, long_samples: str) -> Dict[str, Any]:
    """What a JSON-lines store is written from: the file's content (not its name: a moved file
    is the same corpus), the field read, the long-sample rule."""
    return {"text_field": text_field, "long_samples": long_samples, "data": fingerprint_file(Path(path))}


def plan_corpus(name: str, entry: Mapping[str, Any]) -> List[StorePlan]:
    """The stores one corpus entry writes: a JSON-lines file's, or a source's (and its validation store)."""
    return [plan_jsonl(name, entry)] if "path" in entry else plan_source(name, entry)
