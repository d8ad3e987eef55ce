"""scripts/report.py and entrodrop/report.py on recorded runs: no midpoint without a turn-up of the
validation loss, and bad arguments refused with what exists listed."""

import json
import sys

from entrodrop.report import propose_midpoint, read_run, write_report


def fake_run(root, name, val_losses, groups=("code",)):
    """A run directory as the training recipes leave it: a metric log and one evaluation an epoch."""
    run = root / name
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "log_1.txt").write_text(
        "".join(f"Step {s} | loss:{3 - s / 100} gamma_max:0.0 gamma:0.0\n" for s in range(1, 11)))
    (run / "eval").mkdir()
    (run / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({"step": epoch * 10, "target_epoch": float(epoch), "val_loss": {"all": loss, "low": loss, "high": loss},
                    "groups": {g: -loss for g in groups}}) + "\n"
        for epoch, loss in enumerate(val_losses, start=1)))
    return run


def report(monkeypatch, capsys, *args):
    """Run scripts/report.py's main() in this process: (exit status, stdout, stderr)."""
    from conftest import _load_script

    monkeypatch.setattr(sys, "argv", ["report.py", *map(str, args)])
    try:
        _load_script("report").main()
        status = 0
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


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
    from conftest import _load_script

    demo = _load_script("demo")
    epochs, line = demo.choose_midpoint(read_run(fake_run(tmp_path, "turns", [2.0, 1.6, 1.4, 1.5])))
    assert epochs == 3.0 and "midpoint from the report" in line and "token_dropout.midpoint: 3.00" in line
    epochs, line = demo.choose_midpoint(read_run(fake_run(tmp_path, "falls", [2.0, 1.6, 1.4])))
    assert epochs == demo.FALLBACK_MIDPOINT_EPOCHS
    assert "FALLBACK" in line and "no turn-up was seen" in line
