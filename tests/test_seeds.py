"""entrodrop/seeds.py: the arithmetic of several seeds (means, ranges, the seed spread, the verdict
beside every difference), the tables it makes, and the regime check read off a baseline."""

import json

import pytest
from test_report import fake_run

from entrodrop.report import read_run
from entrodrop.seeds import (
    difference,
    mean_figures,
    regime_check,
    regime_table,
    run_figures,
    seed_spread,
    setting_figures,
    settings_table,
    value_range,
    verdict,
    verdict_lines,
)


def bucket_run(root, name, curve):
    """A run directory whose evaluations have distinct buckets: ``curve`` is (epoch, all, low, high)."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({"step": 10 * k, "target_epoch": epoch, "val_loss": {"all": a, "low": lo, "high": hi}}) + "\n"
        for k, (epoch, a, lo, hi) in enumerate(curve, start=1)))
    return read_run(run)


def test_a_runs_figures_are_its_best_epoch_its_end_and_how_far_each_bucket_rebounded(tmp_path):
    run = bucket_run(tmp_path, "baseline", [(1.0, 1.1, 0.65, 1.95), (9.0, 0.81, 0.43, 1.41), (30.0, 1.0, 0.5, 1.9),
                                            (54.0, 1.25, 0.64, 2.29)])
    figures = run_figures(run)
    assert (figures["best_epoch"], figures["min_val_loss"], figures["last_epoch"]) == (9.0, 0.81, 54.0)
    assert (figures["end_all"], figures["end_low"], figures["end_high"]) == (1.25, 0.64, 2.29)
    assert figures["low_rise"] == pytest.approx(0.21) and figures["high_rise"] == pytest.approx(0.88)
    assert figures["best_average"] is None  # no task group scored


def test_the_spread_is_the_widest_range_between_the_seeds_of_any_one_setting():
    settings = {"baseline": [{"min_val_loss": 0.80, "best_epoch": 9.0}, {"min_val_loss": 0.82, "best_epoch": 7.0},
                             {"min_val_loss": 0.81, "best_epoch": 8.0}],
                "entrodrop": [{"min_val_loss": 0.78, "best_epoch": 12.0}, {"min_val_loss": 0.785, "best_epoch": 16.0}],
                "one seed": [{"min_val_loss": 0.5, "best_epoch": 1.0}]}
    assert value_range(settings["baseline"], "min_val_loss") == pytest.approx(0.02)
    assert value_range(settings["one seed"], "min_val_loss") is None  # one seed has no range
    spread = seed_spread(settings, ["min_val_loss", "best_epoch", "end_all"])
    assert spread["min_val_loss"] == pytest.approx(0.02)  # the baseline's, wider than EntroDrop's 0.005
    assert spread["best_epoch"] == pytest.approx(4.0)  # EntroDrop's 12 to 16, wider than the baseline's 2
    assert spread["end_all"] is None  # no setting has it
    assert mean_figures(settings["baseline"]) == {"best_epoch": 8.0, "min_val_loss": pytest.approx(0.81)}


def test_every_difference_says_whether_it_is_beyond_the_seed_spread():
    assert difference(0.78, 0.81, 0.02, 4) == "-0.0300 (beyond the spread 0.0200)"
    assert difference(0.80, 0.81, 0.02, 4) == "-0.0100 (within the spread 0.0200)"
    assert difference(0.83, 0.81, 0.02, 4) == "+0.0200 (within the spread 0.0200)"  # equal to the spread: noise
    assert difference(0.80, 0.81, None, 4) == "-0.0100 (no seed spread measured)"
    assert verdict(0.78, 0.81, 0.02) == "holds" and verdict(0.84, 0.81, 0.02) == "reversed"
    assert verdict(0.80, 0.81, 0.02) == "within the seed spread" and verdict(0.5, 0.81, None) == "not measured"
    # a later best epoch is the paper's claim: higher is better there
    assert verdict(14.0, 8.0, 4.0, lower_is_better=False) == "holds"
    assert verdict(5.0, 8.0, 2.0, lower_is_better=False) == "reversed"


def test_the_settings_table_puts_means_ranges_and_the_spread_beside_each_difference(tmp_path):
    runs = {name: read_run(fake_run(tmp_path, name, losses, groups=())) for name, losses in [
        ("baseline", [2.0, 1.60, 1.7]), ("baseline_seed1", [2.0, 1.62, 1.7]),
        ("entrodrop", [2.0, 1.90, 1.5]), ("entrodrop_seed1", [2.0, 1.90, 1.52])]}
    settings = {"baseline": [runs["baseline"], runs["baseline_seed1"]],
                "EntroDrop": [runs["entrodrop"], runs["entrodrop_seed1"]]}
    spread = seed_spread(setting_figures(settings))
    assert spread["min_val_loss"] == pytest.approx(0.02)
    table = settings_table(settings, "baseline", spread)
    # no task group was scored: no average columns; fake runs have equal buckets
    assert table[0] == ("| setting | seeds | best epoch | vs baseline | min val loss | vs baseline | end val loss "
                        "| end low-entropy | end high-entropy |")
    assert table[2] == ("| baseline | 2 | 2.00 [2.00, 2.00] | +0.00 (within the spread 0.00) | 1.6100 [1.6000, 1.6200] "
                        "| +0.0000 (within the spread 0.0200) | 1.7000 [1.7000, 1.7000] | 1.7000 [1.7000, 1.7000] "
                        "| 1.7000 [1.7000, 1.7000] |")
    assert table[3].startswith("| EntroDrop | 2 | 3.00 [3.00, 3.00] | +1.00 (beyond the spread 0.00) "
                               "| 1.5100 [1.5000, 1.5200] | -0.1000 (beyond the spread 0.0200) |")
    lines = verdict_lines(setting_figures(settings), "EntroDrop", "baseline", spread)
    assert lines[0] == ("EntroDrop against baseline, minimum validation loss: 1.5100 (2 seeds) against 1.6100 "
                        "(2 seeds), -0.1000; seed spread 0.0200: holds.")
    assert lines[1].startswith("EntroDrop against baseline, best epoch: 3.00 (2 seeds) against 2.00") and \
        lines[1].endswith(": holds.")


def test_averages_are_compared_only_where_scored_alike_and_a_loss_signal_gets_its_column(tmp_path):
    """A run whose tasks were scored on another number of documents has no average beside the
    others (it says which documents it covered instead), and a row whose gate ranked the loss
    marks each row's signal; a table of entropy runs alone has no signal column."""
    offline = fake_run(tmp_path, "offline", [2.0, 1.6])
    training = fake_run(tmp_path, "training", [2.0, 1.5, 1.4], limit=16)
    loss = fake_run(tmp_path, "loss", [2.0, 1.55])
    for run, signal in ((offline, "schedule: none"), (training, "schedule: sigmoid\n  signal: entropy"),
                        (loss, "schedule: sigmoid\n  signal: loss")):
        (run / "torchtune_config.yaml").write_text(f"token_dropout:\n  targeting: low\n  {signal}\n")
    runs = {r.name: read_run(r) for r in (offline, training, loss)}
    settings = {"offline": [runs["offline"]], "training": [runs["training"]]}
    table = settings_table(settings, "offline", seed_spread(setting_figures(settings, "code")), "code")
    assert "| best code average (all documents per task) | vs offline |" in table[0] and "signal" not in table[0]
    assert table[3].endswith("| 16: not compared | - |")  # training's subset scores stand nowhere
    assert table[2].endswith("| -1.600 | +0.000 (no seed spread measured) |")
    with_loss = settings_table({**settings, "loss": [runs["loss"]]}, "offline", {}, "code")
    assert with_loss[0].endswith("| signal |")
    assert [row.rsplit("|", 2)[1].strip() for row in with_loss[2:]] == ["-", "entropy", "loss"]


def test_the_regime_check_reads_the_papers_regime_off_a_baseline_alone(tmp_path):
    # The chosen CPU regime's baseline: early best epoch, a rebounding high bucket, a flat low one.
    paper = bucket_run(tmp_path, "paper", [(1.0, 1.1, 0.65, 1.95), (9.0, 0.81, 0.43, 1.41), (54.0, 1.25, 0.64, 2.29)])
    assert [row[2] for row in regime_check(run_figures(paper))] == ["yes", "yes", "yes"]
    # The CPU demo of 2026-11-25: a weak base, the low bucket rebounding, the high one flat, stopped early.
    weak = bucket_run(tmp_path, "weak", [(1.1, 4.59, 3.93, 5.26), (15.1, 3.40, 3.25, 3.35), (27.7, 3.52, 3.59, 3.31)])
    rows = regime_check(run_figures(weak))
    assert [row[2] for row in rows] == ["no", "no", "no"]
    assert rows[0][1] == "epoch 15.10 of 27.70 (1/1.8)"
    assert rows[2][1].startswith("ends at 3.590 (high's lowest 3.310), +0.340")
    table = regime_table({"paper": run_figures(paper), "weak": run_figures(weak)})
    assert table[0] == "| criterion | paper | weak |" and len(table) == 5
    assert table[2].endswith(": yes | epoch 15.10 of 27.70 (1/1.8): no |")
