"""recipes/evaluate.py through the real `tune run`: it scores every checkpoint of a run as
training would, skips what is scored, continues a killed evaluation, runs on two processes as
on one and through lm-eval's hf model as through the adapter, and refuses bad input before
scoring anything. Its parts alone: what the ranks score is rank 0's answer, a checkpoint scored
by one backend is not skipped for another, the hf model generates as the config says, and each
task's size is logged before scoring."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.errors import CacheMismatchError, ConfigError
from entrodrop.eval.checkpoint_scoring import decided_on_rank_zero, hf_lm, task_size
from entrodrop.eval.records import already_scored

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
                                          "limit": None, "metrics": {"humaneval_likelihood": "logprob_per_char,none"}}
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
        if name == "hf":  # beside the adapter's scores: another backend's are another evaluation
            shutil.copytree(tmp_path / "one", tmp_path / name)
        result = evaluate(tune_run, data, trained, LIMIT, f"eval_dir={tmp_path / name}", *overrides, nproc=nproc)
        assert "3 checkpoints, 0 already scored" in result.stderr, result.stderr[-3000:]
        # each task's size, before any scoring, whatever the backend
        size = "lm-eval task humaneval_likelihood: 16 requests (loglikelihood 16) on 16 documents"
        assert size in result.stderr and result.stderr.index(size) < result.stderr.index("[1/3]")
        backend = "hf" if name == "hf" else "torchtune"
        scores[name] = {r["step"]: r for r in records(tmp_path / name) if r.get("backend") == backend}
        assert sorted(scores[name]) == [10, 14, 15]
        assert all(r["max_gen_toks"] == 128 for r in scores[name].values())  # the config's
    for step, one in scores["one"].items():
        for name in ("two", "hf"):
            other = scores[name][step]
            assert other["val_loss"] == pytest.approx(one["val_loss"], rel=1e-6)
            # lm-eval's own model on the saved Hugging Face directory: the same log-likelihoods
            for metric, value in one["tasks"]["humaneval_likelihood"].items():
                if isinstance(value, float):
                    assert other["tasks"]["humaneval_likelihood"][metric] == pytest.approx(value, abs=1e-4), metric


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
    # Mistakes found at the same stage are reported together: one run checks each stage.
    for overrides, expected in [
        (["backend=vlm", "evaluation.validation.batch_siz=4"],
         ["backend=vlm must be one of ('torchtune', 'hf', 'vllm')", "did you mean batch_size?"]),
        (["backend=vllm"], ["pip install vllm"]),
        ([f"checkpoints={run}"], ["holds neither a Hugging Face checkpoint (config.json)"]),
        ([f"checkpoints={tmp_path}/nowhere"], [f"checkpoints={tmp_path}/nowhere does not exist"]),
        ([f"checkpoints={run}/checkpoints/step_10/config.json"],
         [f"checkpoints={run}/checkpoints/step_10/config.json is a file: give a run's checkpoint directory"]),
        (["evaluation.lm_eval.tasks.code=[humaneval_likelihood,humaneval]",
          "evaluation.lm_eval.metrics.humaneval_likelihood=acc,none"],
         ["allow_code_execution=False, but ['humaneval'] execute", "['humaneval'] run model-written code outside the sandbox",
          "evaluation.lm_eval.metrics.humaneval_likelihood='acc,none': humaneval_likelihood reports ['logprob_per_char,none']",
          "no metric for 'humaneval', which reports"]),
        (["evaluation.validation.target_tokens=null", "evaluation.lm_eval.tasks.code=[]"], ["nothing to evaluate"]),
    ]:
        result = evaluate(tune_run, data, run, *overrides, check=False)
        for message in expected:
            assert result.returncode != 0 and message in result.stderr, (overrides, message, result.stderr[-3000:])
    assert (run / "eval" / "evals.jsonl").read_text() == before


def evaluate_setup(run: Path, data: list, **validation: str):
    """recipes/evaluate.py's start-up, in this process, on ``run`` with the ``data``'s validation
    stores but for ``validation`` (``evaluation.validation.<key>``: a path)."""
    from recipes.evaluate import EvaluateRecipe

    overrides = [*validation_overrides(data), *(f"evaluation.validation.{k}={v}" for k, v in validation.items())]
    cfg = OmegaConf.merge(OmegaConf.load(REPO / CONFIG), OmegaConf.from_dotlist([f"output_dir={run}", *overrides]))
    EvaluateRecipe(cfg).setup(cfg)


def test_evaluation_checks_its_validation_stores_as_training_does_before_a_model_loads(trained, data, tmp_path,
                                                                                     monkeypatch):
    stores = dict(arg.split("=", 1) for arg in data)
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = (run / "eval" / "evals.jsonl").read_text()
    # The last check before the model is built: the checkpoints' config.json against it.
    monkeypatch.setattr("recipes.evaluate.model_config_problems", lambda *a: pytest.fail("a model was about to load"))
    newest = run / "checkpoints" / "step_15"
    # The run's training target store (and its cache) as the held-out one: it scored 6.80 for 6.90 before.
    with pytest.raises(ConfigError) as refused:
        evaluate_setup(run, data, target_tokens=stores["data.target_tokens"], target_entropy=stores["data.target_entropy"])
    assert str(refused.value).startswith(
        f"evaluation.validation.target_tokens and data.target_tokens are the same token store "
        f"({Path(stores['data.target_tokens']).resolve()}): validation would score the data the run trains on")
    assert str(refused.value).endswith(f"(the stores {newest} was trained with)")
    copy = tmp_path / "target_copy"  # the same samples at another path
    shutil.copytree(stores["data.target_tokens"], copy)
    with pytest.raises(ConfigError, match=rf"are the same token store \(\S+ and {copy} hold the same samples\)"):
        evaluate_setup(run, data, target_tokens=str(copy), target_entropy=stores["data.target_entropy"])
    # A validation cache overwritten with +inf at its size, and one of another model.
    cache = tmp_path / "entropy_val"
    shutil.copytree(stores["evaluation.validation.target_entropy"], cache)
    shard = cache / "shard-00000" / "entropy.npy"
    values = np.load(shard)
    shard.write_bytes(shard.read_bytes()[: -values.nbytes] + np.full_like(values, np.inf).tobytes())
    with pytest.raises(CacheMismatchError, match=f"^the entropy cache {cache} holds values that are not entropies:"):
        evaluate_setup(run, data, target_entropy=str(cache))
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["key"]["model"] = "0123456789abcdef"
    (cache / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheMismatchError, match=f"^the entropy cache {cache} was computed by another model "
                                                 r"\(fingerprint 0123456789abcdef\) than the entropy caches "):
        evaluate_setup(run, data, target_entropy=str(cache))
    assert (run / "eval" / "evals.jsonl").read_text() == before


def test_a_damaged_checkpoint_is_named_and_skipped_and_the_others_are_scored(trained, data, tune_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    cut = run / "checkpoints" / "step_14" / "model.safetensors"
    os.truncate(cut, cut.stat().st_size // 2)
    # validation only (no lm-eval task): training's records hold tasks at limit 16, so all 3 are to score
    result = evaluate(tune_run, data, run, f"eval_dir={tmp_path / 'eval'}", "evaluation.lm_eval.tasks.code=[]",
                      check=False)
    assert result.returncode != 0
    assert [r["step"] for r in records(tmp_path / "eval")] == [10, 15]  # a rerun once it is fixed scores step_14
    for line in (f"{cut} is truncated", f"{cut.parent} is a training checkpoint cut short",
                 f"Skipped: {cut.parent} is not scored", f"1 damaged checkpoint skipped, not scored (see the errors "
                 f"above): {cut.parent}. The others are recorded in {tmp_path / 'eval'}/evals.jsonl"):
        assert line in result.stderr, (line, result.stderr[-3000:])
    assert result.stderr.index("[3/3]") < result.stderr.index("1 damaged checkpoint skipped")  # after the others


def _decide_on_two_ranks(rank: int, init_file: str, out_dir: str, fail: bool) -> None:
    """One of two gloo processes: what ``decided_on_rank_zero`` gives it when each rank would find
    another list (a run saved a checkpoint between their looks), or rank 0 fails."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    calls = []

    def decide():
        calls.append(rank)
        if fail:
            raise ValueError(f"rank {rank}: incomplete checkpoints")
        return [f"step_{s}" for s in range(10, 10 * (rank + 2), 10)]

    try:
        answer = decided_on_rank_zero(decide, distributed=True)
    except ValueError as e:
        answer = f"ValueError: {e}"
    (Path(out_dir) / f"{rank}.json").write_text(json.dumps({"answer": answer, "calls": calls}))
    dist.barrier()  # no rank tears gloo down while another still works in it
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: everything is written and the group destroyed, and
    # a rank that then tears down gloo's and FSDP's objects can abort ('terminate called without an
    # active exception'), failing a test whose results are all in.
    os._exit(0)


@pytest.mark.recipe
@pytest.mark.parametrize("fail", [False, True])
def test_every_rank_scores_the_checkpoints_rank_0_found(tmp_path, fail):
    mp.spawn(_decide_on_two_ranks, args=(str(tmp_path / "init"), str(tmp_path), fail), nprocs=2)
    got = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    expected = "ValueError: rank 0: incomplete checkpoints" if fail else ["step_10"]
    assert got == [{"answer": expected, "calls": [0]}, {"answer": expected, "calls": []}]
    assert decided_on_rank_zero(lambda: ["alone"], distributed=False) == ["alone"]


def test_a_checkpoint_scored_by_one_backend_is_scored_again_by_another():
    def record(**fields):
        return {"step": 20, "checkpoint": "run/checkpoints/step_20", "tasks": {"t": {}}, "limit": None, **fields}

    training = [record()]  # training's records name no backend: the adapter scored them
    assert already_scored(training, "run/step_20", ["t"], None, False)
    assert already_scored(training, "run/step_20", ["t"], None, False, "torchtune", 512)
    assert not already_scored(training, "run/step_20", ["t"], None, False, "hf", 512)
    hf = [record(backend="hf", max_gen_toks=512)]
    assert already_scored(hf, "run/step_20", ["t"], None, False, "hf", 512)
    assert not already_scored(hf, "run/step_20", ["t"], None, False, "torchtune", 512)
    assert not already_scored(hf, "run/step_20", ["t"], None, False, "hf", 256)  # another generation length
    # no task: only the validation loss, which the torchtune model computes whatever the backend
    assert already_scored([record(backend="hf", val_loss={"all": 1.0})], "run/step_20", [], None, True, "vllm")


def test_the_hf_backend_generates_as_the_config_says(tiny_assets):
    from lm_eval.api.instance import Instance

    ev = OmegaConf.load(CONFIG).evaluation.lm_eval
    ev.max_gen_toks, ev.generation_batch_size = 7, 3  # neither lm-eval's default (256) nor batch_size (8)
    lm = hf_lm(tiny_assets / "qwen3", "cpu", "float32", ev)
    assert lm.max_gen_toks == 7
    seen = []
    generate = lm._model_generate

    def spy(context, max_length, stop, **kwargs):
        seen.append((context.shape[0], max_length - context.shape[1]))
        return generate(context, max_length, stop, **kwargs)

    lm._model_generate = spy
    requests = [Instance("generate_until", {}, (f"def f{k}():", {"until": ["\n\n"], "do_sample": False}), k)
                for k in range(5)]
    requests.append(Instance("generate_until", {}, ("x =", {"until": [], "max_gen_toks": 2, "do_sample": False}), 5))
    assert len(lm.generate_until(requests)) == 6
    # rows of generation_batch_size, each up to the config's max_gen_toks; a task's own wins
    assert sorted(seen) == [(1, 2), (2, 7), (3, 7)]
    assert lm.batch_size == 8  # scoring keeps batch_size


def test_a_tasks_size_counts_its_requests_and_the_most_tokens_it_may_generate():
    from lm_eval.api.instance import Instance

    generating = [Instance("generate_until", {}, ("p", {"until": []}), 0, ("gen", k, 1)) for k in range(3)]
    generating.append(Instance("generate_until", {}, ("p", {"max_gen_toks": 1000}), 0, ("gen", 3, 1)))
    assert task_size("gen", generating, 512) == ("lm-eval task gen: 4 requests (generate_until 4) on 4 documents, "
                                                 "at most 2,536 new tokens")
    choices = [Instance("loglikelihood", {}, ("q", f" {c}"), c, ("mc", k, 1)) for k in range(2) for c in range(4)]
    assert task_size("mc", choices, 512) == "lm-eval task mc: 8 requests (loglikelihood 8) on 2 documents"
