"""The base class of the errors a user can fix: a wrong config value, a mismatched store or
cache, an output directory that holds another run, a damaged checkpoint, a corpus that cannot
be read. Each message names the problem and the way out, so the recipes print the message
alone, with no traceback (``entrodrop.config.cli``). Any other exception is a bug, and keeps its
traceback.

Each subclass also derives from the built-in error it used to be (``ValueError``,
``FileExistsError``...), so ``except ValueError`` still catches it.
"""

from typing import List, Sequence


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


class RecipeLocationError(EntroDropError, ImportError):
    """``tune run recipes/x.py`` would import another ``recipes`` package than the folder named
    (a copied recipe in a ``recipes/`` folder without ``__init__.py``); the message says the fix.
    Also ``tune run /path/to/x.py`` (or ``./``, ``../``) where there is no such file."""


class DeviceError(EntroDropError, RuntimeError):
    """A ``device`` this torch cannot use (no CUDA build, no GPU, an index beyond the GPUs there are)."""
