"""The token stores of a corpus entry, planned: which rows, rendered how, in what order.

A corpus entry of recipes/tokenize_corpus.py names a JSON-lines file (``path``,
``text_field``: ``entrodrop.data.corpus``) or a source that ``datasets.load_dataset`` reads, with
torchtune's ``text_completion_dataset`` key names: ``source`` (a hub name, or a local builder
``json``, ``parquet``, ``arrow``, ``text`` with ``data_files``), ``name``, ``split``,
``data_files``, ``revision``, ``streaming``. Local files go through the same code as the hub.

``plan_corpus`` gives one ``StorePlan`` for each store an entry writes
(``entrodrop.data.token_stores`` writes them), from the parts in their own modules: loading a
source (``entrodrop.data.sources``), rendering its rows (``entrodrop.data.rendering``), the
selection and the held-out split (``entrodrop.data.selection``).

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
never rendered as "None". Then the selection (``selection.select``): exact duplicates removed
(the first of each kept, the count logged), a shuffle with ``seed``, and ``validation_size``
problems held out: every row of a problem on one side. A row's problem is its ``problem_key``: a
column (the prompt: NuminaMath's ``problem``), ``first_user_turn``, or null (each distinct row is
its own problem), compared with whitespace runs as one space and case folded, so two solutions of one
problem, or the same prompt typed twice, are one problem; the rows that share a problem with
another are counted in the log. The held-out problems are the first ``validation_size`` (a
fraction of the problems, or a count, as ``Dataset.train_test_split`` reads ``test_size``) in
the order of their first row after the shuffle; the training rows are the others, in that
order. ``max_tokens`` or ``max_samples`` then cut the training rows to a budget in whole rows
(``selection.RowBudget``): a row that would overrun ``max_tokens`` is skipped and the next one
tried, so a sample is never half in and one long row does not end the selection early.

A streamed source (``streaming: True``, for corpora larger than memory) is read in its own
order, with ``datasets``' buffered shuffle. Its first ``CHECKED_ROWS`` rows, in file order, are
rendered before any store is written (its columns, conversation style and roles); a bad row
found later is named by its place in its file, not in the shuffled stream. Its validation rows
are those of its first ``validation_size`` distinct problems, up to the first row of the next
one; a later training row of a held-out problem is skipped and counted. Its training side is
not deduplicated: that would need memory that grows with the corpus.
"""

from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import numpy as np

from entrodrop.data.corpus import read_corpus
from entrodrop.data.fingerprints import fingerprint_file
from entrodrop.data.rendering import Rendered, columns_needed, columns_read, problem_hash, render, sample_hash
from entrodrop.data.selection import select
from entrodrop.data.sources import (
    LOCAL_BUILDERS,
    check_columns,
    column_names,
    data_file_paths,
    describe_source,
    load_rows,
    read,
)
from entrodrop.errors import CorpusError, SourceError

SHUFFLE_BUFFER = 10_000  # rows in datasets' buffered shuffle of a streamed source
CHECKED_ROWS = 1_000  # rows of a streamed source, in file order, rendered before any store is written


# What the name of a plan for a source's held-out rows ends with.
VALIDATION = " (validation)"


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


def _file_names(data_files: Any) -> Any:
    """``data_files`` with each path cut to its file name."""
    if isinstance(data_files, str):
        return Path(data_files).name
    if isinstance(data_files, Mapping):
        return {k: _file_names(v) for k, v in data_files.items()}
    return [_file_names(p) for p in data_files]


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

        return StorePlan(f"{where}{'' if role == 'train' else VALIDATION}", store_dir,
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
        stores.append(StorePlan(f"{where}{VALIDATION}", entry["validation_store_dir"],
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
