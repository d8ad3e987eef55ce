"""What this environment changes in a `tune run` process as it starts, before torchtune runs.

The start-up line that scripts/install_tune_run_hook.py writes into the environment calls ``started`` in
every `tune run` (the launcher; no other process). It changes three things:

- A recipe given by any path runs the file at that path (``redirected``). torchtune 0.6.1's
  `tune run` runs a file that is not one of its own recipes by importing it as a module named
  after its path (``my_recipes/run.py`` -> ``my_recipes.run``; torchrun's ``python -m`` on N
  processes), with the working directory appended to ``sys.path`` after site-packages. So
  ``recipes/x.py`` imports torchtune's own top-level ``recipes`` package, which shadows ours, and
  a path that starts with ``/`` or ``.`` gives a name that starts with a dot, which Python refuses
  ("Relative module names not supported"). The path is handed to ``RUNNER``
  (``entrodrop.launch.run_recipe_file``), which runs the file as torchtune runs its own recipes
  (``runpy.run_path``): the code that runs is the file named, whatever its folder is called.
- Ctrl-C ends `tune run` with status 130 and no traceback (``quiet_interrupt``). The recipe's
  own ``@cli.parse`` reports a Ctrl-C in its main (what the run kept); this covers the launcher
  around it: torchrun's, which passes Ctrl-C on to the workers (rank 0 prints what was kept), then
  raises it again as a ``SignalException`` with a traceback of torchrun's frames; and a run of one
  process stopped before the recipe's main (in its imports), which has written nothing. A worker
  does the same for itself (``run_recipe_file``).
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
from typing import Callable, List, Mapping, NoReturn, Optional, Tuple

# What `tune run` is given instead of the path; it imports it as ``entrodrop.launch.run_recipe_file``.
RUNNER = "entrodrop/launch/run_recipe_file.py"
# A command stopped by Ctrl-C exits as a shell reports one killed by SIGINT: 128 + 2.
INTERRUPTED_EXIT = 130
INTERRUPTED = "interrupted (Ctrl-C)"
# Set (and not 0): errors and Ctrl-C keep their traceback (entrodrop.config.cli, ``quiet_interrupt``).
DEBUG_ENV = "ENTRODROP_DEBUG"
# Where torchrun asks each worker to write why it failed, for the launcher to read.
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
# The key that marks an error file as written by ``write_error_file``: a message a user can act on.
REPORTED = "entrodrop_reported"
# A rank other than 0 waits this long before it prints a user's error: torchrun stops every process
# once one fails, so an error every rank meets (a config error) is printed by rank 0 alone.
RANK_ZERO_GRACE_S = 10.0


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def is_tune_run(argv: List[str]) -> bool:
    return os.path.basename(argv[0]) == "tune" and argv[1:2] == ["run"]


def redirected(argv: List[str]) -> List[str]:
    """``argv`` of a `tune run` whose recipe is a path (``*.py``), with ``RUNNER`` put before that
    path; any other command line (one of torchtune's own recipes, by name) as it is.

    The recipe is the argument before ``--config`` that ends in ``.py``: torchtune requires
    ``--config`` after it, and torchrun's options, before it, take no ``.py`` value.

    Example:
        >>> redirected(["/venv/bin/tune", "run", "--nproc_per_node", "2", "recipes/x.py", "--config", "c.yaml"])[4:6]
        ['entrodrop/launch/run_recipe_file.py', 'recipes/x.py']
    """
    if not is_tune_run(argv):
        return argv
    before_config = argv.index("--config") if "--config" in argv else len(argv)
    for i, arg in enumerate(argv[2:before_config], start=2):
        if arg.endswith(".py") and not arg.startswith("-"):
            return [*argv[:i], RUNNER, *argv[i:]]
    return argv


def _option(argv: List[str], names: Tuple[str, ...]) -> Optional[str]:
    """The value of torchrun's option ``names`` (``--x v`` or ``--x=v``) among ``argv``'s options
    before the recipe's path; None when it is not given."""
    for i, arg in enumerate(argv):
        if arg.endswith(".py") and not arg.startswith("-"):
            break
        name, equals, value = arg.partition("=")
        if name in names:
            return value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
    return None


def rendezvous_problem(argv: List[str]) -> Optional[str]:
    """Why a `tune run` of several nodes cannot meet, in one line, or None. torchtune 0.6.1's `tune
    run` starts torchrun ``--standalone`` whenever ``--rdzv_endpoint`` is missing: a rendezvous on
    this node alone, where ``--master_addr`` and ``--master_port`` are not read. With ``--nnodes``
    above 1 each node would then wait for the others until torchrun gives up (10 minutes) with a
    traceback.

    Example:
        >>> rendezvous_problem(["tune", "run", "--nnodes", "2", "--nproc_per_node", "8", "r.py"]).split(":")[0]
        'tune run --nnodes 2 needs --rdzv_endpoint'
        >>> rendezvous_problem(["tune", "run", "--nnodes=2", "--rdzv_endpoint", "node1:29500", "r.py"]) is None
        True
    """
    nnodes = _option(argv, ("--nnodes",))
    if not nnodes or not nnodes.split(":")[-1].isdigit() or int(nnodes.split(":")[-1]) < 2:
        return None
    if _option(argv, ("--rdzv_endpoint", "--rdzv-endpoint")):
        return None
    master = _option(argv, ("--master_addr", "--master-addr"))
    port = _option(argv, ("--master_port", "--master-port")) or "29500"
    endpoint = f"{master}:{port}" if master else "<first node's host>:<port>"
    return (f"tune run --nnodes {nnodes} needs --rdzv_endpoint: without it torchtune's tune run starts torchrun "
            "--standalone, a rendezvous on this node alone (--master_addr and --master_port are not read), and each "
            "node would wait for the others until it gave up. Start it on every node with the same --rdzv_backend c10d "
            f"--rdzv_endpoint {endpoint} --rdzv_id <one id for the job> (docs/training.md, \"Several nodes\")")


def rendezvous_failure(kind: type, error: BaseException, argv: List[str]) -> Optional[str]:
    """The line for torchrun's launcher giving up on the rendezvous of the `tune run` ``argv``
    (``RendezvousTimeoutError`` and the other rendezvous errors, by name: torch is not imported at
    start-up): what it waited for and what to check. None for any other error.

    Example:
        >>> class RendezvousTimeoutError(Exception): pass
        >>> said = rendezvous_failure(RendezvousTimeoutError, RendezvousTimeoutError(),
        ...                           ["tune", "run", "--nnodes", "2", "--rdzv_endpoint", "n1:29500", "r.py"])
        >>> said.startswith("the nodes did not meet: this node waited for 2 nodes at n1:29500 (--rdzv_id none)")
        True
    """
    if not kind.__name__.startswith("Rendezvous") or not kind.__name__.endswith("Error"):
        return None
    said = " ".join(str(error).split())
    return (f"the nodes did not meet: this node waited for {_option(argv, ('--nnodes',)) or 1} nodes at "
            f"{_option(argv, ('--rdzv_endpoint', '--rdzv-endpoint'))} (--rdzv_id "
            f"{_option(argv, ('--rdzv_id', '--rdzv-id')) or 'none'}) and gave up ({kind.__name__}"
            f"{': ' + said if said else ''}; --rdzv_conf join_timeout=<seconds> sets the wait, 600 by default). Start "
            "tune run on every node within that wait, with the same --nnodes, --rdzv_backend, --rdzv_endpoint and "
            "--rdzv_id, the endpoint's port open to the other nodes (docs/training.md, \"Several nodes\")")


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


def exit_reported(message: str, exit: Callable[[int], None] = sys.exit) -> NoReturn:
    """Print ``message``, a user's error, in one paragraph (``[rank N]`` before it on a rank other
    than 0, which waits ``RANK_ZERO_GRACE_S`` first), hand it to torchrun's launcher
    (``write_error_file``) and exit with status 1 (by ``exit``: ``os._exit`` where a ``SystemExit``
    would be taken for a failed start-up, as in the start-up line)."""
    rank = int(os.environ.get("RANK", "0"))
    if rank:
        time.sleep(RANK_ZERO_GRACE_S)
    print(f"{f'[rank {rank}] ' if rank else ''}{message}\n(exit status 1; {DEBUG_ENV}=1 shows the traceback)",
          file=sys.stderr, flush=True)
    write_error_file(message)  # torchrun's launcher repeats it, last (``quiet_child_failure``)
    exit(1)


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
        met = rendezvous_failure(kind, error, sys.argv) if not debugging() else None
        if met:
            print(f"{met}\n(exit status 1; {DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            return exit(1)
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


def started(argv: List[str]) -> None:
    """What the start-up line does in a `tune run`: several nodes without a rendezvous endpoint
    refused (``rendezvous_problem``), ``argv`` (``sys.argv``) rewritten in place as ``redirected``
    says, Ctrl-C ended quietly (``quiet_interrupt``), and a worker's error that a user can fix, or a
    rendezvous that gave up, shown last in one line (``quiet_child_failure``). Any other process is
    left as it is."""
    if not is_tune_run(argv) or RUNNER in argv:
        # Done already: Python 3.11 runs a virtual environment's .pth files twice (`python -v` shows
        # site-packages processed twice), and the second call must change nothing.
        return
    problem = rendezvous_problem(argv)
    if problem:
        exit_reported(problem, exit=os._exit)  # site.py reports a SystemExit from a start-up line as a fatal error
    argv[:] = redirected(argv)
    sys.excepthook = quiet_child_failure(quiet_interrupt(sys.excepthook))
