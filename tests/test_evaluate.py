"""recipes/evaluate.py through the real `tune run`: it scores every checkpoint of a run as
training would, skips what is scored, continues a killed evaluation, runs on two processes as
on one and through lm-eval's hf model as through the adapter, and refuses bad input before
scoring anything."""

import json
import shutil
from pathlib import Path

import pytest

CONFIG = "configs/tiny/qwen3_evaluate.yaml"
TRAIN = "configs/tiny/qwen3_entrodrop_single_device.yaml"
LIMIT = "evaluation.lm_eval.limit=16"  # HumanEval likelihood on 16 problems: seconds on the tiny model


@pytest.fixture(scope="module")
def trained(data, tune_run, tmp_path_factory):
    """A tiny run of 15 steps that evaluated at steps 14 (the first target-epoch end) and 15 and
    saved step_10, step_14 and step_15."""
    out = tmp_path_factory.mktemp("trained")
    result = tune_run("recipes/entrodrop_single_device.py", "--config", TRAIN, f"output_dir={out}", *data,
                      "total_tokens=30720", LIMIT)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def validation_overrides(data: list) -> list:
    return [a for a in data if a.startswith("evaluation.validation.")]


def evaluate(tune_run, data, run: Path, *overrides, nproc: int = 1, check: bool = True):
    result = tune_run("recipes/evaluate.py", "--config", CONFIG, f"output_dir={run}",
                      *validation_overrides(data), *overrides, nproc=nproc)
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def records(eval_dir: Path) -> list:
    return [json.loads(line) for line in (eval_dir / "evals.jsonl").read_text().splitlines()]


def test_every_checkpoint_is_scored_as_training_scored_it_and_scored_ones_are_skipped(trained, data, tune_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    in_training = {r["step"]: r for r in records(run / "eval")}
    evaluate(tune_run, data, run, LIMIT)
    after = records(run / "eval")
    # training scored steps 14 and 15 with the same tasks and limit: only step_10 was left
    assert [r["step"] for r in after] == [14, 15, 10]
    step_10 = after[-1]
    assert 0 < step_10["target_epoch"] < in_training[14]["target_epoch"]  # from its progress.json
    assert step_10["limit"] == 16 and set(step_10["val_loss"]) == {"all", "low", "high"}
    assert step_10["val_loss"]["all"] > in_training[14]["val_loss"]["all"]  # trained less, on the same data

    # The whole suite (no limit): every checkpoint again, with the numbers training had.
    full = evaluate(tune_run, data, run)
    assert "3 checkpoints, 0 already scored" in full.stderr
    offline = {r["step"]: r for r in records(run / "eval") if r["limit"] is None}
    assert sorted(offline) == [10, 14, 15]
    for step in (14, 15):
        assert offline[step]["target_epoch"] == in_training[step]["target_epoch"]
        assert offline[step]["val_loss"] == pytest.approx(in_training[step]["val_loss"], rel=1e-6)
    summary = json.loads((run / "eval" / "summary.json").read_text())
    # the best checkpoint is chosen among the scores on every document, never the limit-16 ones
    best = max(offline.values(), key=lambda r: r["groups"]["code"])
    assert summary["best_checkpoint"] == {"by": "code average", "score": best["groups"]["code"], "step": best["step"],
                                          "target_epoch": best["target_epoch"], "path": best["checkpoint"],
                                          "limit": None}
    # Nothing is left: nothing runs, nothing is written.
    before = (run / "eval" / "evals.jsonl").read_text()
    again = evaluate(tune_run, data, run)
    assert "3 checkpoints, 3 already scored in" in again.stderr and "0 to score" in again.stderr
    assert (run / "eval" / "evals.jsonl").read_text() == before

    # A killed evaluation (its last record never written) continues with what it had not written.
    lines = before.splitlines(keepends=True)
    (run / "eval" / "evals.jsonl").write_text("".join(lines[:-1]))
    evaluate(tune_run, data, run)
    assert (run / "eval" / "evals.jsonl").read_text() == before


def test_two_processes_and_the_hf_backend_score_what_one_process_does(trained, data, tune_run, tmp_path):
    scores = {}
    for name, overrides, nproc in [("one", [], 1), ("two", [], 2), ("hf", ["backend=hf"], 1)]:
        evaluate(tune_run, data, trained, LIMIT, f"eval_dir={tmp_path / name}", *overrides, nproc=nproc)
        scores[name] = {r["step"]: r for r in records(tmp_path / name)}
        assert sorted(scores[name]) == [10, 14, 15]
    for step, one in scores["one"].items():
        for name in ("two", "hf"):
            other = scores[name][step]
            assert other["val_loss"] == pytest.approx(one["val_loss"], rel=1e-6)
            # lm-eval's own model on the saved Hugging Face directory: the same log-likelihoods
            for metric, value in one["tasks"]["humaneval_likelihood"].items():
                if isinstance(value, float):
                    assert other["tasks"]["humaneval_likelihood"][metric] == pytest.approx(value, abs=1e-4), metric
        assert scores["hf"][step]["backend"] == "hf"


def test_bad_input_is_refused_before_anything_is_scored(trained, data, tune_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = (run / "eval" / "evals.jsonl").read_text()
    (run / "checkpoints" / "step_14" / "config.json").unlink()
    (run / "checkpoints" / "step_15" / "model.safetensors").unlink()
    result = evaluate(tune_run, data, run, check=False)
    assert result.returncode != 0
    for line in ("2 incomplete checkpoints, so nothing was scored", f"{run}/checkpoints/step_14: no config.json",
                 f"{run}/checkpoints/step_15: no weight file"):
        assert line in result.stderr, (line, result.stderr[-3000:])

    shutil.rmtree(run / "checkpoints" / "step_15")
    shutil.copy(run / "checkpoints" / "step_10" / "config.json", run / "checkpoints" / "step_14")
    for overrides, expected in [
        (["backend=vlm"], "backend=vlm must be one of ('torchtune', 'hf', 'vllm')"),
        (["backend=vllm"], "pip install vllm"),
        ([f"checkpoints={run}"], "holds neither a Hugging Face checkpoint (config.json)"),
        ([f"checkpoints={tmp_path}/nowhere"], f"checkpoints={tmp_path}/nowhere does not exist"),
        (["evaluation.lm_eval.tasks.code=[humaneval]"], "allow_code_execution=False, but ['humaneval'] execute"),
        (["evaluation.validation.target_tokens=null", "evaluation.lm_eval.tasks.code=[]"], "nothing to evaluate"),
        (["backend=hf", "evaluation.validation.batch_siz=4"], "did you mean batch_size?"),
    ]:
        result = evaluate(tune_run, data, run, *overrides, check=False)
        assert result.returncode != 0 and expected in result.stderr, (overrides, result.stderr[-3000:])
    assert (run / "eval" / "evals.jsonl").read_text() == before
