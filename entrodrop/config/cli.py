"""How the recipes read their command line and report a mistake: ``@cli.parse`` in place of
torchtune's ``@config.parse``.

It parses ``--config`` and the ``key=value`` overrides exactly as torchtune does, with three
changes:

- ``key={}`` empties a mapping. OmegaConf merges a dictionary into the YAML's, so in torchtune
  ``evaluation.lm_eval.tasks={}`` silently keeps every task; here it means no task.
- A config file that is not valid YAML (a tab, a duplicate key, an unclosed bracket) is one
  ``ConfigError`` naming the file, line and column; so is a command-line value that is not (an
  unclosed ``{`` or ``[``), naming the override and how to quote it (``read_config``).
- An error a user can fix (``entrodrop.errors.EntroDropError``: a config value, a store or
  cache, the output directory, a checkpoint) prints its message alone and exits with status 1;
  in an N-process run, rank 0 alone prints it (torchrun's own report of the failed processes
  follows). ``ENTRODROP_DEBUG=1`` shows the traceback.
  Any other exception is a bug and keeps its traceback.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"tasks": {"math": ["gsm8k"]}})
    >>> emptied(cfg, ["tasks={}", "seed=1"]).tasks
    {}
"""

import argparse
import functools
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import GrammarParseError
from torchtune.config._parse import TuneRecipeArgumentParser
from torchtune.config._utils import _merge_yaml_and_cli_args

from entrodrop.errors import ConfigError, EntroDropError

DEBUG_ENV = "ENTRODROP_DEBUG"
# How long a rank other than 0 waits to be stopped before it prints its own error.
RANK_ZERO_GRACE_S = 10.0


def emptied(cfg: DictConfig, overrides: List[str]) -> DictConfig:
    """``cfg`` with every ``key={}`` of ``overrides`` set to an empty mapping (not merged)."""
    for arg in overrides:
        key, _, value = arg.partition("=")
        if value.strip() == "{}" and not key.startswith("~"):
            OmegaConf.update(cfg, key, {}, merge=False)
    return cfg


@contextmanager
def reported() -> Iterator[None]:
    """Turn an ``EntroDropError`` into its message on stderr (rank 0 only) and exit status 1."""
    try:
        yield
    except EntroDropError as error:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        rank = int(os.environ.get("RANK", "0"))
        if rank:
            # torchrun stops every process once one fails: if rank 0 fails too (a config error
            # fails on every rank), it prints while this one waits; if not, this rank prints.
            time.sleep(RANK_ZERO_GRACE_S)
        print(f"{f'[rank {rank}] ' if rank else ''}{error}\n(exit status 1; {DEBUG_ENV}=1 shows the traceback)",
              file=sys.stderr, flush=True)
        sys.exit(1)


def exit_with(error: EntroDropError) -> None:
    """Report ``error`` as a recipe's errors are (``reported``: its message alone, exit status 1),
    from code that runs outside a recipe's main: ``recipes/__init__.py`` as it is imported."""
    with reported():
        raise error


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def yaml_problem(error: yaml.YAMLError) -> str:
    """What a YAML error says, in one line, with its line and column counted from 1.

    Example:
        >>> try:
        ...     yaml.safe_load("a: [1, 2\\nb: 3")
        ... except yaml.YAMLError as e:
        ...     print(yaml_problem(e))
        line 2, column 2: expected ',' or ']', but got ':' (while parsing a flow sequence at line 1, column 4)
    """
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return " ".join(str(error).split())
    context = f" ({error.context} at {_where(error.context_mark)})" if error.context and error.context_mark else (
        f" ({error.context})" if error.context else "")
    return f"{_where(error.problem_mark)}: {error.problem}{context}"


def _tab_at(mark) -> bool:
    """Whether the character a YAML error points at is a tab (YAML never indents with one)."""
    if mark is None:
        return False
    if mark.buffer is not None:
        return mark.buffer[mark.pointer : mark.pointer + 1] == "\t"
    lines = Path(mark.name).read_text().splitlines() if Path(mark.name).is_file() else []
    return mark.line < len(lines) and lines[mark.line][mark.column : mark.column + 1] == "\t"


def read_config(parser: TuneRecipeArgumentParser) -> DictConfig:
    """The config of ``--config`` and the ``key=value`` overrides, as torchtune's ``config.parse``
    reads it, with ``key={}`` an empty mapping (``emptied``).

    Raises:
        ConfigError: a config file that does not exist or is not valid YAML (its file, line and
            column), or an override that is not ``key=value`` or whose value is not valid YAML.
    """
    try:
        yaml_args, cli_args = parser.parse_known_args()
    except FileNotFoundError as e:
        raise ConfigError(f"--config {e.filename}: no such file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        tab = "; YAML indents with spaces, never a tab" if _tab_at(mark) else ""
        # A ReaderError (a control character, bytes that are not UTF-8) has no mark, but its file's name.
        name = mark.name if mark else getattr(e, "name", "")
        raise ConfigError(f"--config {name} is not valid YAML: {yaml_problem(e)}{tab}") from None
    except ValueError as e:  # torchtune's "Additional flag arguments not supported"
        raise ConfigError(str(e)) from None
    for arg in cli_args:  # each override alone, so the one that is not YAML is named
        try:
            _merge_yaml_and_cli_args(argparse.Namespace(), [arg])
        except ValueError as e:  # torchtune: "must be in the form of key=value"; a ~key it cannot remove is later
            if not arg.startswith("~"):
                raise ConfigError(str(e)) from None
        except (yaml.YAMLError, GrammarParseError) as e:
            key, _, value = arg.partition("=")
            why = yaml_problem(e) if isinstance(e, yaml.YAMLError) else " ".join(str(e).split("\n")[0].split())
            raise ConfigError(f"the command-line value {arg!r} is not valid YAML ({why}): quote a text that holds "
                              f"YAML syntax ({key}='\"{value}\"'), and close each bracket ({key}=[a,b], "
                              f"{key}={{a: 1}})") from None
    try:
        return emptied(_merge_yaml_and_cli_args(yaml_args, cli_args), cli_args)
    except ValueError as e:  # torchtune: a ~key that is not in the config
        raise ConfigError(str(e)) from None


def parse(recipe_main: Callable[[DictConfig], Any]) -> Callable[[], Any]:
    """torchtune's ``config.parse``, with ``key={}`` as an empty mapping and errors as messages."""

    @functools.wraps(recipe_main)
    def wrapper() -> Any:
        parser = TuneRecipeArgumentParser(description=recipe_main.__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
        with reported():
            return recipe_main(read_config(parser))

    return wrapper
