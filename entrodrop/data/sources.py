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
  chat template (``tokenize_messages``). A turn whose role the style does not know
  (``function_call``) is counted and, as ``unknown_roles`` says, left out (``drop``), kept as it
  is (``keep``: its text in plain text, its role name to the chat template) or refused
  (``error``).

A row whose column is null or empty (a template field, a turn list) is counted and skipped,
never rendered as "None". Then the selection (``select``): exact duplicates removed (the first
of each kept, the count logged), a shuffle with ``seed``, and ``validation_size`` problems held
out: every row of a problem on one side. A row's problem is its ``problem_key``: a column (the
prompt: NuminaMath's ``problem``), ``first_user_turn``, or null (each distinct row is its own
problem), compared with whitespace runs as one space and case folded, so two solutions of one
problem, or the same prompt typed twice, are one problem; the rows that share a problem with
another are counted in the log. The held-out problems are the first ``validation_size`` (a
fraction of the problems, or a count, as ``Dataset.train_test_split`` reads ``test_size``) in
the order of their first row after the shuffle; the training rows are the others, in that
order. ``max_tokens`` or ``max_samples`` then cut the training rows to a budget in whole rows
(``Budget``): a row that would overrun ``max_tokens`` is skipped and the next one tried, so a
sample is never half in and one long row does not end the selection early.

A streamed source (``streaming: True``, for corpora larger than memory) is read in its own
order, with ``datasets``' buffered shuffle. Its first ``CHECKED_ROWS`` rows, in file order, are
rendered before any store is written (its columns, conversation style and roles); a bad row
found later is named by its place in its file, not in the shuffled stream. Its validation rows
are those of its first ``validation_size`` distinct problems, up to the first row of the next
one; a later training row of a held-out problem is skipped and counted. Its training side is
not deduplicated: that would need memory that grows with the corpus.
"""

import glob
import hashlib
import json
import logging
import math
import string
from array import array
from collections import Counter
from contextlib import contextmanager
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
# The roles each style knows: torchtune's message roles (openai), the speakers above (sharegpt).
KNOWN_ROLES = {"openai": ("system", "user", "assistant", "ipython", "tool"), "sharegpt": tuple(SHAREGPT_ROLES)}
USER_ROLES = ("user", "human")
UNKNOWN_ROLES = ("drop", "keep", "error")
FIRST_USER_TURN = "first_user_turn"  # problem_key: a row's problem is the text of its first user turn
LOCAL_BUILDERS = ("json", "parquet", "arrow", "text", "csv")
SHUFFLE_BUFFER = 10_000  # rows in datasets' buffered shuffle of a streamed source
CHECKED_ROWS = 1_000  # rows of a streamed source, in file order, rendered before any store is written
# max_tokens: this many rows in a row that do not fit what is left of the budget end the selection
# (what is left is then smaller than each of them); without it a nearly full budget would read the
# whole source for a row short enough.
MISFITS_TO_STOP = 100
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


def problem_column(entry: Mapping[str, Any]) -> Optional[str]:
    """The column ``problem_key`` names (None: none, or ``first_user_turn``, read off the turns)."""
    return None if entry["problem_key"] in (None, FIRST_USER_TURN) else entry["problem_key"]


def columns_needed(entry: Mapping[str, Any]) -> List[str]:
    """The columns the rendering and the problem key read."""
    return list(dict.fromkeys(columns_read(entry) + [c for c in [problem_column(entry)] if c]))


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list)) and not (value.strip() if isinstance(value, str) else value))


def _turn_problem(turn: Any, k: int, entry: Mapping[str, Any], where: str) -> str:
    """Why turn ``k`` cannot be read: its text is null (or missing), or its keys are another style's."""
    column, style = entry["conversation_column"], entry["conversation_style"]
    role_key, text_key = STYLES[style]
    if isinstance(turn, Mapping) and turn.get(role_key) is not None:
        return (f"{where}: turn {k} of {column!r} ({role_key} {turn[role_key]!r}) has a null {text_key!r} (or none): "
                f"every turn needs its text; fix or drop the row")
    keys = sorted(k for k, v in turn.items() if v is not None) if isinstance(turn, Mapping) else type(turn).__name__
    return (f"{where}: turn {k} of {column!r} has {keys}, not {role_key!r} and {text_key!r} (conversation_style: "
            f"{style}; the other style reads "
            f"{' and '.join(repr(k) for s, v in STYLES.items() if s != style for k in v)})")


def render(row: Mapping[str, Any], entry: Mapping[str, Any], where: str,
           unknown_roles: Optional[Counter] = None) -> Optional[Rendered]:
    """A row as a sample: its text (or turns, with ``chat_template``); None when a column it
    reads is null or empty, or every turn was left out.

    Args:
        unknown_roles: counts, by role, the turns whose role the style does not know.

    Raises:
        SourceError: a column that holds no text, a turn without its role or text key, or a
            role the style does not know under ``unknown_roles: error``.

    Example:
        >>> entry = {"column": None, "template": None, "conversation_column": "messages",
        ...          "conversation_style": "openai", "chat_template": False, "unknown_roles": "drop"}
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
    style = entry["conversation_style"]
    role_key, text_key = STYLES[style]
    if not isinstance(turns, list):
        raise SourceError(f"{where}: {entry['conversation_column']!r} holds {type(turns).__name__}, not a list of turns")
    rendered = []
    for k, turn in enumerate(turns):
        # Arrow gives a turn the keys of every turn of the column: a key it lacks is None there.
        if not isinstance(turn, Mapping) or turn.get(role_key) is None or turn.get(text_key) is None:
            raise SourceError(_turn_problem(turn, k, entry, where))
        role = turn[role_key]
        if role not in KNOWN_ROLES[style]:
            if entry["unknown_roles"] == "error":
                raise SourceError(f"{where}: turn {k} of {entry['conversation_column']!r} has the role {role!r}, which "
                                  f"conversation_style {style} does not know ({', '.join(KNOWN_ROLES[style])}): set "
                                  "unknown_roles: drop to leave such turns out, or keep to keep them")
            if unknown_roles is not None:
                unknown_roles[role] += 1
            if entry["unknown_roles"] == "drop":
                continue
        rendered.append((role, turn[text_key]))
    if not rendered:
        return None
    if entry["chat_template"]:
        return [(SHAREGPT_ROLES.get(role, role), text) for role, text in rendered]
    return "\n\n".join(text for _, text in rendered)


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def sample_hash(sample: Rendered) -> int:
    """64 bits of a rendered sample, for finding exact duplicates."""
    return _hash64(sample.encode("utf-8") if isinstance(sample, str) else json.dumps(sample).encode("utf-8"))


def normalised(text: str) -> str:
    """A problem's text as problems are compared: whitespace runs as one space, ends stripped, case folded.

    Example:
        >>> normalised("  Find  x:\\n 2X = 4 ") == normalised("find x: 2x = 4")
        True
    """
    return " ".join(text.split()).casefold()


def problem_text(row: Mapping[str, Any], entry: Mapping[str, Any]) -> Optional[str]:
    """The ``normalised`` text of a row's ``problem_key`` (its column, or its first user turn), or
    None: no key set, or the row's value is null, empty or not text."""
    key = entry["problem_key"]
    if key is None:
        return None
    if key == FIRST_USER_TURN:
        role_key, text_key = STYLES[entry["conversation_style"]]
        turns = row[entry["conversation_column"]] or []
        value = next((t.get(text_key) for t in turns if isinstance(t, Mapping) and t.get(role_key) in USER_ROLES), None)
    else:
        value = row[key]
    return normalised(value) if isinstance(value, str) and value.strip() else None


def problem_hash(row: Mapping[str, Any], entry: Mapping[str, Any], row_hash: int) -> Tuple[int, bool]:
    """64 bits of the row's problem, and whether the row has a problem key: a row without one
    (``problem_key: null``, or a null value) is its own problem (its ``row_hash``)."""
    text = problem_text(row, entry)
    return (row_hash, False) if text is None else (_hash64(b"problem\0" + text.encode("utf-8")), True)


# ---------------------------------------------------------------------------- selection


def validation_count(validation_size: Union[None, int, float], num_problems: int) -> int:
    """Problems to hold out: a float is a fraction of ``num_problems``, rounded up, an int a count
    (as ``Dataset.train_test_split`` reads ``test_size``).

    Example:
        >>> validation_count(0.1, 95), validation_count(0.25, 10), validation_count(7, 95), validation_count(None, 95)
        (10, 3, 7, 0)
    """
    if validation_size is None:
        return 0
    if isinstance(validation_size, float):
        return math.ceil(validation_size * num_problems)
    return validation_size


@dataclass
class Selection:
    """Positions, in the candidate rows, of the validation rows and the training rows, each in
    the order they are stored; how many duplicates were removed, how many distinct problems the
    kept rows hold, and how many of them were held out."""

    validation: np.ndarray
    train: np.ndarray
    duplicates: int
    num_problems: int
    held_out_problems: int


def select(hashes: np.ndarray, problems: np.ndarray, seed: int, validation_size: Union[None, int, float]) -> Selection:
    """Deduplicate, shuffle and split candidate rows by their ``sample_hash`` and ``problem_hash``.

    The first row of each distinct text is kept; the kept rows are permuted with
    ``numpy.random.default_rng(seed)``; the first ``validation_count`` problems, in the order of
    their first row there, are held out: all their rows are the validation rows, every other
    row a training row, in that order. So no problem (and no text) is on both sides.

    Raises:
        SourceError: the held-out problems would leave no training row.

    Example:
        >>> rows = np.array([5, 7, 5, 9, 11], dtype=np.uint64)  # row 2 repeats row 0
        >>> s = select(rows, np.array([1, 2, 1, 2, 3], dtype=np.uint64), seed=0, validation_size=1)
        >>> s.duplicates, s.num_problems, sorted(s.validation.tolist() + s.train.tolist())
        (1, 3, [0, 1, 3, 4])
        >>> {1, 3} <= set(s.validation.tolist()) or {1, 3} <= set(s.train.tolist())  # rows 1 and 3: one problem
        True
    """
    _, first = np.unique(hashes, return_index=True)
    kept = np.sort(first)
    order = kept[np.random.default_rng(seed).permutation(len(kept))]
    distinct, first_place, which = np.unique(problems[order], return_index=True, return_inverse=True)
    rank = np.empty(len(distinct), np.int64)
    rank[np.argsort(first_place, kind="stable")] = np.arange(len(distinct))  # problems by their first row
    n = validation_count(validation_size, len(distinct))
    if n >= len(distinct):
        raise SourceError(f"validation_size={validation_size} holds out {n} problems, but the source has "
                          f"{len(distinct)} distinct problems ({len(kept)} distinct non-empty rows): none would be "
                          "left to train on")
    held = rank[which.reshape(-1)] < n
    return Selection(order[held], order[~held], len(hashes) - len(kept), len(distinct), n)


class Budget:
    """The training rows a budget takes, offered one at a time in their stored order.

    ``max_samples``: the first that many rows. ``max_tokens``: each row whose tokens fit what is
    left is taken; one that does not fit is skipped (never half in) and the next one tried. The
    selection ends when the budget is met exactly, or after ``MISFITS_TO_STOP`` rows in a row
    did not fit (what is left is smaller than each of them), or when the rows run out.

    Example:
        >>> budget = Budget(max_tokens=10, max_samples=None)
        >>> [budget.offer(n) for n in [4, 7, 5, 1, 3]], budget.tokens, budget.reason
        ([True, False, True, True, False], 10, 'met exactly')
    """

    def __init__(self, max_tokens: Optional[int], max_samples: Optional[int]) -> None:
        self.max_tokens, self.max_samples = max_tokens, max_samples
        self.rows = self.tokens = self.skipped = self.misfits = 0
        self.done = False
        self.reason = "the rows ran out"

    def offer(self, row_tokens: int) -> bool:
        """Whether the next row is taken (never once the selection has ended)."""
        if self.done:
            return False
        if self.max_samples is not None:
            self.rows += 1
            self.tokens += row_tokens
            self.done = self.rows >= self.max_samples
            self.reason = f"max_samples {self.max_samples} rows taken" if self.done else self.reason
            return True
        if self.max_tokens is not None and self.tokens + row_tokens > self.max_tokens:
            self.skipped += 1
            self.misfits += 1
            if self.misfits >= MISFITS_TO_STOP:
                self.done = True
                self.reason = (f"{MISFITS_TO_STOP} rows in a row did not fit the {self.max_tokens - self.tokens} "
                               "tokens left")
            return False
        self.rows += 1
        self.tokens += row_tokens
        self.misfits = 0
        if self.max_tokens is not None and self.tokens == self.max_tokens:
            self.done, self.reason = True, "met exactly"
        return True

    def describe(self) -> str:
        """What the budget selected and why it stopped, for the log."""
        if self.max_samples is not None:
            return f"max_samples {self.max_samples}: {self.rows} rows, {self.tokens} tokens; stopped: {self.reason}"
        return (f"max_tokens {self.max_tokens}: {self.tokens} tokens selected ({self.tokens / self.max_tokens:.2%}), "
                f"{self.rows} rows taken, {self.skipped} rows that did not fit what was left skipped; stopped: "
                f"{self.reason}")


def rows_within_budget(row_tokens: Sequence[int], max_tokens: Optional[int],
                       max_samples: Optional[int]) -> Tuple[np.ndarray, Budget]:
    """Which rows a budget takes (``Budget``), as a mask (every row without one), and the budget
    after them (what it took, why it stopped: ``Budget.describe``).

    Example:
        >>> rows_within_budget([4, 7, 5, 2], max_tokens=10, max_samples=None)[0].tolist()
        [True, False, True, False]
        >>> rows_within_budget([4, 3, 5, 2], max_tokens=None, max_samples=3)[0].tolist()
        [True, True, True, False]
    """
    budget = Budget(max_tokens, max_samples)
    if max_tokens is None and max_samples is None:
        return np.ones(len(row_tokens), bool), budget
    return np.array([budget.offer(int(n)) for n in row_tokens], bool), budget


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


class _Collected(logging.Handler):
    """The records datasets logs while a read is watched (``read_errors``), kept rather than printed."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def read_errors(entry: Mapping[str, Any], where: str) -> Iterator[None]:
    """What ``datasets`` raises on a file it cannot read, as one ``SourceError`` naming the file.

    An empty or damaged parquet file, or JSON that does not parse, raise pyarrow's
    ``ArrowInvalid`` (wrapped in ``DatasetGenerationError`` when not streaming), an empty JSON
    file ``StopIteration``, files of different columns ``TypeError`` (``Couldn't cast``); datasets
    logs the file it failed on at the same time. That record is
    kept here, not printed, and its words (which name the file) are the message.
    """
    import pyarrow
    from datasets.exceptions import DatasetGenerationError

    logger = logging.getLogger("datasets")  # datasets' library logger: its modules' records reach its handlers
    collected, handlers = _Collected(), logger.handlers[:]
    logger.handlers = [collected]
    try:
        yield
    except (pyarrow.ArrowException, DatasetGenerationError, StopIteration, RuntimeError, TypeError) as e:
        if isinstance(e, RuntimeError) and not isinstance(e.__cause__, StopIteration):  # PEP 479: in a generator
            raise
        if isinstance(e, TypeError) and "Couldn't cast" not in str(e):  # datasets: a file of other columns or types
            raise
        cause = e.__cause__ if isinstance(e, DatasetGenerationError) and e.__cause__ else e
        said = " ".join((collected.messages[-1] if collected.messages else f"{type(cause).__name__}: {cause}").split())
        raise SourceError(f"{where}: {describe_source(entry)} cannot be read as {entry['source']}: "
                          f"{said or 'no rows (an empty file?)'}") from None
    finally:
        logger.handlers = handlers


def load_rows(entry: Mapping[str, Any], where: str):
    """``datasets.load_dataset`` of an entry: a ``Dataset``, or an ``IterableDataset`` in file
    order when streaming (``_plan_stream`` shuffles it once its first rows are checked).

    Raises:
        SourceError: local files that do not exist or are empty; files datasets cannot read
            (``read_errors``); a hub source that is neither cached nor reachable (an offline
            cluster), naming the command that fetches it.
    """
    import datasets

    local = entry["source"] in LOCAL_BUILDERS
    if local:
        files = data_file_paths(entry["data_files"])
        missing = [f for f in files if not Path(f).exists()]
        if not files or missing:
            raise SourceError(f"{where}.data_files={entry['data_files']!r}: "
                              + (f"no such file: {missing[0]}" if missing else f"source {entry['source']} reads data_files"))
        empty = [f for f in files if Path(f).is_file() and Path(f).stat().st_size == 0]
        if empty:
            raise SourceError(f"{where}.data_files: {empty[0]} is empty (0 bytes): write its rows, or leave it out "
                              "of data_files")
    try:
        with read_errors(entry, where):
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
        if "corresponds to no data" in str(e):  # files of blank lines only
            raise SourceError(f"{where}: {describe_source(entry)} holds no rows") from None
        raise SourceError(f"{where}: {entry['source']}: {e}") from None
    return rows


def read(rows, entry: Mapping[str, Any], where: str) -> Iterator[Mapping[str, Any]]:
    """The rows of a loaded source, each read under ``read_errors`` (a streamed source reads its
    files as it goes, so a damaged one fails here, not at ``load_rows``)."""
    it = iter(rows)
    while True:
        with read_errors(entry, where):
            row = next(it, None)
        if row is None:
            return
        yield row


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


def column_names(rows, entry: Mapping[str, Any], where: str) -> List[str]:
    """The columns of a loaded source (a streamed one's read off its first row when it declares
    none, as streamed JSON does).

    Raises:
        SourceError: a source with no rows, or files datasets cannot read.
    """
    if not entry["streaming"]:
        if not len(rows):
            raise SourceError(f"{where}: {describe_source(entry)} holds no rows")
        return list(rows.column_names)
    first = next(read(rows, entry, where), None)
    if first is None:
        raise SourceError(f"{where}: {describe_source(entry)} holds no rows")
    return list(rows.column_names or first)


def check_columns(columns: Sequence[str], entry: Mapping[str, Any], where: str) -> None:
    """Raise unless every column the rendering and the problem key read exists, listing those that do."""
    missing = [c for c in columns_needed(entry) if c not in columns]
    if missing:
        key = ("problem_key" if missing[0] == problem_column(entry) and missing[0] not in columns_read(entry)
               else "template" if entry["template"] else "column" if entry["column"] else "conversation_column")
        what = "template field" if key == "template" else "column"
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
    # What reading the rows counted, for the log once the store is written (a streamed source
    # knows it only then).
    counted: Callable[[], List[str]] = lambda: []


def _in_blocks(n: int, total: int, render_rows: Callable[[int, int], List[Rendered]]):
    for start in range(0, total, n):
        yield lambda start=start: render_rows(start, min(start + n, total))


def _without_nulls(value: Any) -> Any:
    """A row's value as another read of its file gives it: Arrow fills the keys a turn lacks with None."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def place_in_files(entry: Mapping[str, Any], row: Mapping[str, Any]) -> Optional[str]:
    """Where ``row`` is in a local source's files: ``row 121 of data/x.jsonl`` (counting from 0),
    found by reading them in order (only when a row is refused: a shuffled stream's position
    says nothing of where to look); None for a hub source, or a row not found."""
    if entry["source"] not in LOCAL_BUILDERS:
        return None
    import datasets

    wanted = {c: _without_nulls(row[c]) for c in columns_needed(entry)}
    for path in data_file_paths(entry["data_files"]):
        rows = datasets.load_dataset(entry["source"], data_files=path, split="train", streaming=True)
        for j, other in enumerate(read(rows, entry, "")):
            if all(_without_nulls(other.get(c)) == v for c, v in wanted.items()):
                return f"row {j} of {path}"
    return None


def _render_placed(row: Mapping[str, Any], entry: Mapping[str, Any], where: str, place: str,
                   unknown_roles: Optional[Counter] = None) -> Optional[Rendered]:
    """``render``; a row it refuses is named by its place in its file (``place_in_files``), else by ``place``."""
    try:
        return render(row, entry, f"{where}: {place}", unknown_roles)
    except SourceError:
        found = place_in_files(entry, row)
        if found is None:
            raise
        return render(row, entry, f"{where}: {found}")  # raises again, with the row's place in its file


def _roles_note(where: str, entry: Mapping[str, Any], unknown_roles: Counter, of: str = "") -> List[str]:
    if not unknown_roles:
        return []
    fate = "left out" if entry["unknown_roles"] == "drop" else "kept as they are"
    counts = ", ".join(f"{role}: {n}" for role, n in unknown_roles.most_common())
    return [f"{where}: {sum(unknown_roles.values())} turns{of} with a role conversation_style "
            f"{entry['conversation_style']} does not know ({counts}): {fate} (unknown_roles: {entry['unknown_roles']})"]


def _problems_meant(entry: Mapping[str, Any]) -> str:
    if entry["problem_key"] is None:
        return "problem_key null: each distinct row is its own problem"
    return f"problem_key {entry['problem_key']}, whitespace and case ignored"


def plan_source(name: str, entry: Mapping[str, Any]) -> List[StorePlan]:
    """The training store (and the validation store) of a ``source`` entry; every row is
    rendered and checked here, before any store is written (a streamed source: its first
    ``CHECKED_ROWS``)."""
    where = f"corpora.{name}"
    rows = load_rows(entry, where)
    check_columns(column_names(rows, entry, where), entry, where)
    description = {k: entry[k] for k in ("source", "name", "split", "revision", "streaming", "column", "template",
                                         "conversation_column", "conversation_style", "chat_template", "unknown_roles",
                                         "seed", "max_tokens", "max_samples", "validation_size", "problem_key",
                                         "long_samples")}
    # Local files by name: their content is fingerprinted ("data"), so a moved copy is the same source.
    description["data_files"] = _file_names(entry["data_files"]) if entry["source"] in LOCAL_BUILDERS else entry["data_files"]
    if entry["streaming"]:
        return _plan_stream(name, entry, rows, description)
    needed = rows.select_columns(columns_needed(entry))
    candidates, hashes, problems = array("q"), array("Q"), array("Q")  # 8 bytes a row each: millions of rows fit
    skipped = keyless = 0
    unknown_roles: Counter = Counter()
    for i, row in enumerate(needed):  # read already: Arrow in memory or memory-mapped
        sample = _render_placed(row, entry, where, f"row {i}", unknown_roles)
        if sample is None:
            skipped += 1
            continue
        candidates.append(i)
        hashes.append(sample_hash(sample))
        problem, keyed = problem_hash(row, entry, hashes[-1])
        problems.append(problem)
        keyless += not keyed
    if not candidates:
        raise SourceError(f"{where}: none of the {len(needed)} rows of {entry['source']} has a non-empty "
                          f"{' / '.join(columns_read(entry))}")
    try:
        selection = select(np.frombuffer(hashes, dtype=np.uint64), np.frombuffer(problems, dtype=np.uint64),
                           entry["seed"], entry["validation_size"])
    except SourceError as e:
        raise SourceError(f"{where}.{e}") from None
    candidates = np.frombuffer(candidates, dtype=np.int64)
    kept = len(selection.validation) + len(selection.train)
    notes = [f"{where}: {describe_source(entry)}: {len(needed)} rows, {skipped} null or empty skipped, "
             f"{selection.duplicates} exact duplicates removed; {kept} rows of {selection.num_problems} problems "
             f"({_problems_meant(entry)}): {kept - selection.num_problems} rows share their problem with an earlier "
             f"row; {len(selection.validation)} rows of {selection.held_out_problems} problems held out for validation"]
    if entry["problem_key"] is not None and keyless:
        notes.append(f"{where}: {keyless} rows have no {entry['problem_key']} (null, empty or not text): each is its "
                     "own problem")
    notes += _roles_note(where, entry, unknown_roles)

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


def check_first_rows(rows, entry: Mapping[str, Any], where: str) -> List[str]:
    """Render the first ``CHECKED_ROWS`` of a streamed source's ``rows``, in file order, so
    a wrong column, conversation style or role fails before any store is written, named by its
    place in its file; the log's lines of what they held.

    Raises:
        SourceError: a row that cannot become a sample.
    """
    unknown_roles: Counter = Counter()
    checked = 0
    for i, row in enumerate(read(rows, entry, where)):
        if i == CHECKED_ROWS:
            break
        _render_placed(row, entry, where, f"row {i} of {entry['source']} in its own order", unknown_roles)
        checked += 1
    return ([f"{where}: the first {checked} rows in file order render (columns, conversation style, roles)"]
            + _roles_note(where, entry, unknown_roles, " among them"))


def _plan_stream(name: str, entry: Mapping[str, Any], rows, description: dict) -> List[StorePlan]:
    where = f"corpora.{name}"
    held_out = entry["validation_size"] or 0
    checked = check_first_rows(rows, entry, where)  # in file order, from the one load_dataset
    rows = rows.shuffle(seed=entry["seed"], buffer_size=SHUFFLE_BUFFER)
    counts: Dict[str, Counter] = {"train": Counter(), "validation": Counter()}  # of the latest read of each side

    def stream(role: str) -> Iterator[Rendered]:
        """The rows of one side, in stream order: the validation side is every row of the first
        ``held_out`` distinct problems up to the first row of the next one, less exact
        duplicates; the training side is every later row whose problem is not held out."""
        held, held_rows, collecting = set(), set(), held_out > 0
        tally = counts[role] = Counter()
        for i, row in enumerate(read(rows, entry, where)):
            roles: Counter = Counter()
            sample = _render_placed(row, entry, where, f"row {i} of the stream shuffled with seed {entry['seed']}",
                                    roles)
            tally.update({f"role {r}": n for r, n in roles.items()})
            if sample is None:
                tally["empty"] += 1
                continue
            h = sample_hash(sample)
            problem, _ = problem_hash(row, entry, h)
            if collecting:
                if problem in held or len(held) < held_out:
                    held.add(problem)
                    if h not in held_rows:
                        held_rows.add(h)
                        if role == "validation":
                            yield sample
                    continue
                collecting = False
                if role == "validation":
                    return
            if problem in held:
                tally["held out"] += 1
                continue
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

    def counted(role: str) -> List[str]:
        c = counts[role]
        roles = Counter({k[len("role "):]: n for k, n in c.items() if k.startswith("role ")})
        side = "" if role == "train" else " (validation)"
        return ([f"{where}{side}: of the rows read, {c['empty']} null or empty skipped"
                 + (f", {c['held out']} skipped: their problem is held out for validation ({_problems_meant(entry)})"
                    if role == "train" and held_out else "")]
                + _roles_note(f"{where}{side}", entry, roles, " of the rows read"))

    data = _data_fingerprint(entry, rows)
    stores = [StorePlan(where, entry["store_dir"], lambda n: blocks("train", n), entry["long_samples"], entry["max_tokens"],
                        entry["max_samples"], {**description, "role": "train", "data": data},
                        [f"{where}: {describe_source(entry)}, streamed: read in order with a shuffle buffer "
                         f"of {SHUFFLE_BUFFER} rows; null or empty rows skipped; training rows not deduplicated"]
                        + checked, lambda: counted("train"))]
    if held_out:
        stores.append(StorePlan(f"{where} (validation)", entry["validation_store_dir"],
                                lambda n: blocks("validation", n), entry["long_samples"], None, None,
                                {**description, "role": "validation", "data": data}, [], lambda: counted("validation")))
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
