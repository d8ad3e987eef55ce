"""Run the recipe file at a path, as ``__main__``: what `tune run <path>.py` runs.

    python -m entrodrop.launch.run_recipe_file <path> --config ... [key=value ...]

torchtune would import a recipe given by its path as a module named after it, which finds
torchtune's own ``recipes`` package for ``recipes/x.py`` and fails for an absolute, ``./`` or
``../`` path; ``entrodrop.launch.tune_run`` hands every path to this module instead, which `tune
run` imports (on one process) or torchrun starts with ``python -m`` (on each of N). It runs the
file itself, as torchtune runs its own recipes, so the code that runs is the file named, wherever
it lives.

In a worker that torchrun started, this module is the first code of ours that runs, before torch
is imported: there it makes the worker end with its launcher (``entrodrop.launch.workers``) and end quietly
on Ctrl-C (``entrodrop.launch.tune_run.quiet_interrupt``), so no start-up hook runs in workers.
"""

import os
import runpy
import sys
from typing import List

from entrodrop.launch.tune_run import exit_reported, quiet_interrupt
from entrodrop.launch.workers import end_with_launcher, started_by_torchrun


def main(argv: List[str]) -> None:
    """Run the file ``argv[1]`` as ``__main__`` with the arguments ``argv[2:]`` (``sys.argv`` is
    ``[path, *arguments]`` as it runs, as for ``python <path>``).

    Raises:
        SystemExit: there is no file at ``argv[1]``; the message names the path it was looked for at.
    """
    path = argv[1]
    if not os.path.isfile(path):
        exit_reported(
            f"tune run {path}: there is no file {os.path.abspath(path)} (a relative path is taken from the directory "
            f"tune run starts in, {os.getcwd()}): check the path")
    sys.argv = [path, *argv[2:]]
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    if started_by_torchrun(os.environ):
        end_with_launcher()  # a worker whose launcher is SIGKILLed while it imports torch ends too
        sys.excepthook = quiet_interrupt(sys.excepthook)
    main(sys.argv)
