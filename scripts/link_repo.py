"""Put this checkout ahead of site-packages on the virtual environment's ``sys.path``.

    python scripts/link_repo.py        (run by `make`; idempotent)

Why: ``tune run recipes/smoke.py`` imports the module ``recipes.smoke`` after appending the
working directory to ``sys.path``, i.e. after site-packages. torchtune 0.6.1 installs a
top-level ``recipes`` package there whose ``__init__`` raises, so it shadows ours. A ``.pth``
file in site-packages that prepends the repository root makes our ``recipes`` (and
``entrodrop``) win for every interpreter of this environment, without touching torchtune's
files. ``tune run --nproc_per_node N`` needs no help: torchrun runs ``python -m``, which puts
the working directory first.
"""

import sysconfig
from pathlib import Path

PTH_NAME = "entrodrop_repo_first.pth"


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    pth = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    # A .pth line starting with "import" is executed at start-up; plain lines would be appended.
    pth.write_text(f"import sys; sys.path.insert(0, {str(root)!r})\n")
    print(f"{pth}: {root} now precedes site-packages")


if __name__ == "__main__":
    main()
