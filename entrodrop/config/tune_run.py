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

- An error a user can fix, in a run of N processes, is the last thing `tune run` prints
  (``quiet_child_failure``). Each worker prints its message (``entrodrop.config.cli``) and writes it
  into the error file torchrun gives it (``write_error_file``); torchrun then raises a
  ``ChildFailedError`` whose traceback of some 50 lines scrolled the message away. The launcher
  prints the failed rank and its message in its place instead, and exits with the worker's status.

Standard library only: the start-up line runs this file (by its path) as every `tune run` starts,
before torchtune is imported.
"""

import json
import os
import signal
import sys
import time
from typing import Callable, List, Mapping, Optional, Tuple

# What `tune run` is given instead of the path; it imports it as ``entrodrop.config.run_recipe_file``.
RUNNER = "entrodrop/config/run_recipe_file.py"
# A command stopped by Ctrl-C exits as a shell reports one killed by SIGINT: 128 + 2.
INTERRUPTED_EXIT = 130
INTERRUPTED = "interrupted (Ctrl-C)"
# Set (and not 0): errors and Ctrl-C keep their traceback (entrodrop.config.cli, ``quiet_interrupt``).
DEBUG_ENV = "ENTRODROP_DEBUG"
# Where torchrun asks each worker to write why it failed, for the launcher to read.
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
# The key that marks an error file as written by ``write_error_file``: a message a user can act on.
REPORTED = "entrodrop_reported"


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


def write_error_file(message: str, environ: Mapping[str, str] = os.environ) -> None:
    """In a process torchrun started, write ``message`` (a user's error, printed already) into
    the error file torchrun named for it, in the form its ``record`` writes (which the launcher
    copies without a warning), for the launcher to repeat (``quiet_child_failure``). Elsewhere
    nothing."""
    path = environ.get(ERROR_FILE_ENV)
    if path:
        with open(path, "w") as f:
            json.dump({"message": {"message": message, "extraInfo": {"timestamp": str(int(time.time()))},
                                   REPORTED: True}}, f)


def reported_failure(error: BaseException) -> Optional[Tuple[int, str, int]]:
    """(rank, message, exit status) of the first process of torchrun's ``ChildFailedError`` that
    reported an error a user can fix (``write_error_file``); None when none did (a bug, a signal:
    torchrun's report stays)."""
    failures = getattr(error, "failures", {})
    reported = [(failure.timestamp, rank, failure) for rank, failure in failures.items()
                if isinstance(failure.message, dict) and failure.message.get(REPORTED)]
    if not reported:
        return None
    _, rank, failure = min(reported, key=lambda found: found[:2])
    return rank, failure.message["message"], failure.exitcode if failure.exitcode > 0 else 1


def quiet_child_failure(hook: Callable, exit: Callable[[int], None] = os._exit) -> Callable:
    """``sys.excepthook`` ``hook`` with torchrun's ``ChildFailedError`` for a worker that reported an
    error a user can fix (``reported_failure``) turned into that error, last: the rank and its
    message, then the exit status line the worker printed, and ``exit`` with the worker's status.
    Any other exception goes to ``hook``, and so does every one with ``ENTRODROP_DEBUG=1``.
    ``ChildFailedError`` is known by name: torch is not imported at start-up."""

    def excepthook(kind, error, traceback) -> None:
        found = reported_failure(error) if kind.__name__ == "ChildFailedError" and not debugging() else None
        if found is None:
            return hook(kind, error, traceback)
        rank, message, status = found
        print(f"rank {rank} failed: {message}\n(exit status {status}; {DEBUG_ENV}=1 shows the traceback)",
              file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        exit(status)

    return excepthook


def started(argv: List[str], environ: Mapping[str, str] = os.environ) -> None:
    """What the start-up line does: in a `tune run`, ``argv`` (``sys.argv``) rewritten in place as
    ``redirected`` says, and a worker's error that a user can fix shown last (``quiet_child_failure``);
    there and in a process torchrun started (it alone sets ``TORCHELASTIC_RUN_ID``), Ctrl-C ended
    quietly (``quiet_interrupt``), and in the latter the process ends with its launcher
    (``entrodrop.launch``). Any other process is left as it is."""
    if is_tune_run(argv):
        argv[:] = redirected(argv)
    if is_tune_run(argv) or "TORCHELASTIC_RUN_ID" in environ:
        sys.excepthook = quiet_interrupt(sys.excepthook)
    if is_tune_run(argv):
        sys.excepthook = quiet_child_failure(sys.excepthook)
    if "TORCHELASTIC_RUN_ID" in environ:
        # A worker ends with its launcher from its first line on (entrodrop/launch.py, by its path
        # as this file is): a launcher killed while the worker imports torch is not missed.
        launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "launch.py")
        __import__("runpy").run_path(launch)["end_with_launcher"](environ)
