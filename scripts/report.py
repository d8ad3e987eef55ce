"""Plots and a table of one or more runs' training dynamics (see entrodrop/analysis/report.py).

    python scripts/report.py outputs/baseline outputs/entrodrop --out report \
        [--target-group code] [--baseline baseline] [--entropy-sample configs/demo/cpt_entrodrop.yaml]

Each argument is a recipe's ``output_dir``. ``--baseline`` names the run (its directory name)
from which to propose the curriculum midpoint; none is proposed while its validation loss is
still falling at its last evaluation. The plots mark that proposal and the j0 each
``token_dropout.midpoint: auto`` run chose for itself; the table lists each run's j0. A run
directory that does not exist, a ``--target-group`` no run has and a ``--baseline`` no run is
named are errors (exit status 2), which list what exists. Without ``--target-group`` the runs'
own target group is used, as their saved configs (``torchtune_config.yaml``) name it; runs that
scored task groups whose configs name none (or several) are an error that lists the groups.
A table column empty in every row is left out. Evaluations without a target epoch
(``recipes/evaluate.py`` on a directory outside a run, or on a checkpoint without progress.json)
are left out of the plots against target epoch, with a note in the log and in table.md.

The table marks each run's signal (``token_dropout.signal``: entropy or loss; ``-`` where the
gate reads none). Runs with ``signal: loss`` also get ``signal_agreement.png``: the share of the
entropy gate's tokens their loss gate takes too, and the rank correlation of the two signals,
against target epoch. With no such run it is not written.

``--entropy-sample CONFIG`` also draws ``entropy_sample.png`` (figure 5c) from a training
config: its tokenizer, its held-out validation store and entropy cache, and its gate
(``token_dropout.gate_percentile`` and ``targeting``); ``--sample-index`` picks the sample.
"""

import argparse
from pathlib import Path

from entrodrop.analysis.report import (
    check_selection,
    write_entropy_sample,
    write_report,
)
from entrodrop.analysis.run_figures import read_run
from entrodrop.errors import DamagedLineError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run output directories")
    parser.add_argument("--out", required=True, help="where to write the plots and table.md")
    parser.add_argument("--target-group", default=None, help="task group for the best average (e.g. math); default: "
                        "the one the runs' configs name (evaluation.lm_eval.target_group)")
    parser.add_argument("--baseline", default=None, help="run name to propose the midpoint from")
    parser.add_argument("--entropy-sample", default=None, metavar="CONFIG",
                        help="a training config: draw one of its held-out samples shaded by entropy (figure 5c)")
    parser.add_argument("--sample-index", type=int, default=0, help="which held-out sample (--entropy-sample)")
    args = parser.parse_args()
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file, and nothing was written: give a folder, for the plots and table.md")
    runs, problems = [], []
    for run_dir in args.runs:
        try:
            runs.append(read_run(run_dir))
        except (FileNotFoundError, DamagedLineError) as e:
            problems.append(str(e))
    if not problems:
        problems = check_selection(runs, args.target_group, args.baseline)
    if problems:
        parser.error("\n  ".join(["nothing written:", *problems]))
    written = write_report(runs, args.out, args.target_group, args.baseline)
    if args.entropy_sample:
        try:
            written["files"].append(str(write_entropy_sample(args.entropy_sample, args.sample_index, Path(args.out))))
        except (FileNotFoundError, IndexError) as e:
            parser.error(str(e))
    print((Path(args.out) / "table.md").read_text())
    print("wrote " + ", ".join(written["files"]))


if __name__ == "__main__":
    main()
