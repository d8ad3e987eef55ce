"""The EntroDrop recipes through the real `tune run`: one and two processes agree, a SIGKILLed
run resumes to the same losses bitwise, every baseline switch runs, bad settings fail early."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CACHES, REPO, TUNE, descendants, running
from recipe_helpers import CHUNKED_CE, DISTRIBUTED, NO_EVAL, SINGLE, logged, run_ok, train_args

from entrodrop.train.run_lock import LOCK_NAME

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess

def test_two_processes_train_and_evaluate_like_one(data, tune_run, tmp_path):
    steps = ["total_tokens=30720"]  # 15 steps of 8 x 256: one target-epoch end, and the last step
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "one", *steps))
    two_processes = run_ok(tune_run, *train_args(DISTRIBUTED, data, tmp_path / "two", *steps), nproc=2)
    # lm-eval runs on both ranks; its warnings and progress bars show on rank 0 only
    assert two_processes.stderr.count("humaneval_likelihood: Custom kwargs can be passed") == 2  # two evaluations
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "quiet", *steps, *NO_EVAL))
    one, two, quiet = logged(tmp_path / "one"), logged(tmp_path / "two"), logged(tmp_path / "quiet")
    assert sorted(one) == sorted(two) == list(range(1, 16))
    for step in one:
        assert {"loss", "lr", "gamma_max", "gamma", "target_dropped", "tokens_per_second", "target_epoch"} <= one[step].keys()
        assert float(two[step]["loss"]) == pytest.approx(float(one[step]["loss"]), rel=1e-5)
        for key in ("gamma_max", "gamma", "target_dropped", "lr"):
            assert float(two[step][key]) == pytest.approx(float(one[step][key]), rel=1e-6), key
        assert quiet[step]["loss"] == one[step]["loss"], "evaluating changed training"
    assert any(float(one[s].get("target_dropped", 0)) > 0 for s in one), "no token was ever dropped"

    evals = {name: [json.loads(line) for line in (tmp_path / name / "eval" / "evals.jsonl").read_text().splitlines()]
             for name in ("one", "two")}
    assert [e["step"] for e in evals["one"]] == [e["step"] for e in evals["two"]] == [14, 15]
    for a, b in zip(evals["one"], evals["two"]):
        for bucket in ("all", "low", "high"):
            assert b["val_loss"][bucket] == pytest.approx(a["val_loss"][bucket], rel=1e-5)
        assert b["groups"]["code"] == pytest.approx(a["groups"]["code"], rel=1e-5)
    summary = json.loads((tmp_path / "one" / "eval" / "summary.json").read_text())
    assert summary["best_checkpoint"]["by"] == "code average" and Path(summary["best_checkpoint"]["path"]).is_dir()
    assert summary["min_val_loss"] == min(e["val_loss"]["all"] for e in evals["one"])


def kill_at_checkpoint(args, out: Path, nproc: int, step: int = 6, last: int = 30) -> None:
    """Start the run and SIGKILL its launcher, as a user would, as soon as checkpoint ``step_<step>``
    exists. Every process of the run ends with it: with 2, torchrun's workers (each in a session of
    its own, so no signal to the launcher's group reaches them) are checked by PID."""
    launcher = ["--nproc_per_node", str(nproc)] if nproc > 1 else []
    proc = subprocess.Popen([TUNE, "run", *launcher, *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers = []
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and not (out / "checkpoints" / f"step_{step}").exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        workers = descendants(proc.pid)  # with 1 process, the launcher is the worker
        assert nproc == 1 or len(workers) >= nproc, f"found {workers} as the workers of {nproc} processes"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [pid for pid in workers if running(pid)], "processes of the run outlived its SIGKILLed launcher"
    finally:  # a failed test leaves nothing training
        for pid in [proc.pid, *workers]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert not (out / "checkpoints" / f"step_{last}").exists(), "the run ended before it was killed"


@pytest.mark.parametrize("config, nproc", [(SINGLE, 1), (DISTRIBUTED, 2)])
def test_sigkill_and_resume_logs_the_same_losses(data, tune_run, tmp_path, config, nproc):
    settings = ["total_tokens=61440", "save_every_n_steps=3", *NO_EVAL]  # 30 steps, about 2.8 target epochs
    run_ok(tune_run, *train_args(config, data, tmp_path / "straight", *settings), nproc=nproc)
    killed = tmp_path / "killed"
    kill_at_checkpoint(train_args(config, data, killed, *settings), killed, nproc)
    first = logged(killed)
    run_ok(tune_run, *train_args(config, data, killed, *settings, "resume=True"), nproc=nproc)
    straight, resumed = logged(tmp_path / "straight"), logged(killed)
    assert sorted(resumed) == sorted(straight) == list(range(1, 31))
    assert 6 <= max(first) < 30
    for step in straight:
        for key in ("loss", "gamma", "target_dropped", "grad_norm", "target_epoch"):
            assert resumed[step][key] == straight[step][key], (step, key)  # bitwise: same repr
        if step in first:
            assert first[step]["loss"] == straight[step]["loss"]


# midpoint: auto on the tiny model: at lr 1e-2 its validation loss (every 3 steps) stops falling
# within the 30 steps, so that patience 2 fixes j0 half way.
AUTO = ["total_tokens=61440", "optimizer.lr=1.0e-2", "token_dropout.midpoint=auto", "token_dropout.auto_patience=2",
        "token_dropout.auto_min_improvement=0.0", "evaluation.every_n_steps=3", "evaluation.every_n_epochs=null",
        "evaluation.lm_eval.tasks.code=[]", "save_every_n_steps=3"]


def fixed_at(steps: dict) -> int:
    """The step whose log line carries the j0 that midpoint: auto fixed."""
    fixed = [s for s, m in steps.items() if "midpoint_epoch" in m]
    assert len(fixed) == 1, fixed
    return fixed[0]


def test_midpoint_auto_trains_as_the_baseline_until_it_fixes_j0(data, tune_run, tmp_path):
    result = run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "auto", *AUTO))
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "baseline", *AUTO, "token_dropout.schedule=none"))
    auto, baseline = logged(tmp_path / "auto"), logged(tmp_path / "baseline")
    fixed = fixed_at(auto)
    assert 6 < fixed < 27, fixed
    evals = [json.loads(line) for line in (tmp_path / "auto" / "eval" / "evals.jsonl").read_text().splitlines()]
    # j0 is the lowest validation loss up to the evaluation that fixed it, two evaluations (patience) before it
    before = [e for e in evals if e["step"] <= fixed]
    lowest = min(before, key=lambda e: e["val_loss"]["all"])
    assert lowest["step"] == fixed - 2 * 3
    j0 = {"target_epoch": lowest["target_epoch"], "step": lowest["step"], "fixed_at_step": fixed}
    assert float(auto[fixed]["midpoint_epoch"]) == j0["target_epoch"] and int(float(auto[fixed]["midpoint_step"])) == j0["step"]
    assert [e.get("auto_midpoint") for e in evals] == [None if e["step"] < fixed else j0 for e in evals]
    assert json.loads((tmp_path / "auto" / "eval" / "summary.json").read_text())["auto_midpoint"] == j0
    assert f"midpoint: auto fixed j0 at target epoch {j0['target_epoch']:.2f} (step {j0['step']})" in result.stderr
    # Until j0 is fixed the curriculum is off, gamma_max(j) = 0 exactly: the baseline's run, bitwise.
    for step in range(1, fixed + 1):
        assert auto[step]["gamma_max"] == "0.0" and auto[step]["loss"] == baseline[step]["loss"], step
    assert all(float(auto[step]["gamma_max"]) > 0.05 for step in range(fixed + 1, 31))  # past j0 already
    assert auto[fixed + 2]["loss"] != baseline[fixed + 2]["loss"]
    assert fixed_at(baseline) == fixed  # the baseline would have fixed the same j0


@pytest.mark.parametrize("config, nproc", [(SINGLE, 1), (DISTRIBUTED, 2)])
def test_sigkill_before_and_after_midpoint_auto_fixes_j0_and_resume_logs_the_same_losses(data, tune_run, tmp_path,
                                                                                         config, nproc):
    run_ok(tune_run, *train_args(config, data, tmp_path / "straight", *AUTO), nproc=nproc)
    straight = logged(tmp_path / "straight")
    fixed = fixed_at(straight)
    killed = tmp_path / "killed"
    # Killed before j0 is fixed (the checkpoint holds the validation losses so far), then right after
    # the checkpoint of the evaluation that fixed it (its recipe state holds j0).
    kill_at_checkpoint(train_args(config, data, killed, *AUTO), killed, nproc, step=6)
    assert not (killed / "checkpoints" / f"step_{fixed}").exists()
    kill_at_checkpoint(train_args(config, data, killed, *AUTO, "resume=True"), killed, nproc, step=fixed)
    state = torch.load(killed / "checkpoints" / f"step_{fixed}" / "recipe_state.pt", weights_only=False)
    assert state["j0"]["fixed_at_step"] == fixed and len(state["val_losses"]) == fixed // 3
    run_ok(tune_run, *train_args(config, data, killed, *AUTO, "resume=True"), nproc=nproc)
    resumed = logged(killed)
    assert sorted(resumed) == sorted(straight) == list(range(1, 31))
    for step in straight:
        for key in ("loss", "gamma_max", "gamma", "target_dropped", "grad_norm", "target_epoch"):
            assert resumed[step][key] == straight[step][key], (step, key)  # bitwise: same repr
    summary = lambda out: json.loads((out / "eval" / "summary.json").read_text())  # noqa: E731
    assert summary(killed)["auto_midpoint"] == summary(tmp_path / "straight")["auto_midpoint"] == state["j0"]


# The tiny configs train with the fused loss (entrodrop.models.loss.LinearCrossEntropy); this is torchtune's.
def test_the_fused_loss_trains_like_torchtunes_chunked_loss_on_one_and_two_processes(data, tune_run, tmp_path):
    # 5 steps of 8 x 256 tokens, dropout from the first; the two processes also checkpoint one
    # of the two layers, and FSDP2 shards the output weight the fused loss reads.
    steps = ["total_tokens=10240", "token_dropout.midpoint=0", *NO_EVAL]
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "fused", *steps))
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "chunked", *steps, *CHUNKED_CE))
    run_ok(tune_run, *train_args(DISTRIBUTED, data, tmp_path / "two", *steps, "activation_checkpointing_share=0.5"), nproc=2)
    fused, chunked, two = logged(tmp_path / "fused"), logged(tmp_path / "chunked"), logged(tmp_path / "two")
    assert sorted(fused) == sorted(chunked) == sorted(two) == [1, 2, 3, 4, 5]
    for step in fused:
        for other in (chunked, two):
            # fp32 on both paths, summed in another order: 1e-5 relative (see tests/models/test_loss.py)
            assert float(other[step]["loss"]) == pytest.approx(float(fused[step]["loss"]), rel=1e-5)
            assert float(other[step]["grad_norm"]) == pytest.approx(float(fused[step]["grad_norm"]), rel=1e-4)
            assert other[step]["target_dropped"] == fused[step]["target_dropped"]
    assert any(float(s["target_dropped"]) > 0 for s in fused.values())


# midpoint 0: tokens are dropped from the first step, so every switch has something to change.
SWITCH_BASE = ["total_tokens=6144", "token_dropout.midpoint=0", *NO_EVAL]
SWITCHES = {  # switch: (overrides, what must differ from the plain EntroDrop run)
    "high-entropy targeting": (["token_dropout.targeting=high"], "loss"),
    "random targeting": (["token_dropout.targeting=random"], "target_dropped"),
    "static schedule": (["token_dropout.schedule=static"], "gamma_max"),
    "no dropout": (["token_dropout.schedule=none"], "target_dropped"),
    "neftune": (["neftune_alpha=5.0"], "loss"),
    "hidden dropout": (["hidden_dropout=0.1"], "loss"),
    "weight decay": (["optimizer.weight_decay=0.1"], "loss"),
    "activation checkpointing and compile": (["activation_checkpointing_share=1.0", "compile=True"], None),
    "half the layers checkpointed": (["activation_checkpointing_share=0.5"], None),
    "torchtune's chunked loss": (CHUNKED_CE, None),
}


@pytest.fixture(scope="module")
def plain_run(data, tune_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("plain")
    run_ok(tune_run, *train_args(SINGLE, data, out, *SWITCH_BASE))
    return logged(out)


@pytest.mark.parametrize("switch", SWITCHES)
def test_every_baseline_switch_changes_what_it_should(data, tune_run, tmp_path, plain_run, switch):
    overrides, differs = SWITCHES[switch]
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *SWITCH_BASE, *overrides))
    steps = logged(tmp_path)
    assert sorted(steps) == sorted(plain_run) == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(float(s["loss"]))) for s in steps.values())
    assert (tmp_path / "checkpoints" / "step_3" / "model.safetensors").exists()
    if differs is None:  # the same computation, rearranged
        for step in steps:
            assert float(steps[step]["loss"]) == pytest.approx(float(plain_run[step]["loss"]), rel=1e-4)
    else:  # a switch whose key went unread would log what the plain run logs
        assert [s[differs] for s in steps.values()] != [s[differs] for s in plain_run.values()]
    if switch == "no dropout":
        assert all(float(s["target_dropped"]) == 0.0 for s in steps.values())
    if switch == "static schedule":
        assert all(float(s["gamma_max"]) == 0.1 for s in steps.values())


def test_a_run_of_make_reproduces_queue_logs_the_plain_runs_losses_bit_for_bit(data, tmp_path, plain_run):
    """`make reproduce`'s speed-ups leave a run's numbers alone: the same run through its queue (a
    a forked run from preloaded imports, glibc's heap kept) logs what `tune run` logged."""
    from entrodrop.experiments.run_queue import RUN_ENV, Job, run_jobs

    argv = [TUNE, "run", *train_args(SINGLE, data, tmp_path / "queued", *SWITCH_BASE)]
    env = {**os.environ, **RUN_ENV, "OMP_NUM_THREADS": "1", **CACHES}
    assert run_jobs([Job("queued", lambda: argv)], 1, tmp_path / "logs", tmp_path / "done", env, REPO, forked=True) == ["queued"]
    queued = logged(tmp_path / "queued")
    assert sorted(queued) == [1, 2, 3] and "train: 100%" in (tmp_path / "logs" / "queued.log").read_text()
    for step in queued:
        for key in ("loss", "grad_norm", "target_dropped", "gamma"):
            assert queued[step][key] == plain_run[step][key], (step, key)


def test_checkpoints_load_in_transformers(data, tune_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path, "total_tokens=4096", *NO_EVAL))
    model = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_2")
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


def files_of(root: Path) -> dict:
    """Every file under ``root`` with its size and modification time, but the run's lock: every run
    takes it, a refused one too, and names itself in it (entrodrop.train.run_lock)."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file() and p.name != LOCK_NAME}


def test_a_used_output_dir_is_refused_and_overwrite_moves_the_old_run_aside(data, tune_run, tmp_path):
    out = tmp_path / "run"
    run_ok(tune_run, *train_args(SINGLE, data, out, "total_tokens=4096", *NO_EVAL))
    before = files_of(out)
    result = tune_run(*train_args(SINGLE, data, out, "total_tokens=4096", *NO_EVAL))
    assert result.returncode != 0
    assert f"output_dir={out} holds an earlier run" in result.stderr, result.stderr[-2000:]
    assert "1 checkpoint (step_2)" in result.stderr and "1 log file" in result.stderr
    assert "resume=True" in result.stderr and "another output_dir" in result.stderr and "overwrite=True" in result.stderr
    assert files_of(out) == before, "the refused run wrote or changed something"

    run_ok(tune_run, *train_args(SINGLE, data, out, "total_tokens=4096", *NO_EVAL, "overwrite=True"))
    [old] = tmp_path.glob("run.replaced-*")
    assert files_of(old) == {old / p.relative_to(out): v for p, v in before.items()}
    assert len(list((out / "logs").iterdir())) == 1 and (out / "checkpoints" / "step_2").is_dir()


def test_resume_checks_the_saved_config_and_a_finished_run_exits_clean(data, tune_run, tmp_path):
    # 10 steps, a checkpoint and a validation every 2, the newest 2 kept with the best.
    settings = ["total_tokens=20480", "save_every_n_steps=2", "keep_last_n_checkpoints=2",
                "evaluation.every_n_steps=2", "evaluation.lm_eval.tasks.code=[]"]
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *settings))
    best = Path(json.loads((tmp_path / "eval" / "summary.json").read_text())["best_checkpoint"]["path"]).name
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == sorted({"step_8", "step_10", best}), kept
    before = files_of(tmp_path)

    result = tune_run(*train_args(SINGLE, data, tmp_path, *settings, "resume=True", "seed=1",
                                  "token_dropout.gamma_max=0.2", "total_tokens=2048", "keep_last_n_checkpoints=1"))
    assert result.returncode != 0
    for line in ("step_10 was trained with another config", "seed: checkpoint has 0, now 1",
                 "token_dropout.gamma_max: checkpoint has 0.1, now 0.2", "total_tokens: checkpoint has 20480, now 2048",
                 "total_tokens=2048 is 1 steps, fewer than the 10 the checkpoint has trained"):
        assert line in result.stderr, (line, result.stderr[-2000:])
    assert "keep_last_n_checkpoints" not in result.stderr.split("These may change on resume")[0]

    result = run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *settings, "resume=True"))
    assert "the run is complete, nothing to do" in result.stderr
    assert files_of(tmp_path) == before, "resuming a finished run wrote something"

    # The checkpoint keeps what its stores are, so the same store at another path resumes.
    general = dict(arg.split("=", 1) for arg in data)["data.general_tokens"]
    state = torch.load(tmp_path / "checkpoints" / "step_10" / "recipe_state.pt", weights_only=False)
    assert state["stores"]["data.general_tokens"]["path"] == str(Path(general).resolve())
    shutil.copytree(general, tmp_path / "moved" / "general")
    result = run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *settings, "resume=True",
                                       f"data.general_tokens={tmp_path / 'moved' / 'general'}"))
    assert "the run is complete, nothing to do" in result.stderr


def test_the_curriculum_midpoint_is_on_the_logged_epoch_scale(data, tune_run, tmp_path):
    # 30 steps, about 2.2 target epochs; gamma_max(j) = 0.1 / (1 + exp(-0.2 (j - j0))), j0 at epoch 2.
    result = run_ok(tune_run, *train_args(SINGLE, data, tmp_path, "total_tokens=61440", *NO_EVAL))
    steps = logged(tmp_path)
    epoch = {s: float(m["target_epoch"]) for s, m in steps.items()}
    gamma_max = {s: float(m["gamma_max"]) for s, m in steps.items()}
    crossing = min(s for s in steps if epoch[s] >= 2.0)
    assert gamma_max[crossing - 1] < 0.05 <= gamma_max[crossing], (crossing, gamma_max)
    assert gamma_max[crossing] - 0.05 < gamma_max[crossing] - gamma_max[crossing - 1]  # within one step
    # The budget line, before the run, states the epochs the run then logs.
    estimate = float(re.search(r"([\d.]+) target epochs as the rows pack", result.stderr).group(1))
    assert estimate == pytest.approx(epoch[30], rel=0.03)
    assert "train: 100%" in result.stderr  # the progress bar


def test_invalid_settings_are_reported_together_before_any_compute(data, tune_run, tmp_path):
    result = tune_run(*train_args(SINGLE, data, tmp_path, "token_dropout.gamma_max=1.5", "token_dropout.gama_max=0.5",
                                  "~token_dropout.sharpness", "optimizer.weight_decy=0.1",
                                  "token_dropout.gate_percentile=0", "data.target_ratio=1.5",
                                  f"data.target_entropy={tmp_path}/missing"))
    assert result.returncode != 0
    for message in ("gamma_max=1.5 must be in [0, 1]", "gate_percentile=0 must be in (0, 1]",
                    "target_ratio=1.5 must be in (0, 1)", "missing holds no store",
                    "unknown key: token_dropout.gama_max (did you mean gamma_max?)",
                    "missing key: token_dropout.sharpness",
                    "unknown key: optimizer.weight_decy (did you mean weight_decay?)"):
        assert message in result.stderr, message
    # lm-eval's task index is built only for a config with no other problem
    result = tune_run(*train_args(SINGLE, data, tmp_path, "evaluation.lm_eval.tasks.code=[humaneval_pass1,no_such_task]",
                                  "evaluation.lm_eval.allow_code_execution=False"))
    assert result.returncode != 0
    for message in ("'no_such_task' is not an lm-eval task",
                    "allow_code_execution=False, but ['humaneval_pass1'] execute model-written code"):
        assert message in result.stderr, message
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()


def test_the_data_recipes_report_every_config_mistake_too(tiny_assets, tune_run, tmp_path):
    result = tune_run("recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml", "max_seq_len=0",
                      "smaples_per_shard=3", f"corpora.target.store_dir={tmp_path}/target")
    assert result.returncode != 0
    for message in ("invalid tokenize config (2 problems)", "max_seq_len=0 must be a positive integer",
                    "unknown key: smaples_per_shard (did you mean samples_per_shard?)"):
        assert message in result.stderr, message
    result = tune_run("recipes/precompute_entropy.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
                      f"target_tokens={tmp_path}/none", f"checkpointer.checkpoint_dir={tmp_path}", "batch_size=0",
                      f"cache_dir={tmp_path}/cache")
    assert result.returncode != 0
    for message in ("invalid precompute config (3 problems)", "batch_size=0 must be a positive integer",
                    f"target_tokens={tmp_path}/none holds no store (manifest.json missing): run recipes/tokenize_corpus.py",
                    f"checkpointer.checkpoint_dir={tmp_path} holds no Hugging Face checkpoint"):
        assert message in result.stderr, message
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("store, config, nproc", [("target", SINGLE, 1), ("target_val", SINGLE, 1),
                                                   ("target", DISTRIBUTED, 2)])
def test_a_corrupted_token_store_stops_training_before_its_first_step(data, tune_run, tmp_path, store, config, nproc):
    from entrodrop.data.sample_store import SampleStore

    [override] = [arg for arg in data if arg.endswith(f"/{store}")]
    key, original = override.split("=", 1)
    copy = tmp_path / store
    shutil.copytree(original, copy)
    lengths = SampleStore(str(copy), "tokens").table["length"]
    shard = copy / "shard-00000" / "tokens.npy"
    tokens = np.load(shard)
    tokens[int(lengths[:3].sum()) + 1] += 1  # one id of sample 3; manifest and tables untouched
    np.save(shard, tokens)
    corrupted = [arg for arg in data if arg != override] + [f"{key}={copy}"]
    out = tmp_path / "run"
    result = tune_run(*train_args(config, corrupted, out, "total_tokens=30720", "evaluation.lm_eval.tasks.code=[]"),
                      nproc=nproc)
    assert result.returncode != 0
    for line in (f"the token store {copy} holds other token ids than it was written with",
                 f"{shard}: 1 of {len(lengths)} samples differ, the first is sample 3",
                 f"delete {copy} and re-run recipes/tokenize_corpus.py"):
        assert line in result.stderr, (line, result.stderr[-3000:])
    assert not (out / "checkpoints").exists() and not (out / "logs").exists()


def test_a_truncated_base_checkpoint_is_named_before_training(tiny_assets, data, tune_run, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_assets / "qwen3", base)
    weights = base / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # what an interrupted download leaves
    out = tmp_path / "run"
    result = tune_run(*train_args(SINGLE, data, out, f"checkpointer.checkpoint_dir={base}", *NO_EVAL))
    assert result.returncode != 0
    for line in (f"{weights} is truncated", f"download it again with `tune download <hub model id> --output-dir {base}`"):
        assert line in result.stderr, (line, result.stderr[-3000:])
    assert not (out / "checkpoints").exists() and not (out / "logs").exists()


def test_a_diverging_loss_stops_the_run_and_keeps_the_last_checkpoint(data, tune_run, tmp_path):
    from entrodrop.models.checkpointing import HFCheckpointer

    result = tune_run(*train_args(SINGLE, data, tmp_path, "total_tokens=20480", "save_every_n_steps=1", *NO_EVAL,
                                  "optimizer.lr=1e30", "clip_grad_norm=1e30", "lr_scheduler.num_warmup_steps=0"))
    assert result.returncode != 0
    match = re.search(r"loss is (nan|inf) at step (\d+); stopping\. The last good checkpoint is (\S+)", result.stderr)
    assert match, result.stderr[-2000:]
    last = Path(match.group(3))
    assert last.name == f"step_{int(match.group(2)) - 1}"
    state = HFCheckpointer(str(last), "QWEN3", str(tmp_path / "x")).load_checkpoint()["model"]
    assert all(torch.isfinite(v).all() for v in state.values())


def test_a_midpoint_auto_run_that_never_fixes_j0_says_so_last(data, tune_run, tmp_path):
    """Two evaluations cannot fire a patience of 2: the run trained as the baseline, and says so."""
    result = run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *AUTO, "total_tokens=12288"))
    assert "midpoint: auto never fixed j0" in result.stderr.strip().splitlines()[-1]
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["auto_midpoint"] is None and "trained as the baseline" in summary["auto_midpoint_note"]


@pytest.mark.parametrize("config, nproc", [(SINGLE, 1), (DISTRIBUTED, 2)])
def test_a_new_best_leaves_no_stale_checkpoint_and_resume_removes_what_killed_saves_left(data, tune_run, tmp_path,
                                                                                        config, nproc):
    # 5 steps, a validation and a checkpoint at each, the newest kept with the best. The loss falls
    # at every step, so each new checkpoint is the new best too: pruned before its evaluation was
    # recorded, the one before it (the best until then) stayed.
    settings = ["total_tokens=10240", "save_every_n_steps=1", "keep_last_n_checkpoints=1", "evaluation.every_n_steps=1",
                "evaluation.every_n_epochs=null", "evaluation.lm_eval.tasks.code=[]"]
    run_ok(tune_run, *train_args(config, data, tmp_path, *settings), nproc=nproc)
    checkpoints = tmp_path / "checkpoints"
    best = json.loads((tmp_path / "eval" / "summary.json").read_text())["best_checkpoint"]
    assert Path(best["path"]).name == "step_5"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_5"]

    # What saves and a prune killed part way leave; resuming (a finished run) removes each and says so.
    (checkpoints / ".step_99.tmp-x").mkdir()
    (checkpoints / ".step_99.tmp-x" / "model.safetensors").write_bytes(b"part of a checkpoint")
    shutil.copytree(checkpoints / "step_5", checkpoints / ".step_5.old")  # killed once the new step_5 was in place
    (checkpoints / ".step_4.deleting").mkdir()
    result = run_ok(tune_run, *train_args(config, data, tmp_path, *settings, "resume=True"), nproc=nproc)
    for name, what in ((".step_99.tmp-x", "save"), (".step_5.old", "save"),
                       (".step_4.deleting", "pruning of old checkpoints")):
        assert f"removed {checkpoints / name}, left by a {what} that was killed" in result.stderr, result.stderr[-2000:]
    assert "the run is complete, nothing to do" in result.stderr
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_5"]


# token_dropout.signal: loss. 30 steps of 8 x 256, about 2.2 target epochs (one is
# about 14 steps), tokens dropped from the first step (midpoint 0): from the second epoch on,
# the gate ranks by the recorded losses. A checkpoint every 3 steps, for the SIGKILL tests.
SIGNAL_LOSS = ["total_tokens=61440", "token_dropout.midpoint=0", "save_every_n_steps=3", *NO_EVAL,
               "token_dropout.signal=loss"]


@pytest.fixture(scope="module")
def signal_loss_run(data, tune_run, tmp_path_factory):
    """The uninterrupted single-process signal: loss run: its output directory."""
    out = tmp_path_factory.mktemp("signal_loss")
    run_ok(tune_run, *train_args(SINGLE, data, out, *SIGNAL_LOSS))
    return out


def test_signal_loss_trains_as_entropy_through_the_first_target_epoch_then_by_its_losses(data, tune_run, tmp_path,
                                                                                         signal_loss_run):
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *SIGNAL_LOSS, "token_dropout.signal=entropy"))
    loss, entropy = logged(signal_loss_run), logged(tmp_path)
    assert sorted(loss) == sorted(entropy) == list(range(1, 31))
    first_epoch = [s for s in loss if float(loss[s]["target_epoch"]) <= 1.0]
    assert len(first_epoch) >= 10 and first_epoch == list(range(1, len(first_epoch) + 1))
    for step in first_epoch:  # every sample on its first visit: its signal is its cached entropy
        for key in ("loss", "gamma", "target_dropped", "grad_norm"):
            assert loss[step][key] == entropy[step][key], (step, key)  # bitwise: same repr
    assert any(float(loss[s]["target_dropped"]) > 0 for s in first_epoch)
    later = [s for s in loss if s > len(first_epoch)]
    assert all(loss[s]["gamma"] == entropy[s]["gamma"] for s in later)  # the curriculum's draws do not depend on it
    assert any(loss[s]["target_dropped"] != entropy[s]["target_dropped"] for s in later), "the loss never moved the gate"
    assert loss[30]["loss"] != entropy[30]["loss"]


def test_sigkill_and_resume_with_signal_loss_logs_the_same_losses(data, tune_run, tmp_path, signal_loss_run):
    killed = tmp_path / "killed"
    # Killed in the second target epoch, while the gate ranks by the store the checkpoint holds.
    kill_at_checkpoint(train_args(SINGLE, data, killed, *SIGNAL_LOSS), killed, 1, step=18)
    first = logged(killed)
    run_ok(tune_run, *train_args(SINGLE, data, killed, *SIGNAL_LOSS, "resume=True"))
    straight, resumed = logged(signal_loss_run), logged(killed)
    assert sorted(resumed) == sorted(straight) == list(range(1, 31))
    assert 18 <= max(first) < 30
    for step in straight:
        for key in ("loss", "gamma", "target_dropped", "grad_norm", "target_epoch"):
            assert resumed[step][key] == straight[step][key], (step, key)  # bitwise: same repr


def test_two_processes_killed_and_resumed_train_like_one_with_signal_loss(data, tune_run, tmp_path, signal_loss_run):
    """2 ranks gather each other's losses, so they gate as one process does; a 2-process run killed
    in the second target epoch resumes on both ranks with the store rank 0 saved. One run checks
    both: the standard of the two-process tests (one run, uninterrupted, is the reference), which
    a rank gating from another store than rank 0's would miss by far."""
    killed = tmp_path / "killed"
    kill_at_checkpoint(train_args(DISTRIBUTED, data, killed, *SIGNAL_LOSS), killed, 2, step=18)
    first = logged(killed)
    run_ok(tune_run, *train_args(DISTRIBUTED, data, killed, *SIGNAL_LOSS, "resume=True"), nproc=2)
    one, two = logged(signal_loss_run), logged(killed)
    assert sorted(one) == sorted(two) == list(range(1, 31))
    assert 18 <= max(first) < 30
    for step in one:
        for steps in (first, two) if step in first else (two,):
            assert float(steps[step]["loss"]) == pytest.approx(float(one[step]["loss"]), rel=1e-5), step
            for key in ("gamma", "target_dropped"):
                assert float(steps[step][key]) == pytest.approx(float(one[step][key]), rel=1e-6), (step, key)
    # The store rank 0 saved last is the one process's, but for fp16 roundings of losses that the
    # two processes' batch shapes computed 1e-7 apart.
    state = lambda out: torch.load(out / "checkpoints" / "step_30" / "recipe_state.pt", weights_only=False)  # noqa: E731
    stores = [state(out)["loss_signal"]["values"].float() for out in (signal_loss_run, killed)]
    torch.testing.assert_close(stores[1], stores[0], rtol=1e-3, atol=1e-3, equal_nan=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_device_cuda_without_cuda_stops_at_start_up_in_one_line(data, tune_run, tmp_path):
    # torchtune's get_device("cuda") is the CPU on a CPU build: this config trained on the CPU and exited 0
    result = tune_run(*train_args(SINGLE, data, tmp_path, "device=cuda"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "device=cuda, but this torch cannot use a CUDA GPU: torch " in result.stderr
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()
