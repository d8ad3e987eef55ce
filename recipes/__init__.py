# The recipes are scripts run with `tune run recipes/<name>.py`; this file makes `recipes`
# a package so `tune run` (which imports `recipes.<name>`) finds ours before the `recipes`
# package torchtune 0.6.1 installs. See docs/training.md, "Why `make` links the repository into the environment".
#
# `tune run recipes/x.py` names a file beside the working directory but imports a module
# found on sys.path. If this package is not that directory, running on would silently run
# another checkout's code (or fail with "No module named recipes.x"): refuse, and say why.

import os
import sys
from pathlib import Path


def _launched_module():
    """``recipes.<name>`` when the process was started as ``tune run recipes/<name>.py``: tune
    sets argv[0] to the module (one process), torchrun runs ``python -m`` (several)."""
    if sys.argv and sys.argv[0].startswith("recipes."):
        return sys.argv[0]
    argv = getattr(sys, "orig_argv", [])
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1].startswith("recipes."):
        return argv[argv.index("-m") + 1]
    return None


def _check_launched_from_here():
    module = _launched_module()
    if module is None:
        return
    here, beside = Path(__file__).resolve().parent, Path(os.getcwd(), "recipes")
    if beside.is_dir() and beside.resolve() == here:
        return
    given = module.replace(".", "/") + ".py"
    if not beside.is_dir():
        why = f"{beside} does not exist"
        fix = f"run it from the directory that holds recipes/ ({here.parent}), or give the path of your copy"
    elif not (beside / "__init__.py").is_file():
        why = f"{beside} has no __init__.py, so Python cannot import it as the package `recipes`"
        fix = f"add an empty {beside / '__init__.py'}, or keep your recipes in a folder of another name"
    else:
        why = "this environment's start-up file puts another checkout first"
        fix = "run `python scripts/link_repo.py` from this checkout (make does), then try again"
    # Its message alone, as a recipe's errors are (a traceback of the import machinery says nothing more).
    from entrodrop.config.cli import exit_with
    from entrodrop.errors import RecipeLocationError

    exit_with(RecipeLocationError(f"tune run {given}: the package `recipes` that was imported is {here}, not the one "
                                  f"beside {given}: {why}. It would run other code than the file you gave; {fix}."))


_check_launched_from_here()
