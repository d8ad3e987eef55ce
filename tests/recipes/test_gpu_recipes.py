"""The recipes on a CUDA GPU through the real `tune run` (``make test-gpu``; skipped without a
GPU): compiled training with activation checkpointing tracks eager training for each loss, a
resumed run repeats the uninterrupted one bit for bit with hidden dropout and NEFTune on, the
FSDP2 recipe on nccl trains as the single-device recipe, and the offline evaluation's torchtune
and hf backends give the same scores."""

import json
import math
import shutil

import pytest
from conftest import cuda_only
from recipe_helpers import CHUNKED_CE, DISTRIBUTED, NO_EVAL, SINGLE, logged, run_ok, train_args

pytestmark = pytest.mark.gpu

LOSSES = {
    "fused": ["loss.impl=torch"],
    "liger": ["loss.impl=liger"],
    "chunked": CHUNKED_CE,
}
# 4 steps of 8 x 256 tokens, tokens dropped from the first step. Steps cost little on a GPU; each
# `tune run` costs its start-up and, compiled, its compile (the inductor cache on disk, shared by
# the runs of one machine, spares the later runs most of it).
SHORT = ["total_tokens=8192", "token_dropout.midpoint=0", *NO_EVAL]


def on(device) -> list:
    return [f"device={device.type}", "dtype=bf16"]


@pytest.fixture(scope="module")
def eager_run(gpu, data, tune_run, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("eager")
    run_ok(tune_run, *train_args(SINGLE, data, out, *on(gpu), *SHORT))
    return logged(out)


@pytest.mark.parametrize("loss", LOSSES)
def test_compiled_training_with_checkpointing_tracks_eager_training_for_each_loss(gpu, data, tune_run, tmp_path,
                                                                                  eager_run, loss):
    """bf16, the layers compiled and checkpointed: every loss finite, and the first three within
    1e-2 of eager training with the fused loss (bf16 rounds differently in fused kernels; Adam's
    first steps amplify that a little). The same tokens are dropped: the masks depend on the
    seed and the data alone. Every layer is checkpointed: one compiled layer graph (forward,
    backward, flex attention's kernels) serves both, where half of them checkpointed compiled
    two; the loss lies outside the compiled layers, so the three runs compile the same graph."""
    if loss == "liger":
        cuda_only(gpu, "liger-kernel's triton kernel")
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path, *on(gpu), *SHORT, *LOSSES[loss], "compile=True",
                              "activation_checkpointing_share=1.0"))
    steps = logged(tmp_path)
    assert sorted(steps) == sorted(eager_run) == [1, 2, 3, 4]
    assert all(math.isfinite(float(s["loss"])) for s in steps.values())
    for step in (1, 2, 3):
        assert float(steps[step]["loss"]) == pytest.approx(float(eager_run[step]["loss"]), rel=1e-2), step
    assert [s["target_dropped"] for s in steps.values()] == [s["target_dropped"] for s in eager_run.values()]
    assert any(float(s["target_dropped"]) > 0 for s in steps.values())


def test_a_resumed_run_repeats_steps_6_to_10_bit_for_bit_with_dropout_and_neftune(gpu, data, tune_run, tmp_path):
    """10 steps with a checkpoint at 5; the same run from that checkpoint logs the same steps
    6-10. Hidden dropout draws from the device's generator, which the checkpoint saves."""
    settings = [*on(gpu), "total_tokens=20480", "save_every_n_steps=5", "hidden_dropout=0.1", "neftune_alpha=5.0",
                "token_dropout.midpoint=0", *NO_EVAL]
    straight = tmp_path / "straight"
    run_ok(tune_run, *train_args(SINGLE, data, straight, *settings))
    assert sorted(p.name for p in (straight / "checkpoints").iterdir()) == ["step_10", "step_5"]
    resumed = tmp_path / "resumed"
    shutil.copytree(straight / "checkpoints" / "step_5", resumed / "checkpoints" / "step_5")
    run_ok(tune_run, *train_args(SINGLE, data, resumed, *settings, "resume=True"))
    first, again = logged(straight), logged(resumed)
    assert sorted(again) == [6, 7, 8, 9, 10]
    for step in again:
        for key in ("loss", "grad_norm", "gamma", "target_dropped"):
            assert again[step][key] == first[step][key], (step, key)  # bitwise: the same repr


def test_fsdp2_in_one_process_trains_as_the_single_device_recipe(gpu, data, tune_run, tmp_path):
    """The distributed recipe (nccl on a GPU, sharded with FSDP2) launched with one process,
    against the single-device recipe, fp32: the same losses to 1e-5."""
    settings = [f"device={gpu.type}", "dtype=fp32", "total_tokens=10240", "token_dropout.midpoint=0", *NO_EVAL]
    run_ok(tune_run, *train_args(SINGLE, data, tmp_path / "single", *settings))
    run_ok(tune_run, "--nproc_per_node", "1", *train_args(DISTRIBUTED, data, tmp_path / "fsdp", *settings))
    single, fsdp = logged(tmp_path / "single"), logged(tmp_path / "fsdp")
    assert sorted(single) == sorted(fsdp) == [1, 2, 3, 4, 5]
    for step in single:
        assert float(fsdp[step]["loss"]) == pytest.approx(float(single[step]["loss"]), rel=1e-5)
        assert float(fsdp[step]["grad_norm"]) == pytest.approx(float(single[step]["grad_norm"]), rel=1e-4)
        assert fsdp[step]["target_dropped"] == single[step]["target_dropped"]


def test_the_torchtune_and_hf_backends_score_alike_on_the_device(gpu, tune_run, tiny_assets, tmp_path):
    """recipes/evaluate.py on the tiny base checkpoint, fp32: HumanEval log-likelihoods (8
    problems) from the project's adapter and from lm-eval's HFLM agree to 1e-4, as on the CPU.

    No validation loss here: both backends compute it with the same torchtune model, so it
    compares nothing across backends, and on a GPU it ran flex attention, compiled afresh in
    each process (with the tokenize and precompute runs it needed, this test took over 185 s
    on an H100; tests/test_gpu_kernels.py checks flex attention)."""
    pytest.importorskip("transformers")
    scores = {}
    for backend in ("torchtune", "hf"):
        eval_dir = tmp_path / backend
        if backend == "hf":  # beside the adapter's record: the same checkpoint, another backend
            shutil.copytree(tmp_path / "torchtune", eval_dir)
        run_ok(tune_run, "recipes/evaluate.py", "--config", "configs/tiny/qwen3_evaluate.yaml", f"device={gpu.type}",
            f"output_dir={tmp_path}", f"checkpoints={tiny_assets / 'qwen3'}", f"eval_dir={eval_dir}",
            f"backend={backend}", "evaluation.lm_eval.limit=8", "evaluation.validation.target_tokens=null",
            "evaluation.validation.target_entropy=null")
        [record] = [json.loads(line) for line in (eval_dir / "evals.jsonl").read_text().splitlines()
                    if json.loads(line).get("backend") == backend]
        scores[backend] = record
    adapter, hf = scores["torchtune"], scores["hf"]
    metrics = {k: v for k, v in adapter["tasks"]["humaneval_likelihood"].items() if isinstance(v, float)}
    assert metrics
    for metric, value in metrics.items():
        assert hf["tasks"]["humaneval_likelihood"][metric] == pytest.approx(value, abs=1e-4), metric
