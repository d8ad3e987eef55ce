"""Benchmark the EntroDrop recipe on CPU on the demo and tiny models. Prints a table.

    python benchmarks/bench_recipe.py [--steps 40] [--repeats 4] [--pairs 100] [--data DIR]
    python benchmarks/bench_recipe.py --quick      (the whole pipeline, 6 steps a run, once, the tiny Qwen3
                                                    for the demo model: a test runs it)

The token stores and entropy caches are made in a temporary folder, or found in ``--data``.

Three comparisons, each run through the real `tune run`, interleaved ``--repeats`` times (in
reverse order every other time), the median of the per-step figures after 5 warm-up steps:

1. EntroDrop's cost, on the demo model (`assets/tiny/qwen3_demo`: a 4-layer, 256-wide Qwen3,
   larger than the one `make demo` trains, with configs/demo's settings, 8 x 256 tokens a
   step): our recipe with token dropout active every
   step (``schedule=static``, so the gate and the mask are computed at full strength) against
   the same run with ``schedule=none`` (nothing computed). Same seed, same batches. Separate
   processes on this shared 2-core machine drift by several percent, so the cost is also
   measured in one process with steps alternating A/B (the median of the per-pair differences),
   and the planning alone is timed. Target: EntroDrop costs at most 2% of the step time.
2. Recipe overhead: our recipe with EntroDrop off against torchtune's stock
   ``full_finetune_single_device`` on the same tiny Llama3.1 (torchtune's own checkpointer
   loads it), packed rows of 8 x 256 with a block-causal mask in both, the same optimizer,
   loss and clipping. The stock recipe reads the tiny general corpus (enough for one epoch of
   ``--steps`` packed batches, so it saves only after its last step) through torchtune's
   packed text-completion dataset, ours the mixed stream, so real-token counts differ with
   the padding; the comparison is in token slots per second (8 x 256 / step time).
   Target: ours at least 0.98x the stock recipe.
3. ``token_dropout.signal: loss`` against ``signal: entropy`` on the demo model
   with EntroDrop static: the entropy and loss runs are neighbours in every repeat, and the
   ratio is the median over their steps, paired step by step. In one process, alternating
   steps, each as the recipe takes it (the loss's per-token values, the store's lookup and
   its record) with the demo's loss (torchtune's chunked CE) and with ours
   (``LinearCrossEntropy``, the paper-scale configs'). Target: loss within 1% of entropy.
   Memory: the store, 2 bytes a target token, printed for this corpus.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from entrodrop.analysis.markdown import markdown_table

REPO = Path(__file__).resolve().parent.parent
TUNE = str(Path(sys.executable).parent / "tune")
SLOTS = 8 * 256

STOCK_CONFIG = """
output_dir: {out}
model:
  _component_: torchtune.models.llama3_1.llama3_1
  vocab_size: 2112
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 64
  intermediate_dim: 192
  max_seq_len: 131072
  norm_eps: 1.0e-5
  rope_base: 500000
  scale_factor: 8
tokenizer:
  _component_: entrodrop.models.qwen3.qwen3_tokenizer
  path: {repo}/assets/tiny/qwen3/vocab.json
  merges_file: {repo}/assets/tiny/qwen3/merges.txt
  special_tokens_path: {repo}/assets/tiny/qwen3/tokenizer.json
  max_seq_len: 256
dataset:
  _component_: torchtune.datasets.text_completion_dataset
  source: json
  data_files: {repo}/assets/tiny/general.jsonl
  column: text
  split: train
  packed: True
seed: 0
shuffle: True
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: {repo}/assets/tiny/llama3_1
  checkpoint_files: [model.safetensors]
  recipe_checkpoint: null
  output_dir: {out}
  model_type: LLAMA3
resume_from_checkpoint: False
batch_size: 8
epochs: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 1.0e-3
  betas: [0.9, 0.95]
  weight_decay: 0.0
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
  num_output_chunks: 1
max_steps_per_epoch: {steps}
gradient_accumulation_steps: 1
optimizer_in_bwd: False
clip_grad_norm: 1.0
compile: False
device: cpu
enable_activation_checkpointing: False
enable_activation_offloading: False
dtype: fp32
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: {out}/logs
log_every_n_steps: 1
log_peak_memory_stats: False
"""

CHUNKED_CE = ["loss._component_=torchtune.modules.loss.CEWithChunkedOutputLoss", "loss.num_output_chunks=1",
              "~loss.chunk_size", "~loss.impl"]
LLAMA_OVERRIDES = [
    "model._component_=torchtune.models.llama3_1.llama3_1", "~model.head_dim", "~model.tie_word_embeddings",
    "model.max_seq_len=131072", "model.norm_eps=1e-5", "model.rope_base=500000", "model.scale_factor=8",
    "checkpointer.checkpoint_dir=assets/tiny/llama3_1", "checkpointer.model_type=LLAMA3",
]


def tune(*args: str) -> None:
    result = subprocess.run([TUNE, "run", *args], cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])


def per_step(run_dir: Path, key: str, first: int) -> list:
    """The values of ``key`` a run logged after step ``first`` (warm-up excluded)."""
    from entrodrop.analysis.run_figures import read_run

    return [metrics[key] for step, metrics in read_run(run_dir)["steps"].items() if step > first and key in metrics]


def time_plan(entropy: Path, stores: Path, calls: int = 200) -> float:
    """Milliseconds per call of the gate + mask for one 8 x 256 batch, in this process."""
    from entrodrop.data.loader import build_loader
    from entrodrop.method.dropout import TokenDropoutPlan

    batch = next(iter(build_loader(f"{stores}/target", str(entropy), f"{stores}/general", 256, 8, 0.6, 0)))
    method = TokenDropoutPlan("low", 0.5, "static", 0.1, 1.0, 0.0, "steps", seed=0)
    method.plan(batch["entropy"], batch["document_ids"], 0, 1.0, range(8))
    start = time.perf_counter()
    for step in range(calls):
        method.plan(batch["entropy"], batch["document_ids"], step, 1.0, range(8))
    return (time.perf_counter() - start) / calls * 1000


def demo_step(stores: Path, cache: Path, shape: dict, loss_fn) -> tuple:
    """A training step of a Qwen3 of ``shape`` as the recipe takes it, in this process, on 8 fixed batches:
    ``step(k, signal)`` -> seconds, ``signal`` None (EntroDrop off), "entropy" or "loss"
    (EntroDrop static either way); and the ``LossSignal`` store that "loss" reads and writes."""
    from functools import partial

    import torch

    from entrodrop.data.loader import build_loader
    from entrodrop.data.packing import block_causal_mask
    from entrodrop.data.sample_store import SampleStore
    from entrodrop.method.dropout import (
        EmbeddingHook,
        TokenDropoutPlan,
        mean_embedding,
        perturb_embeddings,
        plan_perturbation,
    )
    from entrodrop.method.loss_signal import LossSignal, loss_with_token_losses
    from entrodrop.models.loss import model_output_for
    from entrodrop.models.qwen3._component_builders import qwen3

    torch.manual_seed(0)
    model = qwen3(**shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    hook, e_bar = EmbeddingHook(model.tok_embeddings), mean_embedding(model.tok_embeddings.weight)
    method = TokenDropoutPlan("low", 0.5, "static", 0.1, 1.0, 0.0, "steps", seed=0)
    forward, with_token_losses = model_output_for(model, loss_fn), loss_with_token_losses(loss_fn)
    store = LossSignal(SampleStore(str(cache), "entropy"), torch.device("cpu"))
    it = iter(build_loader(f"{stores}/target", str(cache), f"{stores}/general", 256, 8, 0.6, 0))
    batches = [next(it) for _ in range(8)]

    def step(k: int, signal) -> float:
        batch = batches[k % len(batches)]
        start = time.perf_counter()
        drop = None
        if signal == "loss":
            index = store.index(batch["sample"], batch["input_pos"])
            batch = {**batch, "entropy": store.lookup(index)}
        if signal:
            drop, _, _, _ = plan_perturbation(method, 0.0, batch, k, range(8), e_bar.numel(), torch.device("cpu"))
            hook.set(partial(perturb_embeddings, drop=drop, e_bar=e_bar, noise=None))
        output = forward(batch["tokens"], mask=block_causal_mask(batch["document_ids"]), input_pos=batch["input_pos"])
        if signal == "loss":
            loss, token_losses = with_token_losses(output, batch["labels"])
        else:
            loss = loss_fn(output, batch["labels"])
        loss.backward()
        if signal == "loss":
            store.record(index, batch["labels"], token_losses, drop, loss_fn.ignore_index)
        optimizer.step()
        optimizer.zero_grad()
        hook.set(None)
        return time.perf_counter() - start

    return step, store


def alternate(step, a, b, pairs: int) -> tuple:
    """Median ms of ``step(k, a)`` and of ``step(k, b)``, and the median of the per-pair
    differences (b - a), alternating in one process on the same batches (which goes first
    alternates too), which cancels most of this machine's drift."""
    for k in range(min(4, pairs)):
        step(k, (a, b)[k % 2])
    times = {a: [], b: []}
    for k in range(pairs):
        for variant in ((a, b) if k % 2 == 0 else (b, a)):
            times[variant].append(step(k, variant))
    differences = [y - x for x, y in zip(times[a], times[b])]
    return tuple(statistics.median(x) * 1000 for x in (times[a], times[b], differences))


def model_runs(quick: bool) -> tuple:
    """The model EntroDrop's cost is measured on: its name in the tables, its builder's arguments,
    and the overrides that make configs/demo train it (``--quick``: the tiny Qwen3)."""
    from entrodrop.models.tiny import DEMO_QWEN3, TINY_QWEN3

    name, shape, checkpoint = (("tiny qwen3", TINY_QWEN3, "assets/tiny/qwen3") if quick else
                               ("demo qwen3", DEMO_QWEN3, "assets/tiny/qwen3_demo"))
    # The model's shape is named here: configs/demo trains a smaller one.
    return name, shape, [f"checkpointer.checkpoint_dir={checkpoint}", *(f"model.{k}={v}" for k, v in shape.items())]


def build_data(root: Path, steps: int, quick: bool) -> tuple:
    """Token stores of the tiny corpora and, for each model the runs train, an entropy cache of
    its own (training refuses a cache computed by another model), under ``root`` where missing
    (``entrodrop.experiments.tiny_data``): the overrides of each run, and the cache of the model
    EntroDrop's cost is measured on."""
    from entrodrop.experiments.tiny_data import entropy_cache, tiny_data

    name, _, model = model_runs(quick)
    print(f"data: token stores, and an entropy cache of the tiny Llama3.1 and one of the {name}", flush=True)
    if quick:
        tiny_data(root)
        cache = root / "entropy"
    else:
        cache = entropy_cache(root, "demo", "configs/demo/precompute_entropy.yaml", model)
    llama_cache = entropy_cache(root, "llama3_1", "configs/tiny/qwen3_precompute_entropy.yaml", LLAMA_OVERRIDES)
    data = [f"data.target_tokens={root}/target", f"data.general_tokens={root}/general", f"total_tokens={steps * SLOTS}",
            f"save_every_n_steps={steps}",
            # evaluation off: this measures training steps
            "evaluation.validation.target_tokens=null", "evaluation.validation.target_entropy=null",
            "evaluation.lm_eval.tasks.code=[]"]
    method = ["recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml", *model, *data,
              f"data.target_entropy={cache}"]
    tiny = ["recipes/entrodrop_single_device.py", "--config", "configs/tiny/qwen3_entrodrop_single_device.yaml",
            *data, f"data.target_entropy={llama_cache}"]
    runs = {  # the signal: loss run beside its entropy twin, so the two are neighbours in every repeat
        f"{name}: signal loss": method + ["token_dropout.schedule=static", "token_dropout.signal=loss"],
        f"{name}: EntroDrop on": method + ["token_dropout.schedule=static"],
        f"{name}: EntroDrop off": method + ["token_dropout.schedule=none"],
        # The stock recipe's loss: chunked CE over one chunk of full logits.
        "tiny llama3.1: ours": tiny + ["token_dropout.schedule=none"] + LLAMA_OVERRIDES + CHUNKED_CE,
    }
    return runs, cache


def in_one_process(root: Path, cache: Path, shape: dict, pairs: int) -> dict:
    """The step costs measured in this process, alternating steps (``alternate``), of the model of
    ``shape`` on its ``cache``: EntroDrop on against off, and signal: loss against entropy with each loss."""
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    from entrodrop.models.loss import LinearCrossEntropy

    print(f"in one process: planning alone, then {pairs} alternating pairs of steps, three times", flush=True)
    found = {"plan_ms": time_plan(cache, root)}
    step, store = demo_step(root, cache, shape, CEWithChunkedOutputLoss(num_output_chunks=1))
    found["dropout"] = alternate(step, None, "entropy", pairs)
    found["signal"] = {"torchtune chunked CE (the demo's)": alternate(step, "entropy", "loss", pairs),
                       "ours, LinearCrossEntropy": alternate(demo_step(root, cache, shape, LinearCrossEntropy(512))[0],
                                                             "entropy", "loss", pairs)}
    found["store_tokens"] = store.values.numel()
    found["store_bytes"] = store.values.numel() * store.values.element_size()
    return found


def time_runs(tmp: Path, ours: dict, steps: int, repeats: int, warmup: int) -> tuple:
    """Each run ``repeats`` times through `tune run`, interleaved, and in reverse order every
    other repeat, so the machine's drift hits every run alike: (run -> per-step seconds over
    all repeats, run -> one list of per-step seconds a repeat)."""
    seconds, by_run = {}, {}
    runs = [*ours, "tiny llama3.1: torchtune stock"]
    for repeat in range(repeats):
        for name in runs if repeat % 2 == 0 else runs[::-1]:
            print(f"repeat {repeat + 1}/{repeats}: {name}", flush=True)
            out = tmp / f"run{repeat}-{abs(hash(name))}"
            if name in ours:
                tune(*ours[name], f"output_dir={out}")
                by_run.setdefault(name, []).append(per_step(out, "step_seconds", warmup))
                seconds.setdefault(name, []).extend(by_run[name][-1])
                continue
            out.mkdir()
            (out / "config.yaml").write_text(STOCK_CONFIG.format(out=out, repo=REPO, steps=steps))
            tune("full_finetune_single_device", "--config", str(out / "config.yaml"))
            # Its packed rows are full, and it counts every label before shifting: 8 x 256 a step.
            seconds.setdefault(name, []).extend(SLOTS / t for t in per_step(out, "tokens_per_second_per_gpu", warmup))
    return seconds, by_run


def print_tables(model: str, seconds: dict, by_run: dict, found: dict, repeats: int, warmup: int) -> None:
    median = {name: statistics.median(values) for name, values in seconds.items()}
    on, off = median[f"{model}: EntroDrop on"], median[f"{model}: EntroDrop off"]
    stock, ours_llama = median["tiny llama3.1: torchtune stock"], median["tiny llama3.1: ours"]
    print(f"\nCPU, 8 x 256 token slots a step, median over {repeats} runs of each, "
          f"{warmup} warm-up steps left out of each run\n")
    print("\n".join(markdown_table(["run", "steps timed", "ms / step", "slots/s"],
                                   [[name, str(len(seconds[name])), f"{value * 1000:.1f}", f"{SLOTS / value:.0f}"]
                                    for name, value in median.items()])))
    ab_off, ab_on, ab_difference = found["dropout"]
    print(f"\nEntroDrop cost: {100 * (on / off - 1):+.2f}% of the step time (target <= 2%); "
          f"TokenDropoutPlan.plan alone: {found['plan_ms']:.2f} ms a step = "
          f"{100 * found['plan_ms'] / 1000 / off:.2f}% of it")
    print(f"in one process, alternating steps: {ab_on:.1f} ms with EntroDrop, {ab_off:.1f} ms without; "
          f"median difference of a pair {ab_difference:+.2f} ms = {100 * ab_difference / ab_off:+.2f}%")
    print(f"ours / stock: {stock / ours_llama:.3f}x the stock recipe's slots/s (target >= 0.98)")
    # Step k of a loss run against step k of its neighbouring entropy run: the same batch.
    paired = zip(by_run[f"{model}: EntroDrop on"], by_run[f"{model}: signal loss"])
    ratios = [b / a for entropy_run, loss_run in paired for a, b in zip(entropy_run, loss_run)]
    print(f"\nsignal: loss against signal: entropy, EntroDrop static, {model} (target: within 1%)\n")
    rows = [[f"separate runs, step k against step k, {len(ratios)} pairs", f"{on * 1000:.1f}",
             f"{median[f'{model}: signal loss'] * 1000:.1f}", f"{statistics.median(ratios):.4f}"]]
    rows += [[f"one process, alternating steps, {loss_name}", f"{a:.1f}", f"{b:.1f}", f"{1 + difference / a:.4f}"]
             for loss_name, (a, b, difference) in found["signal"].items()]
    print("\n".join(markdown_table(["measured", "entropy ms / step", "loss ms / step", "loss / entropy"], rows)))
    print(f"\nthe store: {found['store_tokens']:,} target tokens x 2 bytes (fp16) = "
          f"{found['store_bytes'] / 2**20:.2f} MiB (the paper's 0.02B tokens: {0.02e9 * 2 / 1e6:.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=100, help="alternating pairs of steps in one process")
    parser.add_argument("--quick", action="store_true",
                        help="the whole pipeline: the tiny Qwen3 for the demo's, 6 steps a run, 1 repeat, 2 pairs")
    parser.add_argument("--data", type=Path, help="where the token stores and caches are made or found "
                        "(default: a temporary folder)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.pairs = 6, 1, 2
    warmup = min(5, args.steps // 2)
    model, shape, _ = model_runs(args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = args.data or tmp / "data"
        ours, cache = build_data(root, args.steps, args.quick)
        found = in_one_process(root, cache, shape, args.pairs)
        seconds, by_run = time_runs(tmp, ours, args.steps, args.repeats, warmup)
    print_tables(model, seconds, by_run, found, args.repeats, warmup)


if __name__ == "__main__":
    main()
