"""Several seeds of one setting: telling an effect from noise in the paper's tables 3 and 4.

A *setting* is one configuration trained with one or more seeds (``seed`` draws the data order and
every mask, on the same base). Each run is reduced to its figures (``run_figures``): the best epoch
and minimum validation loss (table 4's columns), the validation loss by entropy bucket at the last
evaluation, and the best target-group average where tasks were scored. A setting's figure is the
mean over its seeds.

The *seed spread* of a figure is the widest range (largest minus smallest) over the seeds of any one
setting that has several (``seed_spread``): how far the seed alone moved that figure. A difference
between two settings no larger than it is noise at this scale, and the tables say so beside every
difference (``difference``); a figure measured with one seed per setting has no spread, and its
differences are marked as unchecked.

    >>> settings = {"baseline": [{"min_val_loss": 1.00}, {"min_val_loss": 1.02}], "other": [{"min_val_loss": 0.95}]}
    >>> spread = seed_spread(settings, ["min_val_loss"])
    >>> round(spread["min_val_loss"], 4)
    0.02
    >>> difference(mean_figures(settings["other"])["min_val_loss"],
    ...            mean_figures(settings["baseline"])["min_val_loss"], spread["min_val_loss"], 4)
    '-0.0600 (beyond the spread 0.0200)'
"""

from typing import Dict, List, Optional, Sequence

from entrodrop.eval.records import best_epoch
from entrodrop.report import compared, documents_per_task, markdown_table, run_signal, summarize

FIGURES = ("best_epoch", "min_val_loss", "end_all", "end_low", "end_high", "low_rise", "high_rise", "last_epoch",
           "best_average")


def run_figures(run: Dict, target_group: Optional[str] = None,
                kept: Optional[List[Dict]] = None) -> Dict[str, Optional[float]]:
    """One run's figures (``FIGURES``) from ``entrodrop.report.read_run``'s record: the best epoch
    and its all-token validation loss; the validation loss of each bucket at the last evaluation;
    how far the low- and high-entropy buckets rose from their own lowest to the last evaluation (the
    rebound of the paper's figure 1c); the last evaluation's epoch; the best ``target_group``
    average among ``kept``, the evaluations ``entrodrop.report.compared`` keeps over the runs being
    compared (None: over this run alone), so that no average of other tasks, metrics or documents
    per task stands beside another. None where the run has no evaluation of it.

    >>> run = {"evals": [{"target_epoch": e, "val_loss": {"all": a, "low": lo, "high": hi}}
    ...                  for e, a, lo, hi in [(1.0, 2.0, 1.0, 3.0), (2.0, 1.5, 0.5, 2.0), (3.0, 1.8, 0.6, 2.5)]]}
    >>> figures = run_figures(run)
    >>> figures["best_epoch"], figures["min_val_loss"], figures["end_all"], figures["last_epoch"]
    (2.0, 1.5, 1.8, 3.0)
    >>> round(figures["low_rise"], 3), round(figures["high_rise"], 3), figures["best_average"]
    (0.1, 0.5, None)
    """
    with_loss = [e for e in run["evals"] if "val_loss" in e]
    best = best_epoch(with_loss) if with_loss else None
    last = with_loss[-1] if with_loss else {"val_loss": {}}
    rise = lambda bucket: (last["val_loss"][bucket] - min(e["val_loss"][bucket] for e in with_loss)  # noqa: E731
                           if with_loss and bucket in last["val_loss"] else None)
    return {"best_epoch": best.get("target_epoch") if best else None,
            "min_val_loss": best["val_loss"]["all"] if best else None,
            "end_all": last["val_loss"].get("all"), "end_low": last["val_loss"].get("low"),
            "end_high": last["val_loss"].get("high"), "low_rise": rise("low"), "high_rise": rise("high"),
            "last_epoch": last.get("target_epoch"),
            "best_average": summarize(run, target_group, kept)["best_average"] if target_group else None}


def _known(values: Sequence[Optional[float]]) -> List[float]:
    return [v for v in values if v is not None]


def mean_figures(seeds: Sequence[Dict[str, Optional[float]]]) -> Dict[str, Optional[float]]:
    """Each figure's mean over a setting's seeds (None where no seed has it).

    >>> mean_figures([{"best_epoch": 10.0}, {"best_epoch": 13.0}, {"best_epoch": None}])
    {'best_epoch': 11.5}
    """
    keys = {k for figures in seeds for k in figures}
    means = {}
    for key in sorted(keys, key=lambda k: FIGURES.index(k) if k in FIGURES else len(FIGURES)):
        known = _known([figures.get(key) for figures in seeds])
        means[key] = sum(known) / len(known) if known else None
    return means


def value_range(seeds: Sequence[Dict[str, Optional[float]]], key: str) -> Optional[float]:
    """Largest minus smallest ``key`` over a setting's seeds; None with fewer than two.

    >>> value_range([{"x": 1.0}, {"x": 1.5}, {"x": 1.2}], "x")
    0.5
    """
    known = _known([figures.get(key) for figures in seeds])
    return max(known) - min(known) if len(known) >= 2 else None


def seed_spread(settings: Dict[str, Sequence[Dict]], keys: Sequence[str] = FIGURES) -> Dict[str, Optional[float]]:
    """Each figure's seed spread: the widest ``value_range`` over the settings that have several
    seeds of it (None where none has)."""
    spread = {}
    for key in keys:
        ranges = _known([value_range(seeds, key) for seeds in settings.values()])
        spread[key] = max(ranges) if ranges else None
    return spread


def difference(value: Optional[float], reference: Optional[float], spread: Optional[float], digits: int) -> str:
    """``value - reference`` as a table cell, with the seed spread beside it: beyond it, within it
    (noise at this scale), or no spread measured.

    >>> difference(3.40, 3.45, 0.02, 2)
    '-0.05 (beyond the spread 0.02)'
    >>> difference(3.44, 3.45, 0.02, 2)
    '-0.01 (within the spread 0.02)'
    >>> difference(3.44, 3.45, None, 2)
    '-0.01 (no seed spread measured)'
    >>> difference(None, 3.45, 0.02, 2)
    '-'
    """
    if value is None or reference is None:
        return "-"
    delta = value - reference
    if spread is None:
        return f"{delta:+.{digits}f} (no seed spread measured)"
    return f"{delta:+.{digits}f} ({'beyond' if abs(delta) > spread else 'within'} the spread {spread:.{digits}f})"


def verdict(value: Optional[float], reference: Optional[float], spread: Optional[float],
            lower_is_better: bool = True) -> str:
    """Whether ``value`` is better than ``reference`` by more than the seed spread: ``holds``,
    ``reversed`` (worse by more than the spread), ``within the seed spread``, or, without a
    spread or a figure, ``not measured``.

    >>> verdict(3.40, 3.45, 0.02), verdict(3.50, 3.45, 0.02), verdict(3.44, 3.45, 0.02)
    ('holds', 'reversed', 'within the seed spread')
    >>> verdict(30.0, 10.0, 3.0, lower_is_better=False)
    'holds'
    """
    if value is None or reference is None or spread is None:
        return "not measured"
    gain = (reference - value) if lower_is_better else (value - reference)
    if abs(gain) <= spread:
        return "within the seed spread"
    return "holds" if gain > 0 else "reversed"


def setting_figures(settings: Dict[str, Sequence[Dict]], target_group: Optional[str] = None) -> Dict[str, List[Dict]]:
    """Each setting's runs (``entrodrop.report.read_run`` records, one a seed) as ``run_figures``,
    every best ``target_group`` average taken among the evaluations scored alike over all of them."""
    kept = compared([run for runs in settings.values() for run in runs], target_group) if target_group else None
    return {label: [run_figures(run, target_group, kept) for run in runs] for label, runs in settings.items()}


def _cell(seeds: Sequence[Dict], key: str, digits: int) -> str:
    """A setting's mean of ``key``, with its seeds' range when it has several."""
    mean = mean_figures(seeds).get(key)
    if mean is None:
        return "-"
    known = _known([figures.get(key) for figures in seeds])
    spread = f" [{min(known):.{digits}f}, {max(known):.{digits}f}]" if len(known) >= 2 else ""
    return f"{mean:.{digits}f}{spread}"


def settings_table(settings: Dict[str, Sequence[Dict]], baseline: str, spread: Dict[str, Optional[float]],
                   target_group: Optional[str] = None) -> List[str]:
    """A markdown table, one setting a row (label -> its runs, one a seed, as ``read_run`` gives
    them): seeds, best epoch and minimum validation loss (means, the seeds' range in brackets), each
    with its difference from ``baseline``'s beside the seed ``spread``, the validation loss by
    entropy bucket at the end, and the best ``target_group`` average where one was scored (the
    documents per task in the header; a run scored otherwise says so instead of a number). When a
    row's gate ranked the loss, a last column marks each row's signal (``run_signal``); a table of
    entropy runs alone is the paper's and has none. Columns empty in every row are left out
    (``markdown_table``)."""
    figures = setting_figures(settings, target_group)
    kept = compared([run for runs in settings.values() for run in runs], target_group) if target_group else []
    base = mean_figures(figures[baseline])
    signals = any(run_signal(runs[0]) == "loss" for runs in settings.values())
    rows = []
    for label, runs in settings.items():
        seeds, means = figures[label], mean_figures(figures[label])
        average = (_cell(seeds, "best_average", 3) if means.get("best_average") is not None
                   else summarize(runs[0], target_group, kept)["documents"] if target_group else "-")
        rows.append([label, str(len(runs)),
                     _cell(seeds, "best_epoch", 2), difference(means.get("best_epoch"), base.get("best_epoch"),
                                                               spread.get("best_epoch"), 2),
                     _cell(seeds, "min_val_loss", 4), difference(means.get("min_val_loss"), base.get("min_val_loss"),
                                                                 spread.get("min_val_loss"), 4),
                     _cell(seeds, "end_all", 4), _cell(seeds, "end_low", 4), _cell(seeds, "end_high", 4), average,
                     difference(means.get("best_average"), base.get("best_average"), spread.get("best_average"), 3)]
                    + [run_signal(runs[0])] * signals)
    documents = f" ({documents_per_task(kept[-1].get('limit'))} documents per task)" if kept else ""
    return markdown_table(["setting", "seeds", "best epoch", f"vs {baseline}", "min val loss", f"vs {baseline}",
                           "end val loss", "end low-entropy", "end high-entropy",
                           f"best {target_group or 'target'} average{documents}", f"vs {baseline}"]
                          + ["signal"] * signals, rows)


# The regime where the paper's mechanism exists (its section 2 and figure 1c), read off a
# baseline alone, before any comparison: set before the CPU regime was chosen (docs/reproduction.md).
HORIZON_PER_BEST_EPOCH = 5.0  # the run goes on for at least 5 times its best epoch, as the paper's
MIN_HIGH_RISE = 0.1  # nats: the high-entropy bucket's loss rebounds at least this much
MAX_LOW_SHARE = 1 / 3  # the low-entropy bucket rises at most a third as much as the high one


def regime_check(figures: Dict[str, Optional[float]]) -> List[List[str]]:
    """Whether a baseline's ``run_figures`` show the paper's regime: ``[what, measured, holds]``
    rows - overfitting early (the last evaluation at least ``HORIZON_PER_BEST_EPOCH`` times the
    best epoch), the high-entropy bucket rebounding (by ``MIN_HIGH_RISE`` or more), and the
    low-entropy bucket staying low and flat (ending below the high bucket's lowest, and rising at
    most ``MAX_LOW_SHARE`` of the high bucket's rise).

    >>> rows = regime_check({"best_epoch": 8.0, "last_epoch": 56.0, "low_rise": 0.2, "high_rise": 0.9,
    ...                      "end_low": 0.64, "end_high": 2.3})
    >>> [row[2] for row in rows]
    ['yes', 'yes', 'yes']
    >>> regime_check({"best_epoch": 15.0, "last_epoch": 28.0, "low_rise": 0.34, "high_rise": 0.03,
    ...               "end_low": 3.59, "end_high": 3.31})[0]
    ['best epoch at most 1/5 of the horizon', 'epoch 15.00 of 28.00 (1/1.9)', 'no']
    """
    best, last, low, high = (figures[k] for k in ("best_epoch", "last_epoch", "low_rise", "high_rise"))
    high_lowest = figures["end_high"] - high
    share = f" = {low / high:.2f} of the high bucket's +{high:.3f}" if high > 0 else f", the high bucket +{high:.3f}"
    yes = lambda holds: "yes" if holds else "no"  # noqa: E731
    return [
        [f"best epoch at most 1/{HORIZON_PER_BEST_EPOCH:g} of the horizon",
         f"epoch {best:.2f} of {last:.2f} (1/{last / best:.1f})", yes(last >= HORIZON_PER_BEST_EPOCH * best)],
        [f"high-entropy loss rebounds by {MIN_HIGH_RISE:g} nats or more", f"+{high:.3f} from its lowest to the end",
         yes(high >= MIN_HIGH_RISE)],
        [f"low-entropy loss stays low and flat: below the high bucket's lowest, rising at most "
         f"{MAX_LOW_SHARE:.2f} of its rise", f"ends at {figures['end_low']:.3f} (high's lowest {high_lowest:.3f}), "
         f"+{low:.3f}{share}", yes(figures["end_low"] < high_lowest and low <= MAX_LOW_SHARE * high)],
    ]


def regime_table(baselines: Dict[str, Dict[str, Optional[float]]]) -> List[str]:
    """``regime_check`` of each baseline run (name -> ``run_figures``) as one markdown table: a
    row per criterion, the measured figure and whether it holds in a column per run."""
    checks = {name: regime_check(figures) for name, figures in baselines.items()}
    rows = [[what] + [f"{checks[name][k][1]}: {checks[name][k][2]}" for name in checks]
            for k, (what, _, _) in enumerate(next(iter(checks.values())))]
    return markdown_table(["criterion", *checks], rows)


# What the verdict lines compare: (figure, what it is, digits, lower is better).
VERDICT_FIGURES = (("min_val_loss", "minimum validation loss", 4, True), ("best_epoch", "best epoch", 2, False),
                   ("end_all", "validation loss at the end", 4, True), ("end_high", "high-entropy loss at the end", 4, True))


def verdict_lines(settings: Dict[str, Sequence[Dict]], setting: str, reference: str,
                  spread: Dict[str, Optional[float]]) -> List[str]:
    """One sentence a figure of ``VERDICT_FIGURES``: ``setting`` against ``reference`` (each the
    mean of its seeds), the difference, the seed spread, and the ``verdict`` (for the best epoch,
    later is better: the paper's delay of overfitting); without a spread, no verdict.

    >>> settings = {"b": [{"min_val_loss": 1.00}, {"min_val_loss": 1.01}], "e": [{"min_val_loss": 0.97}, {"min_val_loss": 0.98}]}
    >>> verdict_lines(settings, "e", "b", seed_spread(settings, ["min_val_loss"]))[0]
    'e against b, minimum validation loss: 0.9750 (2 seeds) against 1.0050 (2 seeds), -0.0300; seed spread 0.0100: holds.'
    >>> verdict_lines({"b": [{"min_val_loss": 1.0}], "e": [{"min_val_loss": 0.9}]}, "e", "b", {})[0][-60:]
    '0 (1 seed), -0.1000; no seed spread measured, so not judged.'
    """
    lines = []
    for key, what, digits, lower_is_better in VERDICT_FIGURES:
        value, ref = mean_figures(settings[setting]).get(key), mean_figures(settings[reference]).get(key)
        if value is None or ref is None:
            continue
        n, m = len(settings[setting]), len(settings[reference])
        width = spread.get(key)
        judged = ("no seed spread measured, so not judged" if width is None else
                  f"seed spread {width:.{digits}f}: {verdict(value, ref, width, lower_is_better)}")
        lines.append(f"{setting} against {reference}, {what}: {value:.{digits}f} ({n} seed{'s' * (n > 1)}) against "
                     f"{ref:.{digits}f} ({m} seed{'s' * (m > 1)}), {value - ref:+.{digits}f}; {judged}.")
    return lines
