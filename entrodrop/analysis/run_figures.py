"""What one run's figures are, read from the files it writes: the one place that both the report of
one or more runs (``entrodrop.analysis.report``: plots and table.md) and the tables of several seeds
(``entrodrop.analysis.multi_seed``: means, paired differences, verdicts) read them from, so a best
epoch or a best average is worked out once, the same way in every table.

A run directory (a recipe's ``output_dir``) holds ``logs/log_*.txt`` (torchtune's disk logger:
one ``Step N | key:value ...`` line per step), ``eval/evals.jsonl`` (one evaluation a line: step,
target epoch, validation loss by entropy bucket, task-group averages) and ``torchtune_config.yaml``
(the config the recipe saved: its seed, its ``token_dropout``, its target group). ``read_run``
reads them into a plain dict, and from it, each a small function of that dict:

    run_figures       the figures the seed tables show (``FIGURES``): the best epoch and its
                      validation loss, each bucket's loss at the end and how far it rebounded
                      from its lowest, the best target-group average, the base's entropy
    summarize         the report's row: best average and the documents per task it covers,
                      best epoch, minimum validation loss
    loss_curve        a bucket's validation loss at each evaluation that has a target epoch
    run_signal        what the run's gate ranked; ``agreement_points``: how far a loss gate
                      moved from the entropy gate, at each evaluation
    compared          which evaluations' averages may stand beside each other, over the runs
                      being compared (scored alike: the same tasks, metrics and documents)
"""

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml

from entrodrop.eval.records import best_epoch, most_complete, read_evaluations, read_lines

# The validation loss's entropy buckets, as the plots title them.
BUCKET_TITLES = {"all": "all tokens", "low": "low-entropy 50%", "high": "high-entropy 25%"}
# What ``run_figures`` gives, in the order the seed tables list them.
FIGURES = ("best_epoch", "min_val_loss", "end_all", "end_low", "end_high", "low_rise", "high_rise", "last_epoch",
           "best_average", "low_lowest", "base_low_entropy")


def step_metrics(line: str) -> Optional[Tuple[int, Dict[str, float]]]:
    """A line of torchtune's step log, ``Step N | key:value key:value``, as ``(N, {key: value})``;
    None for a line of another kind.

    Example:
        >>> step_metrics("Step 3 | loss:2.5 gamma:0.1 ")
        (3, {'loss': 2.5, 'gamma': 0.1})
    """
    match = re.match(r"Step (\d+) \| (.*)", line)
    if not match:
        return None
    items = [item.split(":", 1) for item in match.group(2).split()]
    if any(len(item) != 2 for item in items):
        raise ValueError(f"not key:value pairs: {match.group(2)[:60]!r}")
    return int(match.group(1)), {key: float(value) for key, value in items}


def _eval_key(record: Dict):
    """What tells a run's evaluations apart: the step, or for one outside a run (step None) its
    checkpoint directory's name."""
    return record["step"] if record.get("step") is not None else Path(record.get("checkpoint") or "").name


def read_run(run_dir: str) -> Dict:
    """A run's per-step training metrics and its evaluations, with what its saved config says:
    ``{"name", "steps", "evals", "seed", "token_dropout", "auto_midpoint", "target_group"}``.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist, or holds neither a metric log nor
            evaluations (not a recipe's ``output_dir``).
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    if not list((root / "logs").glob("log_*.txt")) and not (root / "eval" / "evals.jsonl").is_file():
        raise FileNotFoundError(f"run directory {run_dir} holds neither logs/log_*.txt nor eval/evals.jsonl: "
                                "not a recipe's output_dir")
    steps: Dict[int, Dict[str, float]] = {}
    for log_file in sorted((root / "logs").glob("log_*.txt")):
        for step, metrics in filter(None, read_lines(log_file, step_metrics, unterminated_is_cut=True)):
            steps.setdefault(step, {}).update(metrics)
    evals = read_evaluations(root / "eval")
    # A resumed run may evaluate a step twice: keep the last. Evaluations outside a run (no step) go last.
    evals = sorted({_eval_key(e): e for e in evals}.values(), key=lambda e: (e.get("step") is None, e.get("step") or 0))
    # The config as the recipe saved it (torchtune's metric loggers write it): the method's settings.
    config_file = root / "torchtune_config.yaml"
    config = (yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}) or {}
    fixed = [e["auto_midpoint"] for e in evals if e.get("auto_midpoint")]
    lm_eval = (config.get("evaluation") or {}).get("lm_eval") or {}
    return {"name": root.name, "steps": dict(sorted(steps.items())), "evals": evals, "seed": config.get("seed"),
            "token_dropout": config.get("token_dropout"), "auto_midpoint": fixed[-1] if fixed else None,
            # the group its best checkpoint was chosen by, when it ran lm-eval tasks
            "target_group": lm_eval.get("target_group") if any((lm_eval.get("tasks") or {}).values()) else None}


def with_epoch(evals: List[Dict]) -> List[Dict]:
    """The evaluations that have a target epoch: those an epoch axis can place."""
    return [e for e in evals if e.get("target_epoch") is not None]


def loss_curve(run: Dict, bucket: str) -> List[Tuple[float, float]]:
    """``(target epoch, validation loss of bucket)`` at each of ``run``'s evaluations that has both, in order.

    >>> loss_curve({"evals": [{"target_epoch": 1.0, "val_loss": {"low": 0.5}}, {"target_epoch": None,
    ...            "val_loss": {"low": 0.1}}, {"target_epoch": 2.0}]}, "low")
    [(1.0, 0.5)]
    """
    return [(e["target_epoch"], e["val_loss"][bucket]) for e in with_epoch(run["evals"]) if "val_loss" in e]


def best_evaluation(run: Dict) -> Optional[Dict]:
    """The evaluation of ``run``'s best epoch, its lowest all-token validation loss
    (``entrodrop.eval.records.best_epoch``); None when none has a validation loss."""
    with_loss = [e for e in run["evals"] if "val_loss" in e]
    return best_epoch(with_loss) if with_loss else None


def compared(runs: List[Dict], group: str) -> List[Dict]:
    """The evaluations whose ``group`` average the tables show, of every run: those scored alike
    (the same tasks, metrics and documents per task) as ``summary.json`` chooses them
    (``most_complete`` over all the runs' records), so no plot or table sets one metric beside another."""
    chosen = {id(e) for e in most_complete([e for run in runs for e in run["evals"]], group)}
    return [e for run in runs for e in run["evals"] if id(e) in chosen]


def documents_per_task(limit: Optional[int]) -> str:
    """A record's ``limit`` as the tables show it: the documents per task its scores cover."""
    return "all" if limit is None else str(limit)


def not_compared(records: List[Dict]) -> str:
    """The documents cell of a run whose ``records`` of the group were all left out by
    ``compared``: their limits, so a reader sees why no average stands beside the others."""
    if not records:
        return "-"
    limits = sorted({e.get("limit") for e in records}, key=lambda limit: math.inf if limit is None else limit)
    return f"{', '.join(map(documents_per_task, limits))}: not compared"


def _shown(run: Dict, target_group: Optional[str], kept: Optional[List[Dict]]) -> Tuple[List[Dict], List[Dict]]:
    """``run``'s evaluations of ``target_group`` among ``kept`` (those ``compared`` keeps over the
    runs being compared; None: over this run alone), and those it scored otherwise, left out."""
    ids = {id(e) for e in (compared([run], target_group) if kept is None else kept)}
    shown = [e for e in run["evals"] if id(e) in ids]
    left_out = [e for e in run["evals"] if target_group in e.get("groups", {}) and id(e) not in ids]
    return shown, left_out


def best_average(run: Dict, target_group: Optional[str], kept: Optional[List[Dict]] = None) -> Optional[float]:
    """``run``'s best ``target_group`` average among ``kept`` (``_shown``), None without one."""
    shown, _ = _shown(run, target_group, kept)
    return max(e["groups"][target_group] for e in shown) if shown else None


def documents_covered(run: Dict, target_group: Optional[str], kept: Optional[List[Dict]] = None) -> str:
    """The documents per task that ``run``'s ``target_group`` averages among ``kept`` cover (one
    ``limit`` for every run, as ``compared`` keeps them); for a run left with no average, the
    limits of its scores that were left out (``not_compared``)."""
    shown, left_out = _shown(run, target_group, kept)
    return documents_per_task(shown[-1].get("limit")) if shown else not_compared(left_out)


def summarize(run: Dict, target_group: Optional[str], kept: Optional[List[Dict]] = None) -> Dict:
    """A run's row of the report's table: its best ``target_group`` average among ``kept`` and the
    documents per task it covers (``best_average``, ``documents_covered``), its best epoch and that
    epoch's validation loss (``best_evaluation``)."""
    best = best_evaluation(run)
    return {
        "run": run["name"],
        "best_average": best_average(run, target_group, kept),
        "documents": documents_covered(run, target_group, kept),
        "best_epoch": best["target_epoch"] if best else None,
        "min_val_loss": best["val_loss"]["all"] if best else None,
    }


def run_figures(run: Dict, target_group: Optional[str] = None,
                kept: Optional[List[Dict]] = None) -> Dict[str, Optional[float]]:
    """One run's figures (``FIGURES``) from ``read_run``'s record: the best epoch and its all-token
    validation loss (``best_evaluation``); the validation loss of each bucket at the last
    evaluation; how far the low- and high-entropy buckets rose from their own lowest to the last
    evaluation (the rebound of the paper's figure 1c); the last evaluation's epoch; the best
    ``target_group`` average among ``kept``, the evaluations ``compared`` keeps over the runs being
    compared (None: over this run alone), so that no average of other tasks, metrics or documents
    per task stands beside another (``best_average``); the low-entropy bucket's lowest loss, and
    the base model's mean entropy of that bucket's tokens (``base_entropy`` of its evaluations, the
    same at each). None where the run has no evaluation of it.

    >>> run = {"evals": [{"target_epoch": e, "val_loss": {"all": a, "low": lo, "high": hi}}
    ...                  for e, a, lo, hi in [(1.0, 2.0, 1.0, 3.0), (2.0, 1.5, 0.5, 2.0), (3.0, 1.8, 0.6, 2.5)]]}
    >>> figures = run_figures(run)
    >>> figures["best_epoch"], figures["min_val_loss"], figures["end_all"], figures["last_epoch"]
    (2.0, 1.5, 1.8, 3.0)
    >>> round(figures["low_rise"], 3), round(figures["high_rise"], 3), figures["best_average"]
    (0.1, 0.5, None)
    >>> figures["low_lowest"], figures["base_low_entropy"]
    (0.5, None)
    """
    with_loss = [e for e in run["evals"] if "val_loss" in e]
    best = best_evaluation(run)
    last = with_loss[-1] if with_loss else {"val_loss": {}}
    rise = lambda bucket: (last["val_loss"][bucket] - min(e["val_loss"][bucket] for e in with_loss)  # noqa: E731
                           if with_loss and bucket in last["val_loss"] else None)
    return {"best_epoch": best.get("target_epoch") if best else None,
            "min_val_loss": best["val_loss"]["all"] if best else None,
            "end_all": last["val_loss"].get("all"), "end_low": last["val_loss"].get("low"),
            "end_high": last["val_loss"].get("high"), "low_rise": rise("low"), "high_rise": rise("high"),
            "last_epoch": last.get("target_epoch"),
            "best_average": best_average(run, target_group, kept) if target_group else None,
            "low_lowest": min(e["val_loss"]["low"] for e in with_loss) if "low" in last["val_loss"] else None,
            "base_low_entropy": next((e["base_entropy"]["low"] for e in with_loss if "base_entropy" in e), None)}


def run_signal(run: Dict) -> str:
    """What a run's gate ranked, as the tables show it: ``entropy`` or ``loss``
    (``token_dropout.signal``; a config saved before the key existed trained with entropy), or
    ``-`` where no signal is read (no token dropout, random targeting, or no config to read)."""
    td = run["token_dropout"]
    if not td or td.get("schedule") == "none" or td.get("targeting") == "random":
        return "-"
    return td.get("signal", "entropy")


def agreement_points(run: Dict) -> List[tuple]:
    """``(target epoch, gate agreement, rank correlation)`` of each of ``run``'s evaluations that
    has a target epoch and a ``signal`` record (``signal: loss`` runs log one each evaluation)."""
    return [(e["target_epoch"], e["signal"]["gate_agreement"], e["signal"]["rank_correlation"])
            for e in with_epoch(run["evals"]) if e.get("signal")]
