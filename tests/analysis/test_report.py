"""scripts/report.py and entrodrop/analysis/report.py on recorded runs: the plots, the table and the midpoint
it proposes, no midpoint without a turn-up of the validation loss, and bad arguments refused with
what exists listed."""

import json
from typing import Optional

import numpy as np
import pytest
import torch
from conftest import REPO, columns_of, fake_run, run_script_main

from entrodrop.analysis.report import (
    propose_midpoint,
    write_report,
)
from entrodrop.analysis.run_figures import agreement_points, read_run
from entrodrop.eval.records import (
    record_evaluation,
)
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer


def report(monkeypatch, capsys, *args):
    return run_script_main("report", args, monkeypatch, capsys)


def test_no_midpoint_is_proposed_when_the_loss_falls_at_every_evaluation(tmp_path):
    baseline = read_run(fake_run(tmp_path, "baseline", [2.0, 1.8, 1.6, 1.5, 1.45]))
    midpoint = propose_midpoint(baseline)
    assert midpoint["midpoint_epochs"] is None and midpoint["midpoint_steps"] is None
    assert "no turn-up" in midpoint["note"] and "epoch 5.00" in midpoint["note"]
    written = write_report([baseline], tmp_path / "report", "code", "baseline")
    table = (tmp_path / "report" / "table.md").read_text()
    assert written["midpoint"] == midpoint
    assert "no turn-up" in table and "token_dropout.midpoint:" not in table
    # A single evaluation shows no turn-up either; a plateau does (the loss stopped falling).
    assert propose_midpoint(read_run(fake_run(tmp_path, "one", [2.0])))["midpoint_epochs"] is None
    assert propose_midpoint(read_run(fake_run(tmp_path, "flat", [2.0, 1.6, 1.6])))["midpoint_epochs"] == 2.0


def test_bad_arguments_are_errors_that_list_what_exists(tmp_path, monkeypatch, capsys):
    baseline = fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7], groups=("code", "math"))
    entrodrop = fake_run(tmp_path, "entrodrop", [2.0, 1.5, 1.6], groups=("code",))
    out = tmp_path / "report"

    status, _, err = report(monkeypatch, capsys, baseline, tmp_path / "entrodorp", "--out", out)
    assert status != 0 and f"run directory {tmp_path / 'entrodorp'} does not exist" in err

    status, _, err = report(monkeypatch, capsys, baseline, entrodrop, "--out", out, "--target-group", "maths")
    assert status != 0 and "--target-group maths: no run has it; the runs have: code, math" in err

    status, _, err = report(monkeypatch, capsys, baseline, entrodrop, "--out", out, "--baseline", "base")
    assert status != 0 and "--baseline base: no run has this name; the runs are: baseline, entrodrop" in err
    assert not out.exists()

    status, stdout, err = report(monkeypatch, capsys, baseline, entrodrop, "--out", out, "--target-group", "code",
                                 "--baseline", "baseline")
    assert status == 0, err
    assert "token_dropout.midpoint: 2.00" in stdout


def test_the_demo_takes_the_reports_proposal_and_says_when_it_falls_back(tmp_path):
    from entrodrop.experiments import demo

    epochs, line = demo.choose_midpoint(read_run(fake_run(tmp_path, "turns", [2.0, 1.6, 1.4, 1.5])))
    assert epochs == 3.0 and "midpoint from the report" in line and "token_dropout.midpoint: 3.00" in line
    epochs, line = demo.choose_midpoint(read_run(fake_run(tmp_path, "falls", [2.0, 1.6, 1.4])))
    assert epochs == demo.FALLBACK_MIDPOINT_EPOCHS
    assert "FALLBACK" in line and "no turn-up was seen" in line


@pytest.mark.slow
def test_figure_1b_plots_the_target_score_against_the_loss_only_for_a_target_group(tmp_path):
    runs = [read_run(fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7]))]
    with_group = write_report(runs, tmp_path / "with", "code")
    assert str(tmp_path / "with" / "score_vs_val_loss.png") in with_group["files"]
    assert (tmp_path / "with" / "score_vs_val_loss.png").read_bytes()[:4] == b"\x89PNG"
    without = write_report([read_run(fake_run(tmp_path, "no_tasks", [2.0, 1.6, 1.7], groups=()))], tmp_path / "without")
    assert not any(f.endswith("score_vs_val_loss.png") for f in without["files"])


def test_figure_5c_shows_a_held_out_sample_with_the_gates_choice(data, tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    from entrodrop.analysis.report import entropy_sample
    from entrodrop.data.sample_store import SampleStore
    from entrodrop.method.dropout import entropy_gate

    overrides = dict(arg.split("=", 1) for arg in data)
    tokens = SampleStore(overrides["evaluation.validation.target_tokens"], "tokens")
    entropy = SampleStore(overrides["evaluation.validation.target_entropy"], "entropy")
    tiny = REPO / "assets" / "tiny" / "qwen3"
    tokenizer = qwen3_tokenizer(str(tiny / "vocab.json"), str(tiny / "merges.txt"), str(tiny / "tokenizer.json"))
    pieces, h, gate = entropy_sample(tokens, entropy, 1, tokenizer.decode, 0.5, "low", max_tokens=50)
    ids = tokens[1]
    assert len(pieces) == len(h) == len(gate) == min(50, len(ids))
    assert "".join(pieces) == tokenizer.decode([int(t) for t in ids[:50]])
    whole = entropy_gate(torch.from_numpy(entropy[1].astype("float32"))[None], torch.zeros(1, len(ids), dtype=torch.long),
                         0.5, "low")[0].numpy()
    assert (gate == whole[:50]).all() and 0 < gate.sum() < len(gate)  # the gate of the whole sample, cut

    # Through scripts/report.py, from a training config that names the stores.
    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml")
    cfg.evaluation.validation.target_tokens = overrides["evaluation.validation.target_tokens"]
    cfg.evaluation.validation.target_entropy = overrides["evaluation.validation.target_entropy"]
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    run = fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7])
    monkeypatch.chdir(REPO)  # the config's tokenizer paths are relative to the repository
    status, stdout, err = report(monkeypatch, capsys, run, "--out", tmp_path / "report", "--entropy-sample",
                                 tmp_path / "config.yaml", "--sample-index", 1, "--target-group", "code")
    assert status == 0, err
    assert (tmp_path / "report" / "entropy_sample.png").read_bytes()[:4] == b"\x89PNG"
    status, _, err = report(monkeypatch, capsys, run, "--out", tmp_path / "report", "--entropy-sample",
                            tmp_path / "config.yaml", "--sample-index", len(tokens), "--target-group", "code")
    assert status != 0 and f"sample index {len(tokens)}: " in err and f"samples 0 to {len(tokens) - 1}" in err


@pytest.mark.slow
def test_the_report_marks_the_j0_that_auto_chose_next_to_the_baselines_proposal(tmp_path):
    baseline = fake_run(tmp_path, "baseline", [2.0, 1.6, 1.5, 1.55, 1.7])
    configured = fake_run(tmp_path, "entrodrop", [2.0, 1.6, 1.45, 1.5, 1.6])
    auto = fake_run(tmp_path, "entrodrop_auto", [2.0, 1.6, 1.5, 1.55, 1.6])
    waiting = fake_run(tmp_path, "entrodrop_waiting", [2.0, 1.6, 1.5])
    for run, midpoint in [(baseline, 3.0), (configured, 3.0), (auto, "auto"), (waiting, "auto")]:
        schedule = "none" if run is baseline else "sigmoid"
        (run / "torchtune_config.yaml").write_text(
            f"token_dropout:\n  schedule: {schedule}\n  midpoint: {midpoint}\n  midpoint_unit: epochs\n")
    # The auto run fixed j0 at its evaluation of epoch 5 (patience 2): that and every later record carry it.
    records = [json.loads(line) for line in (auto / "eval" / "evals.jsonl").read_text().splitlines()]
    j0 = {"target_epoch": 3.0, "step": 30, "fixed_at_step": 50}
    (auto / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({**r, "auto_midpoint": j0 if r["step"] >= 50 else None}) + "\n" for r in records))
    runs = [read_run(r) for r in (baseline, configured, auto, waiting)]
    assert runs[2]["auto_midpoint"] == j0 and runs[3]["auto_midpoint"] is None and runs[1]["auto_midpoint"] is None
    written = write_report(runs, tmp_path / "report", "code", "baseline")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "| baseline | -1.500 | all | 3.00 | 1.5000 | 3.00 (proposed) |" in table
    assert "| entrodrop | -1.450 | all | 3.00 | 1.4500 | 3.00 |" in table
    assert "| entrodrop_auto | -1.500 | all | 3.00 | 1.5000 | 3.00 (auto, fixed at 5.00) |" in table
    assert "| entrodrop_waiting | -1.500 | all | 3.00 | 1.5000 | auto: not fixed |" in table
    assert "`midpoint: auto` in entrodrop_auto fixed j0 at epoch 3.00 (step 30)" in table
    assert "`midpoint: auto` in entrodrop_waiting never fixed j0" in table
    assert written["auto_midpoints"] == {"baseline": None, "entrodrop": None, "entrodrop_auto": j0,
                                         "entrodrop_waiting": None}
    # A run without the config the recipes save (an older run) shows no midpoint rather than failing.
    (configured / "torchtune_config.yaml").unlink()
    write_report([read_run(baseline), read_run(configured)], tmp_path / "report2", "code", "baseline")
    assert "| entrodrop | -1.450 | all | 3.00 | 1.4500 | - |" in (tmp_path / "report2" / "table.md").read_text()


def test_evaluations_without_a_target_epoch_are_left_off_the_epoch_plots_with_a_note(tmp_path, monkeypatch, capsys,
                                                                                     caplog):
    baseline = fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7])
    # recipes/evaluate.py on a checkpoint saved without progress.json (a step, no epoch) and on a
    # Hugging Face directory outside the run (neither), both with a lower loss than any epoch's
    offline = [{"step": 25, "target_epoch": None, "checkpoint": f"{baseline}/checkpoints/step_25",
                "val_loss": {"all": 1.2, "low": 1.2, "high": 1.2}, "groups": {"code": -1.2}, "backend": "hf"},
               {"step": None, "target_epoch": None, "checkpoint": "/models/base",
                "val_loss": {"all": 1.1, "low": 1.1, "high": 1.1}, "groups": {"code": -1.1}}]
    with (baseline / "eval" / "evals.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in offline))
    run = read_run(baseline)
    assert [e["step"] for e in run["evals"]] == [10, 20, 25, 30, None]
    # the midpoint is proposed from the evaluations with an epoch
    assert propose_midpoint(run)["midpoint_epochs"] == 2.0

    status, stdout, err = report(monkeypatch, capsys, baseline, "--out", tmp_path / "report", "--target-group",
                                 "code", "--baseline", "baseline")
    assert status == 0, err
    note = ("baseline: 2 evaluations without a target epoch (step_25, base: a checkpoint outside a run, or saved "
            "without progress.json) left out of the plots against target epoch")
    assert note in stdout and note in caplog.text
    # the lowest loss has no epoch: the best-epoch column, empty in every row, is left out
    assert "| run | best code average | documents per task | min val loss | curriculum j0 (epoch) |" in stdout
    assert "| baseline | -1.100 | all | 1.1000 | 2.00 (proposed) |" in stdout
    for name in ("val_loss_by_entropy.png", "benchmarks.png", "score_vs_val_loss.png"):
        assert (tmp_path / "report" / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_the_table_shows_the_documents_per_task_and_never_ranks_scores_of_other_documents(tmp_path):
    """An offline score of every document beside an in-training score of 16 per task looks like
    two results of one model. Each row says how many documents its average covers, and a run
    scored only on a subset gets no average beside the complete ones, in table.md and in the
    comparison tables, nor a seed spread."""
    offline = fake_run(tmp_path, "offline", [2.0, 1.6, 1.7], limit=None)  # e.g. 164 HumanEval problems
    training = fake_run(tmp_path, "training", [2.0, 1.5, 1.4], limit=16)  # a better score, on 16 of them
    runs = [read_run(offline), read_run(training)]
    written = write_report(runs, tmp_path / "report", "code")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "| run | best code average | documents per task | best epoch | min val loss |" in table
    assert "| offline | -1.600 | all | 2.00 | 1.6000 |" in table
    assert "| training | - | 16: not compared | 3.00 | 1.4000 |" in table
    assert "-1.400" not in table and "-1.500" not in table  # the subset's scores appear nowhere
    assert ("3 of 6 evaluations of the code average were scored otherwise (other tasks, metrics or documents per "
            "task) and are left out; the ones shown use tasks with unrecorded metrics, all documents per task") in table
    assert [r["documents"] for r in written["rows"]] == ["all", "16: not compared"]
    # Runs scored alike on 16 documents per task are compared, and say so.
    write_report([read_run(training), read_run(fake_run(tmp_path, "training2", [2.0, 1.6], limit=16))],
                 tmp_path / "subset", "code")
    subset = (tmp_path / "subset" / "table.md").read_text()
    assert "| training | -1.400 | 16 | 3.00 | 1.4000 |" in subset and "| training2 | -1.600 | 16 |" in subset



@pytest.mark.slow
def test_the_table_marks_each_runs_signal_and_a_loss_run_gets_the_agreement_plot(tmp_path):
    """``signal: loss`` runs log how far their gate has moved from the entropy gate at each
    evaluation; the report plots it against target epoch, and every table says which signal
    each run's gate ranked."""
    baseline = fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7])
    entropy = fake_run(tmp_path, "entrodrop", [2.0, 1.55, 1.6])
    older = fake_run(tmp_path, "older", [2.0, 1.58, 1.6])  # saved before token_dropout.signal existed
    loss = fake_run(tmp_path, "entrodrop_loss", [2.0, 1.5, 1.55])
    for run, extra in [(baseline, "schedule: none\n  signal: entropy"),
                       (entropy, "schedule: sigmoid\n  signal: entropy"), (older, "schedule: sigmoid"),
                       (loss, "schedule: sigmoid\n  signal: loss")]:
        (run / "torchtune_config.yaml").write_text(f"token_dropout:\n  targeting: low\n  {extra}\n  midpoint: 2\n"
                                                   "  midpoint_unit: epochs\n")
    # Made-up agreement: the gates part as the recorded losses replace the cached entropies.
    records = [json.loads(line) for line in (loss / "eval" / "evals.jsonl").read_text().splitlines()]
    moved = [(1.0, 1.0), (0.8, 0.7), (0.6, 0.45)]
    (loss / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({**r, "signal": {"gate_agreement": a, "rank_correlation": rho}}) + "\n"
        for r, (a, rho) in zip(records, moved)))
    runs = {r.name: read_run(r) for r in (baseline, entropy, older, loss)}
    assert agreement_points(runs["entrodrop_loss"]) == [(1.0, 1.0, 1.0), (2.0, 0.8, 0.7), (3.0, 0.6, 0.45)]
    assert agreement_points(runs["entrodrop"]) == []

    written = write_report(list(runs.values()), tmp_path / "report", "code", "baseline")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "| min val loss | curriculum j0 (epoch) | signal |" in table
    assert "| baseline | -1.600 | all | 2.00 | 1.6000 | 2.00 (proposed) | - |" in table  # drops nothing: no signal
    assert "| entrodrop | -1.550 | all | 2.00 | 1.5500 | 2.00 | entropy |" in table
    assert "| older | -1.580 | all | 2.00 | 1.5800 | 2.00 | entropy |" in table
    assert "| entrodrop_loss | -1.500 | all | 2.00 | 1.5000 | 2.00 | loss |" in table
    assert ("`signal: loss` in entrodrop_loss: at epoch 3.00 its gate took 60.0% of the entropy gate's tokens; "
            "rank correlation of the two signals 0.450") in table
    assert str(tmp_path / "report" / "signal_agreement.png") in written["files"]
    assert (tmp_path / "report" / "signal_agreement.png").read_bytes()[:4] == b"\x89PNG"

    # Without a loss run there is nothing to plot: no file, and no note.
    entropy_only = write_report([runs["baseline"], runs["entrodrop"]], tmp_path / "entropy_only", "code", "baseline")
    assert not (tmp_path / "entropy_only" / "signal_agreement.png").exists()
    assert not any(f.endswith("signal_agreement.png") for f in entropy_only["files"])
    assert "`signal: loss`" not in (tmp_path / "entropy_only" / "table.md").read_text()


def configured(run, target_group: Optional[str], tasks: str = "{code: [humaneval_likelihood], math: [svamp]}"):
    """A run's torchtune_config.yaml naming its lm-eval tasks and target group, as the recipes save it."""
    (run / "torchtune_config.yaml").write_text(f"evaluation:\n  lm_eval:\n    tasks: {tasks}\n"
                                               f"    target_group: {target_group}\n")
    return run


def test_the_report_ranks_by_the_runs_own_target_group_or_says_it_needs_one(tmp_path, monkeypatch, capsys):
    baseline = configured(fake_run(tmp_path, "baseline", [2.0, 1.6, 1.7], groups=("code", "math")), "math")
    entrodrop = configured(fake_run(tmp_path, "entrodrop", [2.0, 1.5, 1.6], groups=("code", "math")), "math")
    status, stdout, err = report(monkeypatch, capsys, baseline, entrodrop, "--out", tmp_path / "report")
    assert status == 0, err
    assert "| run | best math average | documents per task |" in stdout
    assert "| entrodrop | -1.500 | all |" in stdout
    assert "the target group is math, as the runs' configs name it (evaluation.lm_eval.target_group)" in stdout

    # Configs that name no group the runs scored, or two groups: it says plainly that it needs one.
    other = configured(fake_run(tmp_path, "other", [2.0, 1.4], groups=("code", "math")), "code")
    for runs, why in [((baseline, other), "their configs name code, math"),
                      ((fake_run(tmp_path, "old", [2.0, 1.6], groups=("code",)),),
                       "no run's config (torchtune_config.yaml) names one of them")]:
        status, _, err = report(monkeypatch, capsys, *runs, "--out", tmp_path / "refused")
        assert status != 0 and "--target-group is needed: the runs scored the task groups" in err and why in err
        assert not (tmp_path / "refused").exists()


def test_no_column_of_the_table_is_empty_in_every_row(tmp_path):
    """Runs that scored no task (the CPU demo's): no average and no documents column of dashes."""
    runs = [read_run(fake_run(tmp_path, name, [2.0, 1.6, 1.7], groups=())) for name in ("baseline", "entrodrop")]
    write_report(runs, tmp_path / "report", baseline="baseline")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "average" not in table and "documents per task" not in table
    columns = columns_of(table)
    assert columns and all(any(cell not in ("", "-") for cell in column[1:]) for column in columns), columns


def write_fake_run(root, name, gamma_max, val_losses):
    run = root / name
    (run / "logs").mkdir(parents=True)
    lines = [f"Step {s} | loss:{3 - s / 100} gamma_max:{gamma_max * s / 40} gamma:{gamma_max * s / 80} "
             f"target_epoch:{s / 10}" for s in range(1, 41)]
    (run / "logs" / "log_1.txt").write_text("\n".join(lines) + "\n")
    for epoch, loss in enumerate(val_losses, start=1):
        record_evaluation(run / "eval", {"step": epoch * 10, "target_epoch": float(epoch), "checkpoint": f"step_{epoch * 10}",
                                         "val_loss": {"all": loss, "low": loss / 2, "high": loss * 2},
                                         "groups": {"code": -loss}}, "code")
    return run


def test_report_writes_plots_table_and_proposes_the_midpoint(tmp_path):
    baseline = write_fake_run(tmp_path, "baseline", 0.0, [2.0, 1.6, 1.7, 1.9])
    entrodrop = write_fake_run(tmp_path, "entrodrop", 0.1, [2.0, 1.7, 1.5, 1.55])
    written = write_report([read_run(baseline), read_run(entrodrop)], tmp_path / "report", "code", "baseline")
    for f in written["files"]:
        assert (tmp_path / "report" / f.split("/")[-1]).stat().st_size > 1000 or f.endswith(".md")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "| baseline | -1.600 | all | 2.00 | 1.6000 |" in table
    assert "| entrodrop | -1.500 | all | 3.00 | 1.5000 |" in table
    assert {k: written["midpoint"][k] for k in ("run", "midpoint_epochs", "midpoint_steps")} == \
        {"run": "baseline", "midpoint_epochs": 2.0, "midpoint_steps": 20}
    assert "token_dropout.midpoint: 2.00" in table
    png = (tmp_path / "report" / "val_loss_by_entropy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and np.frombuffer(png, np.uint8).size > 10_000


def test_a_run_whose_log_and_evaluations_end_in_a_cut_line_is_reported_without_it(tmp_path, monkeypatch, capsys,
                                                                                   caplog):
    # What read_run keeps of such a run: tests/analysis/test_run_figures.py.
    run = fake_run(tmp_path, "cut", [2.0, 1.8, 1.9])
    with (run / "logs" / "log_1.txt").open("a") as f:
        f.write("Step 11 | loss:2.8")  # cut in its last value: 2.8 parses, but is not what was logged
    evals = run / "eval" / "evals.jsonl"
    evals.write_text(evals.read_text() + '{"step": 40, "target_epoch": 4.0, "val_lo')
    status, out, err = report(monkeypatch, capsys, run, "--out", tmp_path / "report", "--target-group", "code")
    assert status == 0 and "Traceback" not in err
    assert f"{run / 'logs' / 'log_1.txt'}, line 11: cut short" in caplog.text
    assert f"{evals}, line 4: cut short" in caplog.text
    assert "| cut | -1.800 | all | 2.00 | 1.8000 |" in out


def test_a_damaged_line_before_the_last_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    run = fake_run(tmp_path, "damaged", [2.0, 1.8])
    log = run / "logs" / "log_1.txt"
    log.write_text(log.read_text().replace("Step 3 | loss:2.97", "Step 3 | loss:2.9Step 4 | loss"))
    status, out, err = report(monkeypatch, capsys, run, "--out", tmp_path / "report")
    assert status == 2 and "Traceback" not in err
    assert f"{log}, line 3 cannot be read (not key:value pairs: " in err


@pytest.mark.parametrize("evals, status, says", [
    (b"", 0, "no run has a validation record (val_loss): val_loss_by_entropy.png is empty"),
    (b"\n", 0, "no run has a validation record (val_loss): val_loss_by_entropy.png is empty"),
    (b'{"step": 1, "target_ep', 0, "no run has a validation record (val_loss): val_loss_by_entropy.png is empty"),
    (b'{"step": 1}\n\xff\xfe\n', 2, "evals.jsonl, line 2 cannot be read ('utf-8' codec can't decode byte 0xff"),
    (b"", "out is a file", "is a file, and nothing was written: give a folder, for the plots and table.md"),
], ids=["empty", "one newline", "only line cut", "not UTF-8", "--out a file"])
def test_the_report_of_a_run_with_no_usable_record_or_a_wrong_out_is_one_message(tmp_path, monkeypatch, capsys,
                                                                                 evals, status, says):
    (tmp_path / "run" / "eval").mkdir(parents=True)
    (tmp_path / "run" / "eval" / "evals.jsonl").write_bytes(evals)
    out = tmp_path / "report"
    if status == "out is a file":
        out.write_text("x")
        status = 2
    got, stdout, err = report(monkeypatch, capsys, tmp_path / "run", "--out", out)
    assert got == status and "Traceback" not in err and says in stdout + err, err
