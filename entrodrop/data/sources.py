"""Loading a corpus entry's ``datasets.load_dataset`` source: its rows and columns, and the errors
of reading it, each naming the source or file.

A source is named with torchtune's ``text_completion_dataset`` key names: ``source`` (a hub
name, or a local builder ``json``, ``parquet``, ``arrow``, ``text`` with ``data_files``),
``name``, ``split``, ``data_files``, ``revision``, ``streaming``. Local files go through the same
code as the hub. How its rows become stores is in the ``entrodrop.data.store_plans`` docstring.
"""

import glob
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Mapping, Sequence

from entrodrop.data.rendering import columns_needed, columns_read, problem_column
from entrodrop.errors import SourceError

LOCAL_BUILDERS = ("json", "parquet", "arrow", "text", "csv")


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
    order when streaming (``entrodrop.data.store_plans`` shuffles it once its first rows are checked).

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
