"""Several seeds of one setting: telling an effect from noise in the paper's tables 3 and 4.

A *setting* is one configuration trained with one or more seeds (``seed`` draws the data order and
every mask, on the same base). Each run is reduced to its figures
(``entrodrop.analysis.run_figures.run_figures``): the best epoch and minimum validation loss (table
4's columns), the validation loss by entropy bucket at the last evaluation, how far each bucket
rebounded, and the best target-group average where tasks were scored. A setting's figure is the
mean over its seeds, shown with their range.

Two settings are compared *seed by seed*. Seed s draws the same data order and the same base in
every setting, so the difference ``setting_s - reference_s`` holds what the setting changed and
little of what the seed did (common random numbers): these paired differences vary far less than
either setting's own seeds. ``paired`` gives their mean, its 95% t-interval over the seeds both
settings have (``entrodrop.analysis.confidence.t_interval``) and how many lie on each side of 0; a seed one of
the two lacks is left out. ``verdict`` reads a paired difference against the direction a claim
expects: ``holds`` when the interval excludes 0 in that direction, ``reversed`` when it excludes 0
the other way, ``not resolved`` when it holds 0 or there is a single pair (no interval).

    >>> base = {0: {"min_val_loss": 1.00}, 1: {"min_val_loss": 1.02}, 2: {"min_val_loss": 0.99}}
    >>> other = {0: {"min_val_loss": 0.97}, 1: {"min_val_loss": 0.995}, 2: {"min_val_loss": 0.96}}
    >>> p = paired(other, base, "min_val_loss")
    >>> p["n"], round(p["mean"], 4), p["below"], verdict(p, lower_is_better=True)
    (3, -0.0283, 3, 'holds')
    >>> difference_cell(p, 4)
    '-0.0283 [-0.0355, -0.0212]'
"""

from typing import Dict, List, Optional, Sequence

from entrodrop.analysis.confidence import CONFIDENCE, t_interval
from entrodrop.analysis.markdown import markdown_table
from entrodrop.analysis.run_figures import (
    BUCKET_TITLES,
    FIGURES,
    compared,
    documents_covered,
    documents_per_task,
    loss_curve,
    run_figures,
    run_signal,
)

# The verdicts a paired difference gets.
HOLDS, REVERSED, NOT_RESOLVED = "holds", "reversed", "not resolved"


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


def by_seed(runs: Sequence[Dict]) -> Dict[int, Dict]:
    """``runs`` (``entrodrop.analysis.run_figures.read_run`` records, one a seed) keyed by the seed each trained
    with (its saved config's ``seed``; a run without a saved config by its place in ``runs``).

    Raises:
        ValueError: two runs of one setting trained with the same seed (not two seeds).
    """
    keyed: Dict[int, Dict] = {}
    for k, run in enumerate(runs):
        seed = run.get("seed")
        seed = k if seed is None else seed
        if seed in keyed:
            raise ValueError(f"runs {keyed[seed]['name']} and {run['name']} both trained with seed {seed}: "
                             "a setting's runs are one a seed")
        keyed[seed] = run
    return keyed


def setting_figures(settings: Dict[str, Sequence[Dict]], target_group: Optional[str] = None) -> Dict[str, Dict[int, Dict]]:
    """Each setting's runs (``read_run`` records, one a seed) as ``{seed: run_figures}``, every best
    ``target_group`` average taken among the evaluations scored alike over all of them."""
    kept = compared([run for runs in settings.values() for run in runs], target_group) if target_group else None
    return {label: {seed: run_figures(run, target_group, kept) for seed, run in by_seed(runs).items()}
            for label, runs in settings.items()}


def paired(setting: Dict[int, Dict], reference: Dict[int, Dict], key: str) -> Optional[Dict]:
    """``setting``'s figure ``key`` minus ``reference``'s, seed by seed (each ``{seed: figures}``),
    over the seeds both have it for: ``{"seeds", "differences", "n", "mean", "low", "high",
    "below", "above"}``, the interval (``low``, ``high``) None for one pair; None for no pair.

    >>> p = paired({0: {"x": 1.0}, 1: {"x": 2.0}, 5: {"x": 9.0}}, {0: {"x": 0.5}, 1: {"x": 1.0}}, "x")
    >>> p["seeds"], p["differences"], p["below"], p["above"]
    ([0, 1], [0.5, 1.0], 0, 2)
    >>> paired({0: {"x": 1.0}}, {0: {"x": 0.5}}, "x")["low"] is None
    True
    """
    seeds = sorted(s for s in set(setting) & set(reference)
                   if setting[s].get(key) is not None and reference[s].get(key) is not None)
    if not seeds:
        return None
    differences = [setting[s][key] - reference[s][key] for s in seeds]
    mean, half = t_interval(differences)
    return {"seeds": seeds, "differences": differences, "n": len(seeds), "mean": mean,
            "low": None if half is None else mean - half, "high": None if half is None else mean + half,
            "below": sum(d < 0 for d in differences), "above": sum(d > 0 for d in differences)}


def verdict(difference: Optional[Dict], lower_is_better: bool = True) -> str:
    """A ``paired`` difference against the direction a claim expects (``lower_is_better``: the
    setting's figure below the reference's): ``holds`` when the interval excludes 0 that way,
    ``reversed`` when it excludes 0 the other way, ``not resolved`` otherwise (0 inside, one pair,
    or no pair).

    >>> verdict({"low": -0.03, "high": -0.01}), verdict({"low": 0.01, "high": 0.03})
    ('holds', 'reversed')
    >>> verdict({"low": -0.01, "high": 0.01}), verdict({"low": None, "high": None}), verdict(None)
    ('not resolved', 'not resolved', 'not resolved')
    >>> verdict({"low": 1.0, "high": 3.0}, lower_is_better=False)  # a later best epoch
    'holds'
    """
    if difference is None or difference["low"] is None:
        return NOT_RESOLVED
    if difference["high"] < 0:
        return HOLDS if lower_is_better else REVERSED
    if difference["low"] > 0:
        return REVERSED if lower_is_better else HOLDS
    return NOT_RESOLVED


def difference_cell(difference: Optional[Dict], digits: int) -> str:
    """A ``paired`` difference as a table cell: its mean and interval, ``-`` without a pair.

    >>> difference_cell({"mean": -0.02, "low": -0.03, "high": -0.01, "n": 3}, 3)
    '-0.020 [-0.030, -0.010]'
    >>> difference_cell({"mean": -0.02, "low": None, "high": None, "n": 1}, 3)
    '-0.020 (1 seed)'
    """
    if difference is None:
        return "-"
    mean = f"{difference['mean']:+.{digits}f}"
    if difference["low"] is None:
        return f"{mean} (1 seed)"
    return f"{mean} [{difference['low']:+.{digits}f}, {difference['high']:+.{digits}f}]"


def _cell(seeds: Sequence[Dict], key: str, digits: int) -> str:
    """A setting's mean of ``key``, with its seeds' range when it has several."""
    mean = mean_figures(seeds).get(key)
    if mean is None:
        return "-"
    known = _known([figures.get(key) for figures in seeds])
    spread = f" [{min(known):.{digits}f}, {max(known):.{digits}f}]" if len(known) >= 2 else ""
    return f"{mean:.{digits}f}{spread}"


# The figures a settings table shows, each (figure, column title, digits), with its paired
# difference from the table's first setting beside it where ``compare`` says so.
TABLE_FIGURES = (("best_epoch", "best epoch", 2, True), ("min_val_loss", "min val loss", 4, True),
                 ("end_all", "end val loss", 4, True), ("end_low", "end low-entropy", 4, False),
                 ("end_high", "end high-entropy", 4, False))


def settings_table(settings: Dict[str, Sequence[Dict]], baseline: str, target_group: Optional[str] = None) -> List[str]:
    """A markdown table, one setting a row (label -> its runs, one a seed, as ``read_run`` gives
    them): its seeds; the best epoch, the minimum validation loss and the validation loss at the
    end, each the mean over the seeds with their range in brackets and beside it the paired
    difference from ``baseline`` with its 95% interval (``difference_cell``); the end loss of each
    entropy bucket; the best ``target_group`` average where one was scored (the documents per task
    in the header; a run scored otherwise says so instead of a number). When a row's gate ranked
    the loss, a last column marks each row's signal (``run_signal``); a table of entropy runs alone
    is the paper's and has none. Columns empty in every row are left out (``markdown_table``)."""
    figures = setting_figures(settings, target_group)
    kept = compared([run for runs in settings.values() for run in runs], target_group) if target_group else []
    signals = any(run_signal(runs[0]) == "loss" for runs in settings.values())
    rows = []
    for label, runs in settings.items():
        seeds = list(figures[label].values())
        row = [label, str(len(runs))]
        for key, _, digits, compare in TABLE_FIGURES:
            row.append(_cell(seeds, key, digits))
            if compare:
                row.append(difference_cell(paired(figures[label], figures[baseline], key), digits))
        average = (_cell(seeds, "best_average", 3) if mean_figures(seeds).get("best_average") is not None
                   else documents_covered(runs[0], target_group, kept) if target_group else "-")
        rows.append(row + [average, difference_cell(paired(figures[label], figures[baseline], "best_average"), 3)]
                    + [run_signal(runs[0])] * signals)
    header = ["setting", "seeds"]
    for _, title, _, compare in TABLE_FIGURES:
        header += [title] + [f"vs {baseline}, paired"] * compare
    documents = f" ({documents_per_task(kept[-1].get('limit'))} documents per task)" if kept else ""
    return markdown_table(header + [f"best {target_group or 'target'} average{documents}", f"vs {baseline}, paired"]
                          + ["signal"] * signals, rows)


def claim_row(claim: str, figures: Dict[str, Dict[int, Dict]], setting: str, reference: str, key: str,
              lower_is_better: bool, digits: int) -> List[str]:
    """One claim as a markdown row: the claim, the two settings' means of ``key``, the paired
    difference with its interval, how many seeds go the claim's way, and the ``verdict``.

    >>> figures = {"e": {0: {"x": 0.97}, 1: {"x": 0.98}}, "b": {0: {"x": 1.0}, 1: {"x": 1.0}}}
    >>> claim_row("e lowers x", figures, "e", "b", "x", True, 3)
    ['e lowers x', 'e 0.975 vs b 1.000', '-0.025 [-0.089, +0.039]', '2 of 2', 'not resolved']
    """
    mean = lambda label: mean_figures(list(figures[label].values())).get(key)  # noqa: E731
    value, ref = mean(setting), mean(reference)
    means = f"{setting} {value:.{digits}f} vs {reference} {ref:.{digits}f}" if None not in (value, ref) else "-"
    difference = paired(figures[setting], figures[reference], key)
    agree = f"{difference['below' if lower_is_better else 'above']} of {difference['n']}" if difference else "-"
    return [claim, means, difference_cell(difference, digits), agree, verdict(difference, lower_is_better)]


CLAIM_HEADER = ["the paper's claim", "means", f"paired difference [{CONFIDENCE:.0%} interval]",
                "seeds the claim's way", "verdict"]


# The regime where the paper's mechanism exists (its section 2 and figure 1c), read off a
# baseline alone, before any comparison: set before the CPU regime was chosen (docs/reproduction.md).
HORIZON_PER_BEST_EPOCH = 5.0  # the run goes on for at least 5 times its best epoch, as the paper's
MIN_HIGH_RISE = 0.1  # nats: the high-entropy bucket's loss rebounds at least this much
MAX_LOW_SHARE = 1 / 3  # the low-entropy bucket rises at most a third as much as the high one
# The premise itself (section 2: the low-entropy tokens are "already accurately modeled", their loss
# "quickly drops and remains near zero"): the base model's mean entropy of the held-out low half, and
# the baseline's lowest low-bucket loss, at most this many nats; fixed before any run of the regime it
# chose (docs/reproduction.md, "A fourth criterion, fixed before any run of it").
MAX_LOW_NATS = 0.1


def regime_check(figures: Dict[str, Optional[float]]) -> List[List[str]]:
    """Whether a baseline's ``run_figures`` show the paper's regime: ``[what, measured, holds]``
    rows - overfitting early (the last evaluation at least ``HORIZON_PER_BEST_EPOCH`` times the
    best epoch), the high-entropy bucket rebounding (by ``MIN_HIGH_RISE`` or more), the
    low-entropy bucket staying low and flat (ending below the high bucket's lowest, and rising at
    most ``MAX_LOW_SHARE`` of the high bucket's rise), and the paper's premise, its low-entropy
    tokens near-certain (the base model's mean entropy of them and the bucket's lowest loss, each at
    most ``MAX_LOW_NATS``; "no" where the run did not record the base's entropy).

    >>> rows = regime_check({"best_epoch": 8.0, "last_epoch": 56.0, "low_rise": 0.2, "high_rise": 0.9,
    ...                      "end_low": 0.64, "end_high": 2.3, "low_lowest": 0.44, "base_low_entropy": 0.72})
    >>> [row[2] for row in rows]
    ['yes', 'yes', 'yes', 'no']
    >>> rows[3][1]
    'base entropy 0.720, lowest loss 0.440'
    >>> regime_check({"best_epoch": 8.0, "last_epoch": 56.0, "low_rise": 0.02, "high_rise": 0.9, "end_low": 0.08,
    ...               "end_high": 2.3, "low_lowest": 0.06, "base_low_entropy": 0.09})[3][1:]
    ['base entropy 0.090, lowest loss 0.060', 'yes']
    >>> regime_check({"best_epoch": 15.0, "last_epoch": 28.0, "low_rise": 0.34, "high_rise": 0.03,
    ...               "end_low": 3.59, "end_high": 3.31})[0]
    ['best epoch at most 1/5 of the horizon', 'epoch 15.00 of 28.00 (1/1.9)', 'no']
    """
    best, last, low, high = (figures[k] for k in ("best_epoch", "last_epoch", "low_rise", "high_rise"))
    base, lowest = figures.get("base_low_entropy"), figures.get("low_lowest")
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
        [f"low-entropy tokens near-certain: the base's mean entropy of them and the bucket's lowest loss each at "
         f"most {MAX_LOW_NATS:g} nats",
         f"base entropy {'not recorded' if base is None else f'{base:.3f}'}, lowest loss "
         f"{'-' if lowest is None else f'{lowest:.3f}'}",
         yes(base is not None and lowest is not None and max(base, lowest) <= MAX_LOW_NATS)],
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


def verdict_lines(figures: Dict[str, Dict[int, Dict]], setting: str, reference: str) -> List[str]:
    """One sentence a figure of ``VERDICT_FIGURES``: ``setting`` against ``reference`` (each
    ``{seed: run_figures}``), their means, the paired difference with its interval and the
    ``verdict`` (for the best epoch, later is the paper's way: overfitting delayed).

    >>> figures = {"b": {0: {"min_val_loss": 1.00}, 1: {"min_val_loss": 1.01}},
    ...            "e": {0: {"min_val_loss": 0.97}, 1: {"min_val_loss": 0.975}}}
    >>> verdict_lines(figures, "e", "b")[0]
    'e against b, minimum validation loss: 0.9725 against 1.0050 (2 seeds each), paired -0.0325 [-0.0643, -0.0007]: holds.'
    >>> verdict_lines({"b": {0: {"min_val_loss": 1.0}}, "e": {0: {"min_val_loss": 0.9}}}, "e", "b")[0].split(": ")[1]
    '0.9000 against 1.0000 (1 seed each), paired -0.1000 (1 seed).'
    """
    lines = []
    for key, what, digits, lower_is_better in VERDICT_FIGURES:
        difference = paired(figures[setting], figures[reference], key)
        if difference is None:
            continue
        value, ref = (mean_figures([figures[label][s] for s in difference["seeds"]])[key] for label in (setting, reference))
        n = difference["n"]
        judged = "" if difference["low"] is None else f": {verdict(difference, lower_is_better)}"
        lines.append(f"{setting} against {reference}, {what}: {value:.{digits}f} against {ref:.{digits}f} "
                     f"({n} seed{'s' * (n > 1)} each), paired {difference_cell(difference, digits)}{judged}.")
    return lines


def _curves(runs: Dict[int, Dict], bucket: str) -> Dict[int, List[tuple]]:
    """Each seed's ``loss_curve`` of ``bucket``: ``(target epoch, validation loss)`` at every evaluation, in order."""
    return {seed: loss_curve(run, bucket) for seed, run in runs.items()}


def _pyplot():
    """matplotlib's pyplot on the file-only backend: imported where a seed plot is drawn, as only
    those need it (the report, ``entrodrop.analysis.report``, chooses the same backend)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def band(curves: Sequence[Sequence[tuple]]) -> List[tuple]:
    """``(epoch, mean, half-width)`` at each evaluation index that two or more of ``curves`` (one a
    seed, ``[(epoch, value), ...]``) reach: the k-th evaluation of every seed is the end of its k-th
    target epoch (the last, at the final step, may come a fraction of an epoch later), so the
    epoch is their mean and the band a 95% t-interval of the mean value over the seeds.

    >>> [(e, m, round(h, 3)) for e, m, h in band([[(1.0, 2.0), (2.0, 1.0)], [(1.0, 2.2), (2.0, 1.2)]])]
    [(1.0, 2.1, 1.271), (2.0, 1.1, 1.271)]
    """
    points = []
    for k in range(max(map(len, curves), default=0)):
        here = [curve[k] for curve in curves if len(curve) > k]
        if len(here) >= 2:
            mean, half = t_interval([value for _, value in here])
            points.append((sum(epoch for epoch, _ in here) / len(here), mean, half))
    return points


def draw_seed_bands(settings: Dict[str, Sequence[Dict]], path) -> None:
    """The validation loss by target epoch, each setting's mean over its seeds with its 95% band
    (``band``), on all tokens and the two entropy buckets (the paper's figure 1c, the low and high
    buckets on one y-axis); beneath, each setting's difference from the first (the baseline), paired
    by seed, with its band and 0 marked. One legend, below the plots, so no curve is hidden.

    ``settings``: label -> its runs (``read_run`` records, one a seed, paired by ``by_seed``).
    """
    plt = _pyplot()
    keyed = {label: by_seed(runs) for label, runs in settings.items()}
    reference = next(iter(keyed.values()))
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.4), sharex=True)
    axes[0, 2].sharey(axes[0, 1])
    axes[1, 2].sharey(axes[1, 1])
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, (bucket, title) in enumerate(BUCKET_TITLES.items()):
        top, bottom = axes[0, column], axes[1, column]
        base = _curves(reference, bucket)
        for k, (label, runs) in enumerate(keyed.items()):
            curves = _curves(runs, bucket)
            for ax, points in ((top, band(list(curves.values()))),
                               (bottom, band([[(e, v - b) for (e, v), (_, b) in zip(curves[s], base[s])]
                                              for s in curves if s in base]) if k else [])):
                if points:
                    epochs, means, halves = map(list, zip(*points))
                    ax.plot(epochs, means, color=cycle[k % len(cycle)], label=label if ax is top else None)
                    ax.fill_between(epochs, [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)],
                                    color=cycle[k % len(cycle)], alpha=0.2, linewidth=0)
        top.set(title=title, ylabel="validation loss")
        bottom.axhline(0.0, color="black", linewidth=0.8)
        bottom.set(xlabel="target epoch", ylabel=f"minus {next(iter(keyed))}, paired by seed")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    seeds = max(len(runs) for runs in keyed.values())
    fig.suptitle(f"validation loss: the mean over {seeds} seeds with its {CONFIDENCE:.0%} band")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=len(keyed), frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_differences_by_entropy(points: Dict[str, List[tuple]], path) -> None:
    """Paired differences against the base model's mean entropy of the held-out low half, a panel
    each: ``points`` is panel title -> ``[(base low-half entropy, paired, label), ...]`` (``paired``
    differences, drawn as their mean with the 95% interval as an error bar, and 0 marked), so that
    one sees whether an effect appears as the low half becomes near-certain."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(points), figsize=(4.6 * len(points), 4.0), squeeze=False)
    for ax, (title, series) in zip(axes[0], points.items()):
        for entropy, difference, label in series:
            if difference is None or difference["low"] is None:
                continue
            mean = difference["mean"]
            ax.errorbar([entropy], [mean], yerr=[[mean - difference["low"]], [difference["high"] - mean]], fmt="o",
                        capsize=4)
            ax.annotate(f"{label} ({difference['n']} seeds)", (entropy, mean), textcoords="offset points",
                        xytext=(6, 6), fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set(title=title, xlabel="base model's mean entropy of the held-out low half (nats)",
               ylabel=f"paired difference, {CONFIDENCE:.0%} interval")
        ax.set_xlim(left=0.0)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
