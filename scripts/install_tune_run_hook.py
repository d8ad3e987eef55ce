"""Make `tune run <path>.py` run the file at that path, from any directory, quietly on Ctrl-C.

    python scripts/install_tune_run_hook.py        (run by `make`; idempotent)

Why a start-up hook at all: torchtune 0.6.1's `tune run` runs a recipe given by its path by
importing it as a module named after the path, in the `tune` process itself (one process) or with
torchrun's ``python -m`` (N). torchtune's wheel installs a top-level ``recipes`` package, so
``recipes/x.py`` imports torchtune's; an absolute, ``./`` or ``../`` path is refused by Python; and
torchrun's launcher prints a traceback for Ctrl-C and for a worker's error. Nothing of ours runs in
the launcher before that, so the one thing written here is a ``.pth`` line that, in a `tune run`
alone, runs ``started`` of this checkout's ``entrodrop/launch/tune_run.py``. In every other Python
start it compares ``sys.argv[1:2]`` with ``['run']`` (and the program's name with ``tune``) and
stops: it imports nothing and puts nothing on ``sys.path`` (docs/training.md, "Why `make`
installs a start-up hook", gives its cost).

The file is run by its path (``runpy.run_path``), not imported as ``entrodrop.launch.tune_run``: the
working directory is not on ``sys.path`` yet when the line runs. The workers need no hook: they run
``entrodrop.launch.run_recipe_file``, which sets them up itself.

An environment made before this script existed has ``OLD_PTH``, which put the checkout first on
``sys.path`` at every start; it is removed.
"""

import sysconfig
from pathlib import Path

PTH_NAME = "entrodrop_tune_run.pth"
OLD_PTH = "entrodrop_repo_first.pth"

# A .pth line starting with "import" is executed at every start-up, so it must be one line whose
# tests fail at once outside `tune run`: any other program (`python x.py run` too) reads nothing.
LINE = ("import sys; sys.argv[1:2] == ['run'] and sys.argv[0].rpartition('/')[2] == 'tune' and "
        "__import__('os').path.isfile({hook!r}) and __import__('runpy').run_path({hook!r})['started'](sys.argv)\n")


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    site = Path(sysconfig.get_paths()["purelib"])
    (site / OLD_PTH).unlink(missing_ok=True)
    pth = site / PTH_NAME
    pth.write_text(LINE.format(hook=str(root / "entrodrop" / "launch" / "tune_run.py")))
    print(f"{pth}: `tune run` runs {root / 'entrodrop' / 'launch' / 'tune_run.py'} as it starts")


if __name__ == "__main__":
    main()
