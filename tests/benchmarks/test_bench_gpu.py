"""benchmarks/bench_gpu.py's pipeline on CPU with the tiny model: it builds its corpora and
checkpoint, runs tokenize, precompute and the interleaved off/static/loss training through
`tune run`, and prints every row of its table, signal: loss's cost beside EntroDrop's; and
benchmarks/bench_generate.py's CPU path, with the decoding that lets its CUDA path run a model of
Qwen3's whole vocabulary with the tiny tokenizer. The GPU figures themselves come from a GPU
machine."""

import subprocess
import sys

import pytest
import torch
from conftest import REPO, _load_script

from entrodrop.method.throughput import Throughput

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess

BENCH = [sys.executable, str(REPO / "benchmarks" / "bench_gpu.py")]


def test_the_gpu_benchmark_runs_its_whole_pipeline_on_cpu(tiny_assets, tmp_path):
    result = subprocess.run([*BENCH, "--device", "cpu", "--quick", "--profile", "2", "--out", str(tmp_path)],  # tiny
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split(" | ")[1]: line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| tiny")}
    trained = ("train, EntroDrop off", "train, EntroDrop static", "train, EntroDrop static, signal: loss")
    costs = ("EntroDrop step cost (static / off)", "signal: loss step cost (loss / entropy)")
    assert set(rows) == {"precompute", *trained, *costs}, result.stdout
    for stage in ("precompute", *trained):
        assert float(rows[stage][2].replace(",", "")) > 0, rows[stage]  # tokens/s
    assert all("median of 3 paired steps" in rows[cost][5] for cost in costs), result.stdout
    assert "tokens/s overall, compile warm-up included" in rows["precompute"][5], rows["precompute"]
    # The store: 2 bytes a target token of the corpus it trained on; CPU logs no peak memory.
    from entrodrop.data.sample_store import SampleStore

    num_target = int(SampleStore(str(tmp_path / "entropy" / "tiny"), "entropy").table["length"].sum())
    assert (f"peak memory -, the store {num_target:,} target tokens x 2 bytes (fp16) = "
            f"{num_target * 2 / 2**20:.2f} MiB") in rows[costs[1]][5], rows[costs[1]]
    assert (tmp_path / "runs" / "tiny_loss_0" / "logs").is_dir()
    # --profile: two steps of the static run traced by the recipe's own profiler, its top ops printed.
    [table] = (tmp_path / "profile" / "tiny").glob("iteration_*/rank0_key_averages.txt")
    assert list(table.parent.glob("*.pt.trace.json.gz")) and "ProfilerStep*" in table.read_text()
    assert f"profile of {table.parent} (ops by their own CUDA time, as torchtune ranks them" in result.stdout


def test_bad_arguments_are_refused(tiny_assets, tmp_path):
    result = subprocess.run([*BENCH, "--models", "qwen3_0_6b,gpt2", "--out", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--models: unknown ['gpt2']" in result.stderr
    if not torch.cuda.is_available():
        result = subprocess.run([*BENCH, "--models", "qwen3_0_6b", "--out", str(tmp_path)], cwd=REPO,
                                capture_output=True, text=True)
        assert result.returncode == 2 and "no CUDA GPU here" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was written


def test_the_benchmark_reads_the_precomputes_steady_state_apart_from_its_warm_up():
    """The precompute's log line (``Throughput.summary``) gives the benchmark both figures: the
    steady state after the compile warm-up, and the overall rate with the warm-up in it; a run
    too short for a steady state gives the overall rate alone."""
    precompute_speeds = _load_script("bench_gpu", "benchmarks").precompute_speeds
    meter = Throughput(warmup_batches=2, clock=iter([0.0, 30.0, 31.0, 32.0, 33.0, 34.0]).__next__)
    for _ in range(5):
        meter(1000)
    line = f"INFO:torchtune.utils._logging:rank 0: {meter.summary()}"
    assert "steady state 1000 tokens/s after 2 warm-up batches (31.0s)" in line
    assert precompute_speeds(line) == (147.0, 1000.0)
    short = Throughput(warmup_batches=2, clock=iter([0.0, 30.0, 31.0]).__next__)
    short(1000)
    short(1000)
    assert precompute_speeds(f"rank 0: {short.summary()}") == (65.0, None)


def test_the_generation_benchmark_runs_on_cpu(tiny_assets):
    """Tiny sizes: every row of the table, the compiled adapter and transformers agreeing with
    the eager adapter on every row (fp32)."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_generate.py"), "--quick"],  # CPU: tiny sizes
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {cells[0]: cells for cells in (line.strip("| ").split(" | ") for line in result.stdout.splitlines()
                                          if line.startswith("| "))}
    assert {"adapter", "adapter, stop strings", "adapter, compiled decode", "transformers generate"} <= set(rows)
    assert rows["adapter"][5] == "100%" and rows["adapter, compiled decode"][5] == "100%", result.stdout


def test_a_model_of_the_whole_vocabulary_speaks_only_what_the_tiny_tokenizer_decodes(tiny_assets):
    """What the CUDA path of bench_generate.py does with Qwen3's 151,936 ids and the tiny
    tokenizer (2,074 ids; its decode fails on the others, as it did on an H100): with the
    other ids' tied embedding rows zeroed, greedy picks only known ids, and the benchmark's
    tokenizer decodes an unknown id to nothing rather than failing."""
    bench = _load_script("bench_generate", "benchmarks")
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.qwen3._model_builders import qwen3_tokenizer

    d = tiny_assets / "qwen3"
    tokenizer = bench.NoEos(qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json")))
    assert tokenizer.num_known == 2074
    with pytest.raises(TypeError):
        tokenizer._tokenizer.decode([5, 151_000])
    assert tokenizer.decode([5, 151_000, 6]) == tokenizer.decode([5, 6])
    torch.manual_seed(0)
    model = qwen3(vocab_size=151_936, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=64, intermediate_dim=128,
                  max_seq_len=256, head_dim=32, norm_eps=1e-6, rope_base=1_000_000.0, tie_word_embeddings=True).eval()
    with torch.no_grad():
        model.tok_embeddings.weight.normal_(0, 0.02)
        tokens = torch.randint(0, 2074, (8, 32))
        assert (model(tokens).argmax(-1) >= 2074).any()  # a random model of the whole vocabulary
        bench.speak_known_ids(model.tok_embeddings.weight, tokenizer.num_known)
        assert (model(tokens).argmax(-1) < 2074).all()
