"""evals.jsonl and summary.json (entrodrop.eval.records): the score a task is read by, which averages
may be compared, the best checkpoint, and an evaluation record as metric-log fields."""

import errno
import json
import os
from pathlib import Path

import pytest

from entrodrop.errors import DamagedLineError, DiskFullError, naming_log_writes
from entrodrop.eval.records import (
    PLAIN_PROMPTS,
    already_scored,
    group_scores,
    metric_fields,
    most_complete,
    read_evaluations,
    record_evaluation,
    task_score,
)


def test_a_task_score_is_the_metric_named_never_the_first_one():
    result = {"alias": "gsm8k", "exact_match,strict-match": 0.1, "exact_match_stderr,strict-match": 0.01,
              "exact_match,flexible-extract": 0.6}
    assert task_score(result, "exact_match,flexible-extract") == 0.6
    with pytest.raises(ValueError, match=r"no metric 'exact_match,none'; it has \['exact_match,flexible-extract', "
                                         r"'exact_match,strict-match'\]"):
        task_score(result, "exact_match,none")
    results = {"a": {"acc,none": 0.2, "acc_norm,none": 0.4}, "b": {"acc,none": 0.6, "acc_norm,none": 0.0}}
    assert group_scores(results, {"g": ["a", "b"]}, {"a": "acc_norm,none", "b": "acc,none"}) == {"g": 0.5}


def test_averages_of_other_metrics_or_tasks_are_never_compared(tmp_path):
    """Offline scores of one metric, then of another (a config changed): only the newest kind
    competes; older records without metrics count as their own kind."""
    def record(step, score, metric, tasks=("t",)):
        return {"step": step, "target_epoch": step / 10, "checkpoint": f"run/step_{step}", "limit": None,
                "tasks": {t: {} for t in tasks}, "groups": {"math": score},
                "metrics": {"math": {t: metric for t in tasks}} if metric else {}}
    old = record(10, 0.9, None)  # written before metrics were recorded: its tasks' first metric
    strict = [record(10, 0.8, "exact_match,strict-match"), record(20, 0.2, "exact_match,strict-match")]
    flexible = [record(10, 0.3, "exact_match,flexible-extract"), record(20, 0.4, "exact_match,flexible-extract")]
    assert most_complete([old] + strict, "math") == strict
    assert most_complete(strict + flexible, "math") == flexible
    assert most_complete(flexible + [record(30, 0.9, "exact_match,flexible-extract", ("t", "u"))], "math")[0]["step"] == 30
    for r in [old] + strict + flexible:
        summary = record_evaluation(tmp_path, r, "math")
    assert summary["best_checkpoint"]["path"] == "run/step_20"  # 0.4, not strict-match's 0.8 nor the old 0.9
    assert summary["best_checkpoint"]["metrics"] == {"t": "exact_match,flexible-extract"}
    # A checkpoint scored with other metrics or prompts is scored again.
    scoring = {"metrics": {"t": "exact_match,flexible-extract"}, "prompt_format": PLAIN_PROMPTS}
    assert already_scored(flexible, "run/step_20", ["t"], None, False, scoring=scoring)
    assert not already_scored(strict, "run/step_20", ["t"], None, False, scoring=scoring)
    chat = {**scoring, "prompt_format": {"apply_chat_template": True, "system_instruction": None}}
    assert not already_scored(flexible, "run/step_20", ["t"], None, False, scoring=chat)


def test_summary_picks_the_best_checkpoint_by_the_target_group(tmp_path):
    records = [
        {"step": 10, "target_epoch": 1.0, "checkpoint": "c10", "val_loss": {"all": 2.0, "low": 1, "high": 3},
         "groups": {"code": 0.2, "general": 0.9}},
        {"step": 20, "target_epoch": 2.0, "checkpoint": "c20", "val_loss": {"all": 1.5, "low": 1, "high": 3},
         "groups": {"code": 0.1, "general": 0.5}},
        {"step": 30, "target_epoch": 3.0, "checkpoint": "c30", "val_loss": {"all": 1.8, "low": 1, "high": 3},
         "groups": {"code": 0.4, "general": 0.1}},
    ]
    for record in records:
        summary = record_evaluation(tmp_path, record, "code")
    assert summary["best_checkpoint"]["path"] == "c30" and summary["best_checkpoint"]["by"] == "code average"
    assert (summary["best_epoch"], summary["min_val_loss"]) == (2.0, 1.5)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evals.jsonl", "summary.json"]
    for record in records:  # no task ran: the best checkpoint is the one with the lowest loss
        summary = record_evaluation(tmp_path / "loss_only", {k: v for k, v in record.items() if k != "groups"}, "code")
    assert summary["best_checkpoint"] == {"by": "validation loss", "score": 1.5, "step": 20, "target_epoch": 2.0,
                                          "path": "c20"}


def test_scores_on_every_document_outrank_subset_scores(tmp_path):
    """Training scores a limited subset; the offline evaluation scores everything, into the same file."""
    subset = [{"step": s, "target_epoch": s / 10, "checkpoint": f"run/step_{s}", "limit": 16,
               "tasks": {"t": {}}, "groups": {"code": g}} for s, g in [(10, 0.9), (20, 0.3)]]
    full = [{**r, "limit": None, "groups": {"code": g}} for r, g in zip(subset, [0.4, 0.5])]
    assert most_complete(subset, "code") == subset
    assert most_complete(subset + full, "code") == full
    assert most_complete([{**subset[0], "limit": 64}] + subset, "code") == [{**subset[0], "limit": 64}]
    for record in subset + full:
        summary = record_evaluation(tmp_path, record, "code")
    assert (summary["best_checkpoint"]["step"], summary["best_checkpoint"]["limit"]) == (20, None)
    assert already_scored(full, "/moved/run/step_20", ["t"], None, validation=False)
    assert not already_scored(full, "run/step_20", ["t", "u"], None, validation=False)  # another task
    assert not already_scored(full, "run/step_20", ["t"], 16, validation=False)  # another limit
    assert not already_scored(full, "run/step_20", ["t"], None, validation=True)  # no validation loss
    assert not already_scored(full, "run/step_30", ["t"], None, validation=False)


def test_metric_fields_flatten_a_record_and_mark_j0_at_the_evaluation_that_fixed_it():
    j0 = {"target_epoch": 0.75, "step": 9, "fixed_at_step": 15}
    record = {"step": 15, "target_epoch": 1.25, "checkpoint": "run/checkpoints/step_15",
              "val_loss": {"all": 2.3, "low": 2.0, "high": 2.6}, "groups": {"code": 0.25, "general": 0.5},
              "tasks": {"t": {"acc,none": 0.25}}, "signal": {"gate_agreement": 0.9, "rank_correlation": 0.8},
              "auto_midpoint": j0}
    assert metric_fields(record) == {
        "val_loss_all": 2.3, "val_loss_low": 2.0, "val_loss_high": 2.6, "code_average": 0.25, "general_average": 0.5,
        "signal_gate_agreement": 0.9, "signal_rank_correlation": 0.8, "midpoint_epoch": 0.75, "midpoint_step": 9}
    later = {**record, "step": 18}  # every later record carries j0; the log marks it once
    assert "midpoint_epoch" not in metric_fields(later) and "midpoint_step" not in metric_fields(later)
    not_fixed = {"step": 3, "target_epoch": 0.25, "val_loss": {"all": 3.0}, "auto_midpoint": None}
    assert metric_fields(not_fixed) == {"val_loss_all": 3.0}
    assert metric_fields({"step": 3, "target_epoch": 0.25, "groups": {"code": 0.5}}) == {"code_average": 0.5}


def record(step: int, loss: float) -> dict:
    return {"step": step, "target_epoch": step / 10, "checkpoint": f"step_{step}",
            "val_loss": {"all": loss, "low": loss, "high": loss}}


def test_a_cut_last_record_is_skipped_and_named_and_the_next_one_starts_on_its_own_line(tmp_path, caplog):
    evals = tmp_path / "evals.jsonl"
    evals.write_text(json.dumps(record(10, 2.0)) + "\n" + json.dumps(record(20, 1.5))[:40])  # a full disk cut it
    assert read_evaluations(tmp_path) == [record(10, 2.0)]
    assert f"{evals}, line 2: cut short" in caplog.text
    # A resumed run records its next evaluation: on a line of its own, so it and the summary stay readable.
    summary = record_evaluation(tmp_path, record(30, 1.8), "code")
    assert read_evaluations(tmp_path) == [record(10, 2.0), record(30, 1.8)]
    assert (summary["evaluations"], summary["min_val_loss"]) == (2, 1.8)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert f"{evals}, line 2: a record cut short by a write that did not finish, removed" in caplog.text
    # a whole last record whose newline is missing (a file edited by hand) is kept, and ended
    evals.write_text(json.dumps(record(10, 2.0)))
    record_evaluation(tmp_path, record(20, 1.5), "code")
    assert read_evaluations(tmp_path) == [record(10, 2.0), record(20, 1.5)]


def test_a_line_that_cannot_be_read_before_the_last_is_named_as_damage(tmp_path):
    (tmp_path / "evals.jsonl").write_text(json.dumps(record(10, 2.0)) + "\n{\"step\": 20, \"tar\n"
                                          + json.dumps(record(30, 1.8)) + "\n")
    with pytest.raises(DamagedLineError, match=rf"^{tmp_path / 'evals.jsonl'}, line 2 cannot be read \(Unterminated "
                                               r"string .*\), and it is not the last line.*Repair or delete that line"):
        read_evaluations(tmp_path)


def test_two_processes_recording_into_one_eval_dir_each_replace_summary_json_through_their_own_name(tmp_path, monkeypatch):
    """One temporary name for every writer: a second writer's rename took the first's file, whose own
    rename then failed (FileNotFoundError). Here the second records between the first's write and rename."""
    record = {"step": 10, "target_epoch": 1.0, "checkpoint": "c10", "val_loss": {"all": 2.0, "low": 1, "high": 3}}
    real_replace, other_writer = os.replace, [{**record, "step": 20, "checkpoint": "c20"}]

    def replace_after_another_writer(src, dst):
        if Path(dst).name == "summary.json" and other_writer:
            record_evaluation(tmp_path, other_writer.pop(), "code")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_another_writer)
    record_evaluation(tmp_path, record, "code")  # no FileNotFoundError
    assert len((tmp_path / "evals.jsonl").read_text().splitlines()) == 2
    # The summary of the writer that replaced it last, whole: the first, which had read one record.
    assert json.loads((tmp_path / "summary.json").read_text())["best_checkpoint"]["path"] == "c10"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evals.jsonl", "summary.json"]


class _FullDisk:
    """A file object whose writes a full disk refuses: ``OSError`` ENOSPC naming no path, as ``write()``'s."""

    def __init__(self, real):
        self._real = real

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._real.close()


def test_a_full_disk_while_the_summary_is_written_names_it_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_fdopen = os.fdopen
    monkeypatch.setattr("entrodrop.eval.records.os.fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(DiskFullError) as refused:
        record_evaluation(tmp_path, {"step": 10, "target_epoch": 1.0, "checkpoint": "c", "val_loss": {"all": 2.0}},
                          "code")
    assert str(refused.value).startswith(f"no space left on device writing {tmp_path / 'summary.json'} (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evals.jsonl"]


def test_a_full_disk_under_a_metric_log_names_its_file(tmp_path):
    from torchtune.training.metric_logging import DiskLogger

    logger = naming_log_writes(DiskLogger(log_dir=str(tmp_path)))
    [log_file] = tmp_path.glob("log_*.txt")
    logger._target._file = _FullDisk(logger._target._file)
    with pytest.raises(DiskFullError) as refused:
        logger.log_dict({"loss": 1.0}, step=1)
    assert str(refused.value).startswith(f"no space left on device writing {log_file} (")
    assert naming_log_writes(object) is object  # a logger that writes no local file (none named)
