"""entrodrop/analysis/multi_seed.py: the arithmetic of several seeds (means, ranges, differences paired by seed
with their interval and verdict), the tables and the figure it makes, and the regime check read
off a baseline."""

import json

import pytest
from conftest import fake_run

from entrodrop.analysis.multi_seed import (
    band,
    by_seed,
    claim_row,
    difference_cell,
    draw_seed_bands,
    mean_figures,
    paired,
    regime_check,
    regime_table,
    setting_figures,
    settings_table,
    value_range,
    verdict,
    verdict_lines,
)
from entrodrop.analysis.run_figures import read_run, run_figures


def bucket_run(root, name, curve, base_low=None):
    """A run directory whose evaluations have distinct buckets: ``curve`` is (epoch, all, low, high);
    ``base_low``: the base model's mean entropy of the low bucket, recorded as the evaluator does."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    base = {} if base_low is None else {"base_entropy": {"all": 1.0, "low": base_low, "high": 2.5}}
    (run / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({"step": 10 * k, "target_epoch": epoch, "val_loss": {"all": a, "low": lo, "high": hi}, **base}) + "\n"
        for k, (epoch, a, lo, hi) in enumerate(curve, start=1)))
    return read_run(run)


def seeds_of(**values):
    """``{seed: {"min_val_loss": value}}`` from seed=value keywords (s0=..., s1=...)."""
    return {int(k[1:]): {"min_val_loss": v} for k, v in values.items()}


def test_a_paired_difference_holds_reverses_or_is_not_resolved_by_its_interval():
    base = seeds_of(s0=0.80, s1=0.82, s2=0.79, s3=0.81)
    # Below the baseline in every seed by about 0.02: the seeds' own range (0.03) is wider than the
    # effect, but paired by seed the interval excludes 0.
    lower = seeds_of(s0=0.78, s1=0.801, s2=0.772, s3=0.789)
    held = paired(lower, base, "min_val_loss")
    assert held["n"] == 4 and held["below"] == 4 and held["mean"] == pytest.approx(-0.0195)
    assert held["high"] < 0 and verdict(held) == "holds"
    assert verdict(held, lower_is_better=False) == "reversed"  # the same interval, the other claim
    higher = seeds_of(s0=0.82, s1=0.84, s2=0.81, s3=0.83)
    assert verdict(paired(higher, base, "min_val_loss")) == "reversed"
    mixed = seeds_of(s0=0.79, s1=0.83, s2=0.78, s3=0.82)  # two seeds below, two above
    unresolved = paired(mixed, base, "min_val_loss")
    assert unresolved["low"] < 0 < unresolved["high"] and verdict(unresolved) == "not resolved"
    assert difference_cell(held, 4) == f"-0.0195 [{held['low']:+.4f}, {held['high']:+.4f}]"


def test_a_seed_one_setting_lacks_is_left_out_of_its_pairs_and_one_pair_has_no_interval():
    base = seeds_of(s0=0.80, s1=0.82, s2=0.79)
    missing = seeds_of(s0=0.78, s2=0.77)  # seed 1 failed
    p = paired(missing, base, "min_val_loss")
    assert p["seeds"] == [0, 2] and p["differences"] == pytest.approx([-0.02, -0.02])
    one = paired(seeds_of(s2=0.5), base, "min_val_loss")
    assert one["n"] == 1 and one["low"] is None and verdict(one) == "not resolved"
    assert difference_cell(one, 2) == "-0.29 (1 seed)"
    assert paired(seeds_of(s7=0.5), base, "min_val_loss") is None and difference_cell(None, 2) == "-"
    # a run without the figure (no evaluation) pairs with nothing
    assert paired({0: {"min_val_loss": None}}, base, "min_val_loss") is None


def test_a_claim_row_gives_the_means_the_paired_interval_the_seeds_that_agree_and_the_verdict():
    figures = {"baseline": seeds_of(s0=0.80, s1=0.82, s2=0.79), "entrodrop": seeds_of(s0=0.78, s1=0.80, s2=0.771)}
    row = claim_row("EntroDrop lowers it", figures, "entrodrop", "baseline", "min_val_loss", True, 4)
    assert row[:2] == ["EntroDrop lowers it", "entrodrop 0.7837 vs baseline 0.8033"]
    assert row[3:] == ["3 of 3", "holds"]
    seeds = list(figures["baseline"].values())
    assert mean_figures(seeds) == {"min_val_loss": pytest.approx(0.8033, abs=1e-4)}
    assert value_range(seeds, "min_val_loss") == pytest.approx(0.03) and value_range(seeds[:1], "min_val_loss") is None
    later = claim_row("later", {"a": {0: {"best_epoch": 9.0}, 1: {"best_epoch": 12.0}},
                                "b": {0: {"best_epoch": 10.0}, 1: {"best_epoch": 10.0}}}, "a", "b", "best_epoch", False, 2)
    assert later[3:] == ["1 of 2", "not resolved"]


def test_runs_pair_by_the_seed_they_trained_with_not_by_their_place(tmp_path):
    runs = []
    for name, seed, losses in [("b1", 1, [2.0, 1.62]), ("b0", 0, [2.0, 1.60]), ("e0", 0, [2.0, 1.55]),
                               ("e1", 1, [2.0, 1.58])]:
        run = fake_run(tmp_path, name, losses, groups=())
        (run / "torchtune_config.yaml").write_text(f"seed: {seed}\n")
        runs.append(read_run(run))
    figures = setting_figures({"baseline": runs[:2], "EntroDrop": runs[2:]})
    assert figures["baseline"][1]["min_val_loss"] == 1.62
    assert paired(figures["EntroDrop"], figures["baseline"], "min_val_loss")["differences"] == pytest.approx([-0.05, -0.04])
    with pytest.raises(ValueError, match="both trained with seed 0"):
        by_seed([runs[1], runs[2]])


def test_the_settings_table_puts_means_ranges_and_the_paired_interval_beside_each_figure(tmp_path):
    runs = {name: read_run(fake_run(tmp_path, name, losses, groups=())) for name, losses in [
        ("baseline", [2.0, 1.60, 1.7]), ("baseline_seed1", [2.0, 1.62, 1.7]),
        ("entrodrop", [2.0, 1.90, 1.5]), ("entrodrop_seed1", [2.0, 1.90, 1.52])]}
    settings = {"baseline": [runs["baseline"], runs["baseline_seed1"]],
                "EntroDrop": [runs["entrodrop"], runs["entrodrop_seed1"]]}
    table = settings_table(settings, "baseline")
    # no task group was scored: no average columns; fake runs have equal buckets
    assert table[0] == ("| setting | seeds | best epoch | vs baseline, paired | min val loss | vs baseline, paired "
                        "| end val loss | vs baseline, paired | end low-entropy | end high-entropy |")
    assert table[2].startswith("| baseline | 2 | 2.00 [2.00, 2.00] | +0.00 [+0.00, +0.00] | 1.6100 [1.6000, 1.6200] "
                               "| +0.0000 [+0.0000, +0.0000] |")
    # EntroDrop's seeds are 0.10 below the baseline's each: an interval of width 0
    assert table[3].startswith("| EntroDrop | 2 | 3.00 [3.00, 3.00] | +1.00 [+1.00, +1.00] "
                               "| 1.5100 [1.5000, 1.5200] | -0.1000 [-0.1000, -0.1000] |")
    lines = verdict_lines(setting_figures(settings), "EntroDrop", "baseline")
    assert lines[0] == ("EntroDrop against baseline, minimum validation loss: 1.5100 against 1.6100 (2 seeds each), "
                        "paired -0.1000 [-0.1000, -0.1000]: holds.")
    assert lines[1].startswith("EntroDrop against baseline, best epoch: 3.00 against 2.00") and lines[1].endswith(": holds.")


def test_the_band_follows_each_evaluation_over_the_seeds_that_reach_it(tmp_path):
    # a seed with one evaluation fewer (its rows packed into fewer epochs) drops out at the end
    points = band([[(1.0, 2.0), (2.0, 1.0), (3.0, 0.9)], [(1.1, 2.2), (2.1, 1.2)], [(0.9, 2.1), (1.9, 1.1), (2.9, 1.0)]])
    assert [round(epoch, 3) for epoch, _, _ in points] == [1.0, 2.0, 2.95]
    assert points[0][1] == pytest.approx(2.1) and points[0][2] == pytest.approx(4.303 * 0.1 / 3 ** 0.5, rel=1e-3)
    assert band([[(1.0, 2.0)], []]) == []  # one seed: no band
    runs = [bucket_run(tmp_path, f"b{k}", [(1.0, 1.1 + k / 100, 0.65, 1.95), (2.0, 0.9, 0.5, 1.5)]) for k in range(3)]
    other = [bucket_run(tmp_path, f"e{k}", [(1.0, 1.0 + k / 100, 0.6, 1.9), (2.0, 0.85, 0.45, 1.4)]) for k in range(3)]
    draw_seed_bands({"baseline": runs, "EntroDrop": other}, tmp_path / "bands.png")
    assert (tmp_path / "bands.png").read_bytes()[:4] == b"\x89PNG"


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
    table = settings_table(settings, "offline", "code")
    assert "| best code average (all documents per task) | vs offline, paired |" in table[0] and "signal" not in table[0]
    assert table[3].endswith("| 16: not compared | - |")  # training's subset scores stand nowhere
    assert table[2].endswith("| -1.600 | +0.000 (1 seed) |")
    with_loss = settings_table({**settings, "loss": [runs["loss"]]}, "offline", "code")
    assert with_loss[0].endswith("| signal |")
    assert [row.rsplit("|", 2)[1].strip() for row in with_loss[2:]] == ["-", "entropy", "loss"]


def test_the_regime_check_reads_the_papers_regime_off_a_baseline_alone(tmp_path):
    # The chosen CPU regime's baseline: early best epoch, a rebounding high bucket, a flat low one.
    paper = bucket_run(tmp_path, "paper", [(1.0, 1.1, 0.65, 1.95), (9.0, 0.81, 0.43, 1.41), (54.0, 1.25, 0.64, 2.29)],
                       base_low=0.72)
    # ... but its low-entropy tokens are not near-certain: the paper's premise fails.
    assert [row[2] for row in regime_check(run_figures(paper))] == ["yes", "yes", "yes", "no"]
    assert regime_check(run_figures(paper))[3][1] == "base entropy 0.720, lowest loss 0.430"
    # A base that knew the low half almost surely, whose baseline kept it near zero: all four hold.
    premise = bucket_run(tmp_path, "premise", [(1.0, 0.9, 0.09, 1.95), (9.0, 0.6, 0.05, 1.41), (54.0, 1.0, 0.07, 2.29)],
                         base_low=0.08)
    assert [row[2] for row in regime_check(run_figures(premise))] == ["yes", "yes", "yes", "yes"]
    # A run from before the evaluations recorded the base's entropy cannot show the premise.
    assert regime_check(run_figures(bucket_run(tmp_path, "old", [(1.0, 0.9, 0.05, 1.9)])))[3][1:] == [
        "base entropy not recorded, lowest loss 0.050", "no"]
    # The CPU demo of 2026-11-25: a weak base, the low bucket rebounding, the high one flat, stopped early.
    weak = bucket_run(tmp_path, "weak", [(1.1, 4.59, 3.93, 5.26), (15.1, 3.40, 3.25, 3.35), (27.7, 3.52, 3.59, 3.31)])
    rows = regime_check(run_figures(weak))
    assert [row[2] for row in rows] == ["no", "no", "no", "no"]
    assert rows[0][1] == "epoch 15.10 of 27.70 (1/1.8)"
    assert rows[2][1].startswith("ends at 3.590 (high's lowest 3.310), +0.340")
    table = regime_table({"paper": run_figures(paper), "weak": run_figures(weak)})
    assert table[0] == "| criterion | paper | weak |" and len(table) == 6
    assert table[2].endswith(": yes | epoch 15.10 of 27.70 (1/1.8): no |")
