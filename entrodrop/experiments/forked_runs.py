"""`tune run` commands run in forks of one process that has imported what the recipes import.

    python -m entrodrop.experiments.forked_runs    (one JSON job a line on stdin, {"argv": [...], "log": path};
                                       the exit status of each, a line on stdout)

A `tune run` of the demo's tiny model spends 6 to 7 s importing torch, torchtune (with torchao and
datasets) and the project before its first step, about 6% of a 100 s run on this 2-core CPU. This
process imports them once (``PRELOAD``) and runs nothing else; each job then runs in a fork of it,
which starts with those modules loaded. The recipe file runs as `tune run` runs it
(``entrodrop.launch.run_recipe_file``), in a process of its own with its own memory, so nothing of
one run reaches the next; its stderr goes to the job's log. ``entrodrop.experiments.run_queue`` starts one such
process a slot with ``forked=True``, on the CPU only: a fork must never follow a CUDA initialization,
which no GPU here has checked for torch's import.

Ctrl-C reaches the runs (they report what they kept and end); this process ignores it and ends
when its standard input closes, after the run in hand.
"""

import importlib
import json
import os
import signal
import sys
import traceback
from typing import Callable, Iterable, Sequence

# What the training recipes import that takes time.
PRELOAD = ("torch", "torchtune", "torchtune.training", "entrodrop.train.token_dropout", "entrodrop.data.loader",
           "entrodrop.config.schemas", "entrodrop.config.cli", "entrodrop.models.checkpointing", "entrodrop.eval.evaluator",
           "entrodrop.eval.task_checks", "entrodrop.models.loss")


def _exit_code(error: SystemExit) -> int:
    """The status ``sys.exit(code)`` ends a process with: 0 for None, the number, or 1 after printing a message."""
    if error.code is None or isinstance(error.code, int):
        return error.code or 0
    print(error.code, file=sys.stderr)
    return 1


def run_in_fork(argv: Sequence[str], log: str) -> int:
    """Run ``argv`` (``tune run <recipe file> ...``) in a fork of this process, stdout to nowhere
    and stderr to ``log``; its exit status (minus the signal that ended it, if one did)."""
    pid = os.fork()
    if pid:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with open(log, "w") as err, open(os.devnull, "w") as out:
            os.dup2(err.fileno(), 2)
            os.dup2(out.fileno(), 1)
        from entrodrop.launch.run_recipe_file import main

        main(["run_recipe_file", *argv[2:]])
        code = 0
    except SystemExit as error:
        code = _exit_code(error)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the fork's end: none of this process's exit handlers run twice


def serve(lines: Iterable[str], answer: Callable[[int], None]) -> None:
    """Import ``PRELOAD``, then run each job of ``lines`` in a fork, ``answer``-ing its status."""
    for module in PRELOAD:
        importlib.import_module(module)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run in hand answers Ctrl-C; this ends with its input
    for line in lines:
        job = json.loads(line)
        answer(run_in_fork(job["argv"], job["log"]))


if __name__ == "__main__":
    serve(sys.stdin, lambda code: print(code, flush=True))
