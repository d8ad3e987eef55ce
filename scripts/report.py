"""Plots and a table of one or more runs' training dynamics (see entrodrop/report.py).

    python scripts/report.py outputs/baseline outputs/entrodrop --out report \
        [--target-group code] [--baseline baseline]

Each argument is a recipe's ``output_dir``. ``--baseline`` names the run (its directory name)
from which to propose the curriculum midpoint; none is proposed while its validation loss is
still falling at its last evaluation. A run directory that does not exist, a ``--target-group``
no run has and a ``--baseline`` no run is named are errors (exit status 2), which list what exists.
"""

import argparse
from pathlib import Path

from entrodrop.report import check_selection, read_run, write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run output directories")
    parser.add_argument("--out", required=True, help="where to write the plots and table.md")
    parser.add_argument("--target-group", default=None, help="task group for the best average (e.g. math)")
    parser.add_argument("--baseline", default=None, help="run name to propose the midpoint from")
    args = parser.parse_args()
    runs, problems = [], []
    for run_dir in args.runs:
        try:
            runs.append(read_run(run_dir))
        except FileNotFoundError as e:
            problems.append(str(e))
    if not problems:
        problems = check_selection(runs, args.target_group, args.baseline)
    if problems:
        parser.error("\n  ".join(["nothing written:", *problems]))
    written = write_report(runs, args.out, args.target_group, args.baseline)
    print((Path(args.out) / "table.md").read_text())
    print("wrote " + ", ".join(written["files"]))


if __name__ == "__main__":
    main()
