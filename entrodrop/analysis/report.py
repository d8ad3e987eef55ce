"""Plots and tables of the training dynamics the paper studies, from the files runs write.

From one or more runs (``entrodrop.analysis.run_figures.read_run``: a run directory's step log,
evaluations and saved config, and what a run's figures are) ``write_report`` draws

    val_loss_by_entropy.png   validation loss on all / low- / high-entropy tokens against
                              target epoch (the paper's figure 1c)
    benchmarks.png            each task group's average against target epoch (figure 3a)
    score_vs_val_loss.png     the target group's average against the validation loss, one point
                              per evaluation (figure 1b), when a target group is given
    gamma_schedule.png        gamma_max(j) and the drawn gamma_j against step
    signal_agreement.png      with ``token_dropout.signal: loss``: how far the loss gate has
                              moved from the entropy gate, against target epoch - the share of
                              the entropy gate's tokens the loss gate takes too, and the rank
                              correlation of the two signals; one line per such run. Not
                              written when no run has a loss signal (an entropy run's gate is
                              the entropy gate: 1 and 1 at every evaluation, nothing to see)
    table.md                  per run: best target-group average and the documents per task
                              it covers, best epoch, minimum validation loss (the paper's
                              table of gamma_max; ``run_figures.summarize``), the curriculum
                              midpoint j0 it trained with, and the signal its gate ranked
                              (``run_figures.run_signal``); a column empty (``-``) in every row
                              is left out (``markdown.markdown_table``)

The target group is the one given, else the one the runs' saved configs name
(``evaluation.lm_eval.target_group``, ``choose_target_group``); runs that scored task groups but
name none of them, or several, need it given. Runs that scored no task group have no average.

Given a baseline run, ``write_report`` also proposes the curriculum midpoint j0 from it
(``propose_midpoint``): the target epoch where its validation loss stops falling, the paper's
"transition from productive learning to memorization". A baseline whose loss is lowest at its
last evaluation has not turned up yet: then nothing is proposed, and the table says so.

A run with ``token_dropout.midpoint: auto`` found j0 itself: its evaluation records carry it
(``auto_midpoint``: target epoch, step, and the step that fixed it) from the evaluation that
fixed it on. The plots mark it (dashed), and the baseline's proposal (dotted), so the two can be
compared. The midpoint a run was configured with comes from ``torchtune_config.yaml``, which
the recipes write into ``output_dir``.

An evaluation without a target epoch (``recipes/evaluate.py`` on a Hugging Face directory
outside a run, or on a checkpoint saved without progress.json) has no place on an epoch axis:
it is left out of the plots against target epoch and of the midpoint proposal, with a note (in
the log and in table.md); it still counts in the table and in ``score_vs_val_loss.png``.

``draw_entropy_sample`` is the paper's figure 5c: one held-out sample as text, each token
shaded by its entropy under the base model, the tokens the gate makes eligible underlined.
"""

import logging
import math
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from entrodrop.analysis.markdown import markdown_table  # noqa: E402
from entrodrop.analysis.run_figures import (  # noqa: E402
    BUCKET_TITLES,
    agreement_points,
    compared,
    documents_per_task,
    loss_curve,
    run_signal,
    summarize,
    with_epoch,
)
from entrodrop.eval.records import best_epoch  # noqa: E402

log = logging.getLogger(__name__)


def epochless_note(run: Dict) -> Optional[str]:
    """Which of ``run``'s evaluations have no target epoch and are left out of the epoch plots
    (None: none is)."""
    missing = [e for e in run["evals"] if e.get("target_epoch") is None]
    if not missing:
        return None
    names = ", ".join(Path(e["checkpoint"]).name if e.get("checkpoint") else f"step {e['step']}" for e in missing)
    return (f"{run['name']}: {len(missing)} evaluation{'s' * (len(missing) > 1)} without a target epoch ({names}: "
            "a checkpoint outside a run, or saved without progress.json) left out of the plots against target epoch "
            "and of the midpoint proposal")


def left_out_note(runs: List[Dict], group: str, kept: List[Dict]) -> Optional[str]:
    """What ``compared`` left out of ``group`` (it kept ``kept``), or None."""
    scored = [e for run in runs for e in run["evals"] if group in e.get("groups", {})]
    if len(kept) == len(scored):
        return None
    made_of = kept[-1].get("metrics", {}).get(group) or "tasks with unrecorded metrics"
    return (f"{len(scored) - len(kept)} of {len(scored)} evaluations of the {group} average were scored otherwise "
            f"(other tasks, metrics or documents per task) and are left out; the ones shown use {made_of}, "
            f"{documents_per_task(kept[-1].get('limit'))} documents per task")


def propose_midpoint(baseline: Dict) -> Dict:
    """j0 from a baseline run: the target epoch (and step) of its minimum validation loss.

    Only a minimum that a later evaluation confirms (its loss is no lower) marks where the loss
    stops falling. When the minimum is the last evaluation the loss may still be falling, and
    ``midpoint_epochs`` and ``midpoint_steps`` are None; ``note`` says why in either case.
    """
    with_loss = [e for e in with_epoch(baseline["evals"]) if "val_loss" in e]
    proposal = {"run": baseline["name"], "midpoint_epochs": None, "midpoint_steps": None}
    if not with_loss:
        return {**proposal, "note": f"{baseline['name']} has no evaluation with a validation loss and a target epoch: "
                                    "no midpoint proposed"}
    best = best_epoch(with_loss)
    if best is with_loss[-1]:
        return {**proposal, "note": f"the validation loss of {baseline['name']} is lowest at its last evaluation "
                                    f"(epoch {best['target_epoch']:.2f}, step {best['step']}): no turn-up was seen, "
                                    "so no midpoint is proposed; train it for more epochs"}
    return {**proposal, "midpoint_epochs": best["target_epoch"], "midpoint_steps": best["step"],
            "note": f"`token_dropout.midpoint: {best['target_epoch']:.2f}` with `midpoint_unit: epochs` "
                    f"(step {best['step']}), where the validation loss of {baseline['name']} stops falling"}


def run_midpoint(run: Dict) -> str:
    """The curriculum midpoint j0 a run trained with, as the table shows it: a number from its
    config, what ``midpoint: auto`` chose (and the epoch it was fixed at), or ``-`` (no
    curriculum, or no config to read)."""
    td = run["token_dropout"]
    if not td or td.get("schedule") != "sigmoid":
        return "-"
    if td.get("midpoint") != "auto":
        return f"{td['midpoint']:.2f}" if td.get("midpoint_unit") == "epochs" else f"step {td['midpoint']}"
    j0 = run["auto_midpoint"]
    if j0 is None:
        return "auto: not fixed"
    at = next((e["target_epoch"] for e in run["evals"] if e["step"] == j0["fixed_at_step"]), None)
    return f"{j0['target_epoch']:.2f} (auto, fixed at {'step ' + str(j0['fixed_at_step']) if at is None else f'{at:.2f}'})"


def draw_signal_agreement(runs: List[Dict], path, color: Dict[str, str]) -> bool:
    """``signal_agreement.png``: ``agreement_points`` of each run that has them, in two panels;
    False (nothing drawn) when no run has any."""
    drawn = [(run, agreement_points(run)) for run in runs]
    drawn = [(run, points) for run, points in drawn if points]
    if not drawn:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    titles = [("gate agreement", "share of the entropy gate's tokens\nthe loss gate takes too"),
              ("rank correlation", "Spearman correlation of loss and\nentropy over the target tokens")]
    for panel, (ax, (title, ylabel)) in enumerate(zip(axes, titles)):
        for run, points in drawn:
            epochs, *values = zip(*points)
            ax.plot(epochs, values[panel], marker="o", label=run["name"], color=color[run["name"]])
        ax.set(title=title, xlabel="target epoch", ylabel=ylabel, ylim=(min(0.0, ax.get_ylim()[0]), 1.02))
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("signal: loss - how far the loss gate has moved from the entropy gate (1: not at all)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def choose_target_group(runs: List[Dict], given: Optional[str]) -> Optional[str]:
    """The group whose average the report ranks: ``given``, else the one the runs' configs name
    (``read_run``'s ``target_group``) among the groups they scored; None when no run scored a
    group (the table then has no average columns).

    Raises:
        ValueError: the runs scored task groups, but their configs name none of them, or more
            than one: the message lists the groups, for ``--target-group``.
    """
    groups = sorted({g for run in runs for e in run["evals"] for g in e.get("groups", {})})
    if given is not None or not groups:
        return given
    named = sorted({run["target_group"] for run in runs if run["target_group"] in groups})
    if len(named) == 1:
        return named[0]
    why = (f"their configs name {', '.join(named)}" if named else
           "no run's config (torchtune_config.yaml) names one of them as evaluation.lm_eval.target_group")
    raise ValueError(f"--target-group is needed: the runs scored the task groups {', '.join(groups)}, and {why}; "
                     "give the one to rank the runs by")


def check_selection(runs: List[Dict], target_group: Optional[str], baseline: Optional[str]) -> List[str]:
    """What is wrong with ``--target-group`` and ``--baseline`` for ``runs``, each with what exists
    (no ``--target-group``: what ``choose_target_group`` finds wrong)."""
    problems = []
    groups = sorted({g for run in runs for e in run["evals"] for g in e.get("groups", {})})
    if target_group is not None and target_group not in groups:
        problems.append(f"--target-group {target_group}: no run has it; the runs have: "
                        f"{', '.join(groups) if groups else 'no task groups (no task was evaluated)'}")
    try:
        choose_target_group(runs, target_group)
    except ValueError as e:
        problems.append(str(e))
    names = [run["name"] for run in runs]
    if baseline is not None and baseline not in names:
        problems.append(f"--baseline {baseline}: no run has this name; the runs are: {', '.join(names)}")
    return problems


def _fmt(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_report(runs: List[Dict], out_dir: str, target_group: Optional[str] = None,
                 baseline: Optional[str] = None) -> Dict:
    """Write the plots and the table for ``runs`` (from ``read_run``); returns what it wrote.

    ``target_group`` None: the one the runs' configs name (``choose_target_group``).

    Raises:
        ValueError: ``target_group`` or ``baseline`` that no run has, or no ``target_group`` when
            the runs' configs do not name one (``check_selection``).
    """
    problems = check_selection(runs, target_group, baseline)
    if problems:
        raise ValueError("; ".join(problems))
    given, target_group = target_group, choose_target_group(runs, target_group)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {run["name"]: cycle[i % len(cycle)] for i, run in enumerate(runs)}  # one colour a run, in every plot
    midpoint = propose_midpoint(next(run for run in runs if run["name"] == baseline)) if baseline is not None else None
    groups = sorted({g for run in runs for e in run["evals"] for g in e.get("groups", {})})
    shown = {group: compared(runs, group) for group in groups}
    kept = {group: {id(e) for e in evals} for group, evals in shown.items()}
    notes = [note for note in map(epochless_note, runs) if note]
    notes += [note for note in (left_out_note(runs, group, shown[group]) for group in groups) if note]
    if not any("val_loss" in e for run in runs for e in run["evals"]):
        notes.append("no run has a validation record (val_loss): val_loss_by_entropy.png is empty")
    if given is None and target_group is not None:
        notes.append(f"the target group is {target_group}, as the runs' configs name it (evaluation.lm_eval.target_group)")
    for note in notes:
        log.warning(note)

    draw_val_loss_by_entropy(runs, out / "val_loss_by_entropy.png", color, midpoint)
    draw_benchmarks(runs, groups, kept, out / "benchmarks.png", color)
    files = ["val_loss_by_entropy.png", "benchmarks.png"]
    if target_group is not None:
        draw_score_vs_loss(runs, target_group, out / "score_vs_val_loss.png", kept[target_group])
        files.append("score_vs_val_loss.png")
    if draw_signal_agreement(runs, out / "signal_agreement.png", color):
        files.append("signal_agreement.png")
    draw_gamma_schedule(runs, out / "gamma_schedule.png", color, midpoint)
    rows = write_table(runs, out / "table.md", target_group, shown.get(target_group, []), midpoint, notes)
    return {"rows": rows, "midpoint": midpoint, "auto_midpoints": {run["name"]: run["auto_midpoint"] for run in runs},
            "notes": notes, "target_group": target_group,
            "files": [str(out / f) for f in (*files, "gamma_schedule.png", "table.md")]}


def draw_val_loss_by_entropy(runs: List[Dict], path, color: Dict[str, str], midpoint: Optional[Dict]) -> None:
    """Figure 1c: the validation loss on all, low- and high-entropy tokens against target epoch,
    one panel a bucket, with the j0 each ``midpoint: auto`` run chose (dashed) and ``midpoint``,
    the baseline's proposal (``propose_midpoint``; dotted)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True)
    axes[2].sharey(axes[1])  # the low and high buckets on one scale, as the paper's figure 1c
    for ax, bucket in zip(axes, BUCKET_TITLES):
        for run in runs:
            points = loss_curve(run, bucket)
            if points:
                ax.plot(*zip(*points), marker="o", label=run["name"], color=color[run["name"]])
            if run["auto_midpoint"]:
                ax.axvline(run["auto_midpoint"]["target_epoch"], color=color[run["name"]], linestyle="--",
                           label=f"{run['name']}: j0 chosen by auto")
        if midpoint and midpoint["midpoint_epochs"] is not None:
            ax.axvline(midpoint["midpoint_epochs"], color=color[midpoint["run"]], linestyle=":",
                       label=f"{midpoint['run']}: proposed j0")
        ax.set(title=BUCKET_TITLES[bucket], xlabel="target epoch", ylabel="validation loss")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if labels:  # none where no run has a validation record (write_report notes it)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False)  # below: no curve hidden
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 4), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_benchmarks(runs: List[Dict], groups: List[str], kept: Dict[str, set], path, color: Dict[str, str]) -> None:
    """Figure 3a: each task group's average against target epoch, one panel a group, of the
    evaluations ``kept`` (ids, by group, of those ``compared`` keeps)."""
    fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(4.5 * max(len(groups), 1), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for run in runs:
            points = [(e["target_epoch"], e["groups"][group]) for e in with_epoch(run["evals"]) if id(e) in kept[group]]
            if points:
                ax.plot(*zip(*points), marker="o", label=run["name"], color=color[run["name"]])
        ax.set(title=f"{group} average", xlabel="target epoch", ylabel="score")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_gamma_schedule(runs: List[Dict], path, color: Dict[str, str], midpoint: Optional[Dict]) -> None:
    """gamma_max(j) and the drawn gamma_j of each run against step, with the step of each j0
    ``midpoint: auto`` chose (dashed) and of ``midpoint``, the baseline's proposal (dotted)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for run in runs:
        steps = [s for s, m in run["steps"].items() if "gamma_max" in m]
        if steps:
            ax.plot(steps, [run["steps"][s]["gamma_max"] for s in steps], label=f"{run['name']} gamma_max(j)",
                    color=color[run["name"]])
            ax.scatter(steps, [run["steps"][s]["gamma"] for s in steps], s=6, color=color[run["name"]], alpha=0.5)
        if run["auto_midpoint"]:  # the curriculum is off (0) until the step that fixed j0, in the past by then
            ax.axvline(run["auto_midpoint"]["step"], color=color[run["name"]], linestyle="--",
                       label=f"{run['name']}: j0 chosen by auto")
    if midpoint and midpoint["midpoint_steps"] is not None:
        ax.axvline(midpoint["midpoint_steps"], color=color[midpoint["run"]], linestyle=":",
                   label=f"{midpoint['run']}: proposed j0")
    ax.set(title="token-dropout schedule (dots: drawn gamma_j)", xlabel="step", ylabel="rate")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_table(runs: List[Dict], path, target_group: Optional[str], kept: List[Dict], midpoint: Optional[Dict],
                notes: List[str]) -> List[Dict]:
    """``table.md``: a row a run (``summarize`` over ``kept``, the evaluations ``compared``
    keeps; its j0, ``midpoint``'s proposal on the baseline's row; its signal), then the proposal,
    the ``notes`` and what each ``midpoint: auto`` and ``signal: loss`` run did; returns the rows."""
    rows = [{**summarize(run, target_group, kept), "midpoint": run_midpoint(run), "signal": run_signal(run)}
            for run in runs]
    if midpoint and midpoint["midpoint_epochs"] is not None:
        rows[[run["name"] for run in runs].index(midpoint["run"])]["midpoint"] = (
            f"{midpoint['midpoint_epochs']:.2f} (proposed)")
    # The documents per task beside each average: a model's score on a subset of each task (an
    # in-training ``limit``) differs from its score on every document, and would read as another result.
    lines = markdown_table(
        ["run", f"best {target_group or 'target'} average", "documents per task", "best epoch", "min val loss",
         "curriculum j0 (epoch)", "signal"],
        [[r["run"], _fmt(r["best_average"], 3), r["documents"], _fmt(r["best_epoch"], 2), _fmt(r["min_val_loss"], 4),
          r["midpoint"], r["signal"]] for r in rows])
    if midpoint:
        prefix = "Proposed midpoint (j0)" if midpoint["midpoint_epochs"] is not None else "No midpoint (j0)"
        lines += ["", f"{prefix} from {midpoint['run']}: {midpoint['note']}."]
    lines += [line for note in notes for line in ("", f"Note: {note}.")]
    for run in runs:
        j0 = run["auto_midpoint"]
        if j0:
            lines += ["", f"`midpoint: auto` in {run['name']} fixed j0 at epoch {j0['target_epoch']:.2f} (step {j0['step']}), "
                          f"its lowest validation loss, at its evaluation of step {j0['fixed_at_step']}; the curriculum "
                          "was off (gamma_max = 0) until then."]
        elif (run["token_dropout"] or {}).get("midpoint") == "auto":
            lines += ["", f"`midpoint: auto` in {run['name']} never fixed j0: its validation loss kept improving, "
                          "and the curriculum stayed off."]
        points = agreement_points(run)
        if points:
            epoch, agreement, rho = points[-1]
            lines += ["", f"`signal: loss` in {run['name']}: at epoch {epoch:.2f} its gate took {agreement:.1%} of the "
                          f"entropy gate's tokens; rank correlation of the two signals {rho:.3f} "
                          "(signal_agreement.png)."]
    Path(path).write_text("\n".join(lines) + "\n")
    return rows


def draw_score_vs_loss(runs: List[Dict], target_group: str, path, kept: Optional[set] = None) -> None:
    """Figure 1b: the ``target_group`` average against the all-token validation loss, one point
    per evaluation that has both (of ``kept``, ids of the evaluations ``compared`` keeps; all
    when None), in epoch order (a line joins them; the last is labelled)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for run in runs:
        points = [(e["val_loss"]["all"], e["groups"][target_group], e["target_epoch"]) for e in run["evals"]
                  if "val_loss" in e and target_group in e.get("groups", {}) and (kept is None or id(e) in kept)]
        if points:
            loss, score, epochs = zip(*points)
            line, = ax.plot(loss, score, marker="o", alpha=0.8, label=run["name"])
            if epochs[-1] is not None:
                ax.annotate(f"epoch {epochs[-1]:.1f}", (loss[-1], score[-1]), fontsize=7, color=line.get_color())
    ax.set(title=f"{target_group} average against validation loss", xlabel="validation loss (all tokens)",
           ylabel=f"{target_group} average")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_entropy_sample(pieces: Sequence[str], entropy: np.ndarray, eligible: np.ndarray, path, title: str = "",
                        columns: int = 96) -> None:
    """Figure 5c: the text of ``pieces`` (one decoded string per token) in a monospace grid of
    ``columns``, each token's background shaded by its ``entropy`` (NaN: none, left white) and
    the ``eligible`` ones (the gate's choice) underlined in blue."""
    cells, line, col = [], 0, 0  # (line, first column, last column, token) of each visible run of a token
    for k, piece in enumerate(pieces):
        for part_index, part in enumerate(piece.replace("\t", "    ").split("\n")):
            if part_index:
                line, col = line + 1, 0
            while part:
                room = columns - col
                if room == 0:
                    line, col = line + 1, 0
                    continue
                cells.append((line, col, part[:room], k))
                col += len(part[:room])
                part = part[room:]
    lines = line + 1
    finite = entropy[~np.isnan(entropy)]
    top = float(finite.max()) if finite.size else 1.0
    cmap = plt.get_cmap("YlOrRd")
    width, height = columns * 0.085 + 0.4, lines * 0.19 + 0.9
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([0.01, 0.02, 0.98, 0.96 - 0.5 / height])
    fontsize = 0.98 * width * 72 / columns / 0.602  # a monospace glyph is 0.602 em wide: one per column
    ax.set_xlim(0, columns)
    ax.set_ylim(lines, -0.2)
    ax.axis("off")
    for line, col, text, k in cells:
        h = entropy[k]
        if not np.isnan(h):
            ax.add_patch(plt.Rectangle((col, line), len(text), 1, color=cmap(0.6 * h / max(top, 1e-9)),
                                       linewidth=0))
        if eligible[k]:
            ax.plot([col + 0.1, col + len(text) - 0.1], [line + 0.93, line + 0.93], color="blue", linewidth=1.2,
                    zorder=3)
        ax.text(col, line + 0.45, text, family="monospace", fontsize=fontsize, va="center", ha="left", zorder=4)
    title = title or "entropy under the base model (darker: higher); underlined: eligible for dropout"
    fig.suptitle("\n".join(textwrap.wrap(f"{title}; white to red: 0 to {top:.1f} nats", int(columns * 1.3))),
                 fontsize=8, x=0.01, ha="left")
    fig.savefig(path, dpi=130)
    plt.close(fig)


def entropy_sample(tokens, entropy, index: int, decode, gate_percentile: float, targeting: str,
                   max_tokens: int = 400):
    """What ``draw_entropy_sample`` draws for sample ``index`` of a token store and its entropy
    cache (``SampleStore``s): its first ``max_tokens`` tokens decoded one by one, their
    entropies, and the gate (``entrodrop.method.dropout.entropy_gate``) over the whole sample."""
    import torch

    from entrodrop.method.dropout import entropy_gate

    ids, h = tokens[index], entropy[index].astype(np.float32)
    gate = entropy_gate(torch.from_numpy(h)[None], torch.zeros(1, len(h), dtype=torch.long), gate_percentile,
                        targeting)[0].numpy()
    ids = ids[:max_tokens]
    return [decode([int(t)]) for t in ids], h[: len(ids)], gate[: len(ids)]


def write_entropy_sample(config_path: str, index: int, out: Path) -> Path:
    """Figure 5c, ``out/entropy_sample.png``, for sample ``index`` of the validation store that
    the training config ``config_path`` names, with its tokenizer and its gate.

    Raises:
        FileNotFoundError: the config names no validation store.
        IndexError: the store has no sample ``index``.
    """
    from omegaconf import OmegaConf
    from torchtune import config

    from entrodrop.data.sample_store import SampleStore

    cfg = OmegaConf.load(config_path)
    v, td = cfg.evaluation.validation, cfg.token_dropout
    if not v.target_tokens:
        raise FileNotFoundError(f"{config_path}: evaluation.validation.target_tokens is null: no held-out sample")
    tokens, entropy = SampleStore(v.target_tokens, "tokens"), SampleStore(v.target_entropy, "entropy")
    if not 0 <= index < len(tokens):
        raise IndexError(f"sample index {index}: {v.target_tokens} holds samples 0 to {len(tokens) - 1}")
    tokenizer = config.instantiate(cfg.tokenizer)
    pieces, h, gate = entropy_sample(tokens, entropy, index, tokenizer.decode, td.gate_percentile, td.targeting)
    path = out / "entropy_sample.png"
    draw_entropy_sample(pieces, h, gate, path, title=(
        f"{v.target_tokens} sample {index}: entropy under the base model (darker: higher); underlined: "
        f"eligible for dropout (targeting {td.targeting}, gate_percentile {td.gate_percentile})"))
    return path
