"""scripts/bench_gpu.py's pipeline on CPU with the tiny model: it builds its corpora and
checkpoint, runs tokenize, precompute and the interleaved off/static/loss training through
`tune run`, and prints every row of its table, signal: loss's cost beside EntroDrop's. The GPU
figures themselves come from a GPU machine."""

import subprocess
import sys

import pytest
import torch
from conftest import REPO

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess

BENCH = [sys.executable, str(REPO / "scripts" / "bench_gpu.py")]


def test_the_gpu_benchmark_runs_its_whole_pipeline_on_cpu(tiny_assets, tmp_path):
    result = subprocess.run([*BENCH, "--device", "cpu", "--models", "tiny", "--steps", "5", "--warmup", "2",
                             "--seq-len", "256", "--rows", "8", "--target-tokens", "40000", "--out", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split(" | ")[1]: line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| tiny")}
    trained = ("train, EntroDrop off", "train, EntroDrop static", "train, EntroDrop static, signal: loss")
    costs = ("EntroDrop step cost (static / off)", "signal: loss step cost (loss / entropy)")
    assert set(rows) == {"precompute", *trained, *costs}, result.stdout
    for stage in ("precompute", *trained):
        assert float(rows[stage][2].replace(",", "")) > 0, rows[stage]  # tokens/s
    assert all("median of 3 paired steps" in rows[cost][5] for cost in costs), result.stdout
    # The store: 2 bytes a target token of the corpus it trained on; CPU logs no peak memory.
    from entrodrop.data.sample_store import SampleStore

    num_target = int(SampleStore(str(tmp_path / "entropy" / "tiny"), "entropy").table["length"].sum())
    assert (f"peak memory -, the store {num_target:,} target tokens x 2 bytes (fp16) = "
            f"{num_target * 2 / 2**20:.2f} MiB") in rows[costs[1]][5], rows[costs[1]]
    assert (tmp_path / "runs" / "tiny_loss_0" / "logs").is_dir()


def test_bad_arguments_are_refused(tiny_assets, tmp_path):
    result = subprocess.run([*BENCH, "--models", "qwen3_0_6b,gpt2", "--out", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--models: unknown ['gpt2']" in result.stderr
    if not torch.cuda.is_available():
        result = subprocess.run([*BENCH, "--models", "qwen3_0_6b", "--out", str(tmp_path)], cwd=REPO,
                                capture_output=True, text=True)
        assert result.returncode == 2 and "no CUDA GPU here" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was written
