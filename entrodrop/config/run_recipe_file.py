"""Run the recipe file at a path, as ``__main__``: what `tune run /any/path/run.py` runs.

    python -m entrodrop.config.run_recipe_file <path> --config ... [key=value ...]

torchtune cannot import a recipe given by an absolute, ``./`` or ``../`` path, so
``entrodrop.config.tune_run`` hands such a path to this module, which `tune run` imports (on
one process) or torchrun starts with ``python -m`` (on each of N). It runs the file itself, as
torchtune runs its own recipes, so the code that runs is the file named, wherever it lives.
"""

import os
import runpy
import sys
from typing import List

from entrodrop.config.cli import exit_with
from entrodrop.errors import RecipeLocationError


def main(argv: List[str]) -> None:
    """Run the file ``argv[1]`` as ``__main__`` with the arguments ``argv[2:]`` (``sys.argv`` is
    ``[path, *arguments]`` as it runs, as for ``python <path>``).

    Raises:
        SystemExit: there is no file at ``argv[1]``; the message names the path it was looked for at.
    """
    path = argv[1]
    if not os.path.isfile(path):
        exit_with(RecipeLocationError(
            f"tune run {path}: there is no file {os.path.abspath(path)} (a relative path is taken from the directory "
            f"tune run starts in, {os.getcwd()}): check the path"))
    sys.argv = [path, *argv[2:]]
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
