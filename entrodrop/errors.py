"""The base class of the errors a user can fix: a wrong config value, a mismatched store or
cache, an output directory that holds another run, a damaged checkpoint, a corpus that cannot
be read. Each message names the problem and the way out, so the recipes print the message
alone, with no traceback (``entrodrop.config.cli``). Any other exception is a bug, and keeps its
traceback.

Each subclass also derives from the built-in error of its kind (``ValueError``,
``FileExistsError``...), so code that catches the built-in one (``except ValueError``) catches it.
"""

import errno
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence


class EntroDropError(Exception):
    """A mistake in what the user gave; the message says what it is and how to fix it."""


class ConfigError(EntroDropError, ValueError):
    """A config with missing, unknown or invalid keys; the message lists all of them."""


def raise_problems(problems: List[str], what: str, notes: Sequence[str] = ()) -> None:
    """One ``ConfigError`` that lists every problem, then ``notes`` (what explains several of
    them), or nothing."""
    if problems:
        count = f"{len(problems)} problem{'s' * (len(problems) > 1)}"
        raise ConfigError(f"invalid {what} config ({count}):\n  " + "\n  ".join(problems)
                          + "".join(f"\n{note}" for note in notes))


class CorpusError(EntroDropError, ValueError):
    """A corpus file that cannot be read as JSON lines with a text field."""


class SourceError(EntroDropError, ValueError):
    """A source that cannot be read, or rows that cannot become samples; names the corpus."""


class CacheMismatchError(EntroDropError, ValueError):
    """A store that was not computed from the model, tokenizer, corpus or length in use."""


class MissingFileError(CacheMismatchError, FileNotFoundError):
    """A file a store's manifest names is missing, or not of the size it was written with; the
    message names each such file and the command that writes it again. Before this check, a
    missing shard file was a ``FileNotFoundError`` and a cut token shard a ``CacheMismatchError``."""


class CheckpointError(EntroDropError, ValueError):
    """A weight file that is not a whole safetensors file; the message names it and the fix."""


class SandboxError(EntroDropError, RuntimeError):
    """The sandbox for model-written code cannot start here; the message says what it needs."""


class OutputDirError(EntroDropError, FileExistsError):
    """``output_dir`` holds an earlier run that this one would mix with; the message says the ways out."""


class NoCheckpointError(EntroDropError, FileNotFoundError):
    """``resume=True``, but there is no whole checkpoint to resume; the message says what to do instead."""


class ScoringPathError(EntroDropError, FileNotFoundError):
    """An offline evaluation's ``checkpoints`` path that does not exist, or holds no checkpoint."""


class IncompleteCheckpointError(EntroDropError, ValueError):
    """An offline evaluation's ``step_<N>`` that lacks its config.json or a weight file."""


class MissingPackageError(ConfigError, ImportError):
    """A config asks for an optional package that is not installed (``loss.impl: liger`` without
    liger-kernel); the message names the key and the install command."""


class DamagedLineError(EntroDropError, ValueError):
    """A line that cannot be read in a file a run appends to a line at a time (``evals.jsonl``, the
    step log) that is not its last: damage, where a cut last line is a write that did not finish."""


class DeviceError(EntroDropError, RuntimeError):
    """A ``device`` this torch cannot use (no CUDA build, no GPU, an index beyond the GPUs there are)."""


# A write the device refused for want of room: a full file system, or the user's quota spent.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a write refused for want of room (``FULL_DISK_ERRNOS``), or numpy's
    short write: ``np.save`` of a large array writes with ``tofile``, whose error for a write cut
    short by a full disk has no errno, only "N requested and M written"."""
    return isinstance(error, OSError) and (error.errno in FULL_DISK_ERRNOS or (
        error.errno is None and re.fullmatch(r"\d+ requested and \d+ written", str(error)) is not None))


def free_space(path: str) -> Optional[str]:
    """How much room the file system of ``path`` (or of its nearest existing parent) has left,
    as ``"1.2 MB"``; None where that cannot be read.

    Example:
        >>> free_space("/nonexistent/x").endswith("B")
        True
    """
    place = Path(path).absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        free = float(shutil.disk_usage(place).free)
    except OSError:
        return None
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if free < 1000 or unit == "TB":
            return f"{free:.0f} {unit}" if unit == "B" else f"{free:.1f} {unit}"
        free /= 1000
    return None


class DiskFullError(EntroDropError, OSError):
    """A write that the device refused for want of room, with the path it was writing: numpy's and
    json's ``OSError`` name no path, torch.save's is a ``RuntimeError`` ("unexpected pos ...") and
    safetensors' a ``SafetensorError``, neither saying that the disk is full (``naming_full_disk``).
    Made as ``DiskFullError(errno, strerror, path)``; its message says how much room is left there
    now, and ``entrodrop.config.cli`` adds how the command goes on from what it wrote."""

    def __str__(self) -> str:
        what = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}.get(
            self.errno, "no space left on device, or the disk quota exceeded")
        if not self.filename:
            return f"{what} (the path being written is not known)"
        free = free_space(self.filename)
        return f"{what} writing {self.filename}" + (f" ({free} free there now)" if free else "")


@contextmanager
def naming_full_disk(path, refused: Callable[[BaseException], bool] = disk_full) -> Iterator[None]:
    """Re-raise a write that ``refused`` says failed for want of room as a ``DiskFullError``
    naming ``path`` (what is being written: a store's shard, a checkpoint)."""
    try:
        yield
    except Exception as error:
        if isinstance(error, DiskFullError) or not refused(error):  # named already, by the write itself
            raise
        # safetensors' error names the OS error in its text alone: "... (os error 28)"
        said = re.search(r"\(os error (\d+)\)", str(error))
        code = error.errno if isinstance(error, OSError) else int(said.group(1)) if said else None
        raise DiskFullError(code, os.strerror(code) if code else str(error), str(path)) from error


class NamingFullDisk:
    """``target`` with its methods ``writes`` called in ``naming_full_disk(path)``: for a metric
    logger, whose file's ``write`` names no path when the disk is full (torchtune's ``DiskLogger``)."""

    def __init__(self, target, path, writes: Sequence[str]) -> None:
        self._target, self._path, self._writes = target, path, writes

    def __getattr__(self, name: str):
        attr = getattr(self._target, name)
        if name not in self._writes:
            return attr

        def call(*args, **kwargs):
            with naming_full_disk(self._path):
                return attr(*args, **kwargs)

        return call


def naming_log_writes(logger):
    """``logger`` (a torchtune metric logger) whose writes that a full disk refuses name its file
    (``NamingFullDisk``); a logger that writes no local file, unchanged."""
    path = getattr(logger, "_file_name", None)  # where log and log_dict write; log_config writes elsewhere
    return NamingFullDisk(logger, path, ("log", "log_dict")) if path else logger
