"""How the recipes read their command line and report a mistake: ``@cli.parse`` in place of
torchtune's ``@config.parse``.

It parses ``--config`` and the ``key=value`` overrides exactly as torchtune does, with two
changes:

- ``key={}`` empties a mapping. OmegaConf merges a dictionary into the YAML's, so in torchtune
  ``evaluation.lm_eval.tasks={}`` silently keeps every task; here it means no task.
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
from typing import Any, Callable, Iterator, List

from omegaconf import DictConfig, OmegaConf
from torchtune.config._parse import TuneRecipeArgumentParser
from torchtune.config._utils import _merge_yaml_and_cli_args

from entrodrop.errors import EntroDropError

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


def parse(recipe_main: Callable[[DictConfig], Any]) -> Callable[[], Any]:
    """torchtune's ``config.parse``, with ``key={}`` as an empty mapping and errors as messages."""

    @functools.wraps(recipe_main)
    def wrapper() -> Any:
        parser = TuneRecipeArgumentParser(description=recipe_main.__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
        yaml_args, cli_args = parser.parse_known_args()
        cfg = emptied(_merge_yaml_and_cli_args(yaml_args, cli_args), cli_args)
        with reported():
            return recipe_main(cfg)

    return wrapper
