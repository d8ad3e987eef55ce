"""What this environment changes in a `tune run` process as it starts, before torchtune runs.

The start-up line that scripts/link_repo.py writes into the environment calls ``started`` in
every `tune run`, and in every process torchrun starts for one. It changes two things:

- A recipe given by any path runs (``redirected``). torchtune 0.6.1's `tune run` runs a file that
  is not one of its own recipes by importing it as a module named after its path
  (``my_recipes/run.py`` -> ``my_recipes.run``; torchrun's ``python -m`` on N processes). A path
  that starts with ``/`` or ``.`` gives a name that starts with a dot (``/tmp/x/run.py`` ->
  ``.tmp.x.run``, ``../x/run.py`` -> ``...x.run``), which Python refuses: "ImportError: Relative
  module names not supported". Such a path is handed to ``RUNNER``
  (``entrodrop.config.run_recipe_file``), which runs the file at that path as torchtune runs its
  own recipes (``runpy.run_path``). Any other path is left to torchtune, and
  ``tune run recipes/<name>.py`` to recipes/__init__.py's check that the ``recipes`` package
  imported is the folder named.
- Ctrl-C ends `tune run` with status 130 and no traceback (``quiet_interrupt``). The recipe's
  own ``@cli.parse`` reports a Ctrl-C in its main (what the run kept); this covers the launcher
  around it: torchrun's, which passes Ctrl-C on to the workers (rank 0 prints what was kept), then
  raises it again as a ``SignalException`` with a traceback of torchrun's frames; and a run, or
  the workers of one, stopped before the recipe's main (in its imports), which has written nothing.

Standard library only: the start-up line runs this file (by its path) as every `tune run` starts,
before torchtune is imported.
"""

import os
import signal
import sys
from typing import Callable, List, Mapping

# What `tune run` is given instead of the path; it imports it as ``entrodrop.config.run_recipe_file``.
RUNNER = "entrodrop/config/run_recipe_file.py"
# A command stopped by Ctrl-C exits as a shell reports one killed by SIGINT: 128 + 2.
INTERRUPTED_EXIT = 130
INTERRUPTED = "interrupted (Ctrl-C)"
# Set (and not 0): errors and Ctrl-C keep their traceback (entrodrop.config.cli, ``quiet_interrupt``).
DEBUG_ENV = "ENTRODROP_DEBUG"


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def is_tune_run(argv: List[str]) -> bool:
    return os.path.basename(argv[0]) == "tune" and argv[1:2] == ["run"]


def redirected(argv: List[str]) -> List[str]:
    """``argv`` of a `tune run` whose recipe is a path that torchtune cannot import (it starts with
    ``/`` or ``.``), with ``RUNNER`` put before that path; any other command line as it is.

    The recipe is the argument before ``--config`` that ends in ``.py``: torchtune requires
    ``--config`` after it, and torchrun's options, before it, take no ``.py`` value.

    Example:
        >>> redirected(["/venv/bin/tune", "run", "--nproc_per_node", "2", "../x/run.py", "--config", "c.yaml"])[4:6]
        ['entrodrop/config/run_recipe_file.py', '../x/run.py']
    """
    if not is_tune_run(argv):
        return argv
    before_config = argv.index("--config") if "--config" in argv else len(argv)
    for i, arg in enumerate(argv[2:before_config], start=2):
        if arg.endswith(".py") and not arg.startswith("-"):
            return [*argv[:i], RUNNER, *argv[i:]] if arg.startswith(("/", ".")) else argv
    return argv


def quiet_interrupt(hook: Callable, exit: Callable[[int], None] = os._exit) -> Callable:
    """``sys.excepthook`` ``hook`` with Ctrl-C left uncaught in `tune run` ended by ``exit(130)``:
    torchrun's ``SignalException`` for SIGINT silently (its workers have reported it), a
    ``KeyboardInterrupt`` with the line ``INTERRUPTED`` (in a worker, rank 0 alone prints it). Any
    other exception goes to ``hook``, and so does every one with ``ENTRODROP_DEBUG=1``.

    The status is set by ``exit``, ``os._exit``: an exception hook cannot change it otherwise (the
    interpreter exits with 1 after it), and the launcher has nothing left to clean up by then (its
    workers have ended). ``SignalException`` is known by name: torch is not imported at start-up.
    """

    def excepthook(kind, error, traceback) -> None:
        launcher = kind.__name__ == "SignalException" and getattr(error, "sigval", None) == signal.SIGINT
        if debugging() or not (launcher or issubclass(kind, KeyboardInterrupt)):
            return hook(kind, error, traceback)
        if not launcher and os.environ.get("RANK", "0") == "0":
            print(INTERRUPTED, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        exit(INTERRUPTED_EXIT)

    return excepthook


def started(argv: List[str], environ: Mapping[str, str] = os.environ) -> None:
    """What the start-up line does: in a `tune run`, ``argv`` (``sys.argv``) rewritten in place as
    ``redirected`` says; there and in a process torchrun started (it alone sets
    ``TORCHELASTIC_RUN_ID``), Ctrl-C ended quietly (``quiet_interrupt``), and in the latter the
    process ends with its launcher (``entrodrop.launch``). Any other process is left as it is."""
    if is_tune_run(argv):
        argv[:] = redirected(argv)
    if is_tune_run(argv) or "TORCHELASTIC_RUN_ID" in environ:
        sys.excepthook = quiet_interrupt(sys.excepthook)
    if "TORCHELASTIC_RUN_ID" in environ:
        # A worker ends with its launcher from its first line on (entrodrop/launch.py, by its path
        # as this file is): a launcher killed while the worker imports torch is not missed.
        launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "launch.py")
        __import__("runpy").run_path(launch)["end_with_launcher"](environ)
