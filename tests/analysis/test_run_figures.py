"""entrodrop/analysis/run_figures.py: what one run's figures are, as the report and the seed tables
both read them - a run directory read back (a cut last line left out), its best epoch, its end,
each bucket's rebound, its best average among the evaluations scored alike."""

import pytest
from conftest import fake_run

from entrodrop.analysis.run_figures import (
    best_average,
    compared,
    documents_covered,
    read_run,
    run_figures,
    summarize,
)


def test_a_run_whose_log_and_evaluations_end_in_a_cut_line_is_read_without_it(tmp_path, caplog):
    run = fake_run(tmp_path, "cut", [2.0, 1.8, 1.9])
    with (run / "logs" / "log_1.txt").open("a") as f:
        f.write("Step 11 | loss:2.8")  # cut in its last value: 2.8 parses, but is not what was logged
    evals = run / "eval" / "evals.jsonl"
    evals.write_text(evals.read_text() + '{"step": 40, "target_epoch": 4.0, "val_lo')
    read = read_run(run)
    assert list(read["steps"]) == list(range(1, 11)) and [e["step"] for e in read["evals"]] == [10, 20, 30]
    assert f"{run / 'logs' / 'log_1.txt'}, line 11: cut short" in caplog.text
    assert f"{evals}, line 4: cut short" in caplog.text


def test_a_runs_figures_are_its_best_epoch_its_end_and_how_far_each_bucket_rebounded():
    run = {"evals": [{"step": 10 * k, "target_epoch": epoch, "val_loss": {"all": a, "low": lo, "high": hi}}
                     for k, (epoch, a, lo, hi) in enumerate([(1.0, 1.1, 0.65, 1.95), (9.0, 0.81, 0.43, 1.41),
                                                             (30.0, 1.0, 0.5, 1.9), (54.0, 1.25, 0.64, 2.29)], start=1)]}
    figures = run_figures(run)
    assert (figures["best_epoch"], figures["min_val_loss"], figures["last_epoch"]) == (9.0, 0.81, 54.0)
    assert (figures["end_all"], figures["end_low"], figures["end_high"]) == (1.25, 0.64, 2.29)
    assert figures["low_rise"] == pytest.approx(0.21) and figures["high_rise"] == pytest.approx(0.88)
    assert figures["best_average"] is None  # no task group scored


def test_the_reports_row_and_the_seed_tables_figures_of_a_run_are_the_same(tmp_path):
    """The report's row (``summarize``) and the seed tables' figures (``run_figures``) agree; an
    average scored on fewer documents than the others' stands beside none of them, though alone
    it is that run's best."""
    offline = read_run(fake_run(tmp_path, "offline", [2.0, 1.6, 1.7]))
    training = read_run(fake_run(tmp_path, "training", [2.0, 1.5, 1.4], limit=16))
    kept = compared([offline, training], "code")
    for run in (offline, training):
        row, figures = summarize(run, "code", kept), run_figures(run, "code", kept)
        assert [row[k] for k in ("best_epoch", "min_val_loss", "best_average")] == \
            [figures[k] for k in ("best_epoch", "min_val_loss", "best_average")]
    assert summarize(offline, "code", kept)["best_average"] == -1.6 and documents_covered(offline, "code", kept) == "all"
    assert best_average(training, "code", kept) is None
    assert documents_covered(training, "code", kept) == "16: not compared"
    assert best_average(training, "code") == -1.4 and documents_covered(training, "code") == "16"
