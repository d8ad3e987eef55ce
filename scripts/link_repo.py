"""Make ``tune run recipes/x.py`` import the ``recipes`` beside the working directory.

    python scripts/link_repo.py        (run by `make`; idempotent)

Why: ``tune run recipes/smoke.py`` imports the module ``recipes.smoke`` after appending the
working directory to ``sys.path``, i.e. after site-packages. torchtune 0.6.1 installs a
top-level ``recipes`` package there whose ``__init__`` raises, so it shadows ours. This writes
a ``.pth`` file into site-packages that, at every start-up of this environment's interpreter,
puts first on ``sys.path``:

- the working directory, when it holds a ``recipes/__init__.py`` of its own (a second checkout
  sharing the environment, or a user project that keeps its recipes in ``recipes/``);
- this checkout otherwise, so its ``recipes`` and ``entrodrop`` win from any directory.

``tune run --nproc_per_node N`` runs ``python -m``, which puts the working directory first
anyway. ``recipes/__init__.py`` refuses to run when the package imported is still not the one
beside the file given to ``tune run``. A recipe in a folder of another name
(``tune run my_recipes/run.py``) needs none of this.

In a ``tune run`` and the processes torchrun starts for one (no other process: they read nothing
more at start-up), the same line runs ``started`` of this checkout's
``entrodrop/config/tune_run.py``: a recipe given by an absolute, ``./`` or ``../`` path, which
torchtune cannot import as a module, runs as the file it names, and Ctrl-C outside the recipe's
main (the launcher, the imports) ends with status 130 and no traceback. The file is run by its path
(``runpy.run_path``), not imported as ``entrodrop.config.tune_run``: a second checkout that lacks
it, first on ``sys.path`` in its own directory, would fail at every start.
"""

import sysconfig
from pathlib import Path

PTH_NAME = "entrodrop_repo_first.pth"

# A .pth line starting with "import" is executed at start-up (it must be one line, so the
# test for `tune run` or a process torchrun started, which started() makes again, is an `and`).
LINE = ("import os, sys; sys.path.insert(0, (lambda cwd: cwd if os.path.isfile(os.path.join(cwd, 'recipes', "
        "'__init__.py')) else {root!r})(os.getcwd())); (sys.argv[1:2] == ['run'] or 'TORCHELASTIC_RUN_ID' in "
        "os.environ) and os.path.isfile({hook!r}) and __import__('runpy').run_path({hook!r})['started'](sys.argv)\n")


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    pth = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    pth.write_text(LINE.format(root=str(root), hook=str(root / "entrodrop" / "config" / "tune_run.py")))
    print(f"{pth}: the working directory's recipes/ if it has one, else {root}, precede site-packages")


if __name__ == "__main__":
    main()
