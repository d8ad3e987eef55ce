"""How the recipes read their command line and report a mistake: ``@cli.parse`` in place of
torchtune's ``@config.parse``.

It parses ``--config`` and the ``key=value`` overrides exactly as torchtune does, with these
changes:

- ``key={}`` empties a mapping. OmegaConf merges a dictionary into the YAML's, so in torchtune
  ``evaluation.lm_eval.tasks={}`` silently keeps every task; here it means no task.
- A config file that is not valid YAML (a tab, a duplicate key, an unclosed bracket) is one
  ``ConfigError`` naming the file, line and column; so is a command-line value that is not (an
  unclosed ``{`` or ``[``), naming the override and how to quote it, and a file that is empty
  or a list, not a mapping of names (``read_config``).
- An error a user can fix (``entrodrop.errors.EntroDropError``: a config value, a store or
  cache, the output directory, a checkpoint) prints its message alone and exits with status 1;
  in an N-process run, rank 0 alone prints it, and torchrun's launcher prints it again last, in
  place of its report of the failed processes (``entrodrop.launch.tune_run``). So is a write the
  disk refused for want of room (``full_disk_line``): the path, the room left there, and how the
  same command goes on. ``ENTRODROP_DEBUG=1`` shows the traceback.
  Any other exception is a bug and keeps its traceback.
- Ctrl-C prints one line, from rank 0, in place of the ``KeyboardInterrupt`` traceback: what the
  run kept and how to go on, as the recipe says (``parse(how_to_go_on=...)``), and exits with status 130
  (``entrodrop.launch.tune_run`` does the same around the recipe's main: torchrun's launcher, the
  imports).

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"tasks": {"math": ["gsm8k"]}})
    >>> emptied(cfg, ["tasks={}", "seed=1"]).tasks
    {}
"""

import argparse
import functools
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import GrammarParseError
from torchtune.config._parse import TuneRecipeArgumentParser
from torchtune.config._utils import _merge_yaml_and_cli_args
from tqdm import tqdm

from entrodrop.config.check import whole_config_problem
from entrodrop.errors import ConfigError, DiskFullError, EntroDropError, disk_full
from entrodrop.launch.tune_run import INTERRUPTED, INTERRUPTED_EXIT, debugging, exit_reported
from entrodrop.launch.workers import end_with_launcher


def emptied(cfg: DictConfig, overrides: List[str]) -> DictConfig:
    """``cfg`` with every ``key={}`` of ``overrides`` set to an empty mapping (not merged)."""
    for arg in overrides:
        key, _, value = arg.partition("=")
        if value.strip() == "{}" and not key.startswith("~"):
            OmegaConf.update(cfg, key, {}, merge=False)
    return cfg


def _said(how_to_go_on: Callable[[], Optional[str]]) -> Optional[str]:
    """``how_to_go_on()``, what a stopped run kept and how to go on, read from the disk as the run stopped;
    None where it fails (stopped before the config was checked, so a key it reads may be missing),
    as a traceback here would hide the line."""
    try:
        return how_to_go_on()
    except Exception:
        return None


def interrupted(how_to_go_on: Callable[[], Optional[str]]) -> str:
    """The line printed when Ctrl-C stops a run: ``how_to_go_on()``, what the run kept and how to
    go on, where it says."""
    said = _said(how_to_go_on)
    return f"{INTERRUPTED}: {said}" if said else INTERRUPTED


def _close_progress_bars() -> None:
    """Close the open tqdm progress bars (tqdm keeps them in ``tqdm._instances``): a bar left open
    draws itself again as the process exits, below the line that says what Ctrl-C kept."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def full_disk_line(error: OSError, how_to_go_on: Callable[[], Optional[str]]) -> str:
    """The line for a write the device refused for want of room (``disk_full``): the path being
    written (a ``DiskFullError``'s, else the ``OSError``'s own, where it has one), the room left
    there, and how the same command goes on from what was written, as ``how_to_go_on()`` says for Ctrl-C
    (every store and checkpoint is written whole or not at all, so what is there is sound)."""
    where = error if isinstance(error, DiskFullError) else DiskFullError(error.errno, error.strerror, error.filename)
    return f"{where}: free some space; {_said(how_to_go_on) or 'then run the same command again'}"


@contextmanager
def reported(how_to_go_on: Callable[[], Optional[str]] = lambda: None) -> Iterator[None]:
    """Turn an ``EntroDropError`` into its message on stderr (rank 0 only) and exit status 1, so too a
    full disk (``full_disk_line``), and Ctrl-C into one line (``interrupted``, rank 0 only) and exit status 130."""
    try:
        yield
    except KeyboardInterrupt:
        if debugging():
            raise
        # A second SIGINT would interrupt this report with a traceback: torchrun passes the one it
        # got on to every process, and a user may press Ctrl-C twice.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _close_progress_bars()
        if int(os.environ.get("RANK", "0")) == 0:
            print(interrupted(how_to_go_on), file=sys.stderr, flush=True)
        sys.exit(INTERRUPTED_EXIT)
    except (EntroDropError, OSError) as error:
        full = isinstance(error, DiskFullError) or disk_full(error)
        if debugging() or not (full or isinstance(error, EntroDropError)):
            raise
        if full:
            _close_progress_bars()  # a bar left open draws itself again below the line, as for Ctrl-C
            error = full_disk_line(error, how_to_go_on)
        exit_reported(str(error))


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


def _config_file(parser: TuneRecipeArgumentParser) -> str:
    """The path given to ``--config``, by argparse alone (torchtune's parse also loads the file)."""
    return argparse.ArgumentParser.parse_known_args(parser)[0].config


def read_config(parser: TuneRecipeArgumentParser) -> DictConfig:
    """The config of ``--config`` and the ``key=value`` overrides, as torchtune's ``config.parse``
    reads it, with ``key={}`` an empty mapping (``emptied``).

    Raises:
        ConfigError: a config file that does not exist or is a directory, is not valid YAML (its file, line and
            column) or holds no mapping of names (empty, a list: ``whole_config_problem``), or an
            override that is not ``key=value`` or whose value is not valid YAML.
    """
    try:
        yaml_args, cli_args = parser.parse_known_args()
    except FileNotFoundError as e:
        raise ConfigError(f"--config {e.filename}: no such file") from None
    except IsADirectoryError as e:
        raise ConfigError(f"--config {e.filename} is a directory: name a YAML config file in it") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        tab = "; YAML indents with spaces, never a tab" if _tab_at(mark) else ""
        # A ReaderError (a control character, bytes that are not UTF-8) has no mark, but its file's name.
        name = mark.name if mark else getattr(e, "name", "")
        raise ConfigError(f"--config {name} is not valid YAML: {yaml_problem(e)}{tab}") from None
    except ValueError as e:  # torchtune's "Additional flag arguments not supported"
        raise ConfigError(str(e)) from None
    except (TypeError, AssertionError):  # torchtune's set_defaults(**file), and its assert that no key is config
        path = _config_file(parser)
        loaded = OmegaConf.load(path)
        why = whole_config_problem(loaded) or ("a key named config is --config's own name: remove it"
                                               if "config" in loaded else None)
        if why is None:
            raise
        raise ConfigError(f"--config {path}: {why}") from None
    if not vars(yaml_args):  # the file's keys; an empty file reached the recipe as a config without any
        raise ConfigError(f"--config {_config_file(parser)}: {whole_config_problem({})}")
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


def parse(recipe_main: Optional[Callable[[DictConfig], Any]] = None, *,
          how_to_go_on: Optional[Callable[[DictConfig], str]] = None) -> Callable[[], Any]:
    """torchtune's ``config.parse``, with ``key={}`` as an empty mapping and errors as messages.
    ``@parse(how_to_go_on=f)``: on Ctrl-C or a full disk, ``f(cfg)`` says what the run kept and how
    to go on."""
    if recipe_main is None:
        return functools.partial(parse, how_to_go_on=how_to_go_on)

    @functools.wraps(recipe_main)
    def wrapper() -> Any:
        end_with_launcher()  # a process torchrun started ends with its launcher, even a SIGKILLed one
        parser = TuneRecipeArgumentParser(description=recipe_main.__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
        cfg = None
        with reported(lambda: how_to_go_on(cfg) if how_to_go_on and cfg is not None else None):
            cfg = read_config(parser)
            return recipe_main(cfg)

    return wrapper
