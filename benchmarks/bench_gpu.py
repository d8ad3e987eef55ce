"""The project's GPU benchmark: the real recipes at the paper's shapes, tokens/s, MFU and peak memory.

    python benchmarks/bench_gpu.py                                    # one CUDA GPU: Qwen3-0.6B, Qwen3-1.7B
    python benchmarks/bench_gpu.py --models qwen3_0_6b,llama3_1_8b    # Llama3.1-8B where memory allows
    python benchmarks/bench_gpu.py --quick      # Qwen3-0.6B alone, short runs: under 3 minutes (make gpu-check)
    python benchmarks/bench_gpu.py --device cpu --models tiny --steps 4 --warmup 2   # the CPU check (a test runs it)
    python benchmarks/bench_gpu.py --models qwen3_0_6b --steps 30 --profile 20 --out $OUT   # where the time goes

For each model it builds a random-weight checkpoint of the published shape with the project's
own builders (``entrodrop.models.shapes``; nothing from the hub), and corpora from the Python
standard library's sources on this machine, tokenized once with the tiny tokenizer
(``make assets``; its ids are valid in every vocabulary and speed does not depend on which
ids). Then, each through ``tune run`` with the model's own configs under ``configs/``:

    precompute   recipes/precompute_entropy.py over the target corpus: tokens/s from its log, in
                 steady state (after its first batches, where the layers compile) and overall
    train        recipes/entrodrop_single_device.py, ``--rows`` rows of ``--seq-len`` tokens a
                 step, the config's micro-batch, compile and activation checkpointing, EntroDrop
                 off (``schedule=none``) and static (``gamma_max`` from step 0: the gate and the
                 mask at full strength), and static with ``signal=loss`` (the gate ranks
                 each token's last training loss, kept in a store of 2 bytes a target token);
                 same seed and batches, interleaved off, static, loss, then loss, static, off
                 (``--repeats`` times)

Training figures are medians over the steps after ``--warmup`` (compilation happens there);
EntroDrop's cost is the median over those steps and repeats of the static/off step-time ratio,
``signal: loss``'s the median of the loss/static ratio (target: within 1%), beside the growth of
peak memory against the store's size (target: the store only).
MFU counts 6N + 12·L·H·Q·T FLOPs per trained token and 2N + 4·L·H·Q·T per precomputed one
(N parameters, the output projection counted once and the embedding lookup free; L layers, H
attention heads of width Q, T the row length), against ``--peak-tflops`` (989: H100 SXM dense
bf16). Peak memory is torch's ``max_memory_allocated`` as the recipe logs it. A stage that
fails (out of memory, say) is a row that says so; the rest still runs.

``--profile N`` traces N steps of the first static run, after its ``--warmup`` steps and one
more, with the recipe's own ``profiler`` (torchtune's ``setup_torch_profiler``): the trace
(https://ui.perfetto.dev) and the ops ranked by their own CUDA time (torchtune's trace handler;
unranked on a CPU) land in ``<out>/profile/<model>/``, and the table's first rows are printed
after the figures.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from entrodrop.analysis.run_figures import read_run
from entrodrop.data.sample_store import SampleStore
from entrodrop.models import shapes
from entrodrop.models.checkpointing import write_random_checkpoint
from entrodrop.models.families import FAMILIES
from entrodrop.models.tiny import TINY_QWEN3

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"
TUNE = [sys.executable, "-c", "import sys; from torchtune._cli.tune import main; sys.argv[0] = 'tune'; main()"]

MODELS = {  # name: (model type, builder arguments, training config, precompute config)
    "qwen3_0_6b": ("QWEN3", shapes.QWEN3_0_6B, "configs/qwen3/0.6B_entrodrop_single_device.yaml",
                   "configs/qwen3/0.6B_precompute_entropy.yaml"),
    "qwen3_1_7b": ("QWEN3", shapes.QWEN3_1_7B, "configs/qwen3/1.7B_entrodrop_single_device.yaml",
                   "configs/qwen3/1.7B_precompute_entropy.yaml"),
    "llama3_1_8b": ("LLAMA3", shapes.LLAMA3_1_8B, "configs/llama3_1/8B_instruct_entrodrop_single_device.yaml",
                    "configs/llama3_1/8B_instruct_precompute_entropy.yaml"),
    "tiny": ("QWEN3", None, "configs/tiny/qwen3_entrodrop_single_device.yaml", "configs/tiny/qwen3_precompute_entropy.yaml"),
}


# --quick: one model, one micro-batch a step (the config's 8 rows), 4 measured steps a run
# after 3 of compile warm-up, and a corpus of about 5 precompute batches (2 of them warm-up).
# Each `tune run` pays its start-up and compile again, so steps are the cheap part.
QUICK = {"models": "qwen3_0_6b", "rows": 8, "steps": 7, "warmup": 3, "target-tokens": 300_000}
# --quick --device cpu: the whole pipeline on the tiny model (a test runs it).
QUICK_CPU = {"models": "tiny", "seq-len": 256, "rows": 8, "steps": 5, "warmup": 2, "target-tokens": 40_000}


TRAIN_RUNS = {  # name: (the table's stage, overrides), in the order a round runs them
    "none": ("train, EntroDrop off", ["token_dropout.schedule=none"]),
    "static": ("train, EntroDrop static", ["token_dropout.schedule=static"]),
    "loss": ("train, EntroDrop static, signal: loss", ["token_dropout.schedule=static", "token_dropout.signal=loss"]),
}


def flops_per_token(model_type: str, args: dict, seq_len: int) -> tuple:
    """(training, forward-only) FLOPs per token: 6N + 12·L·H·Q·T and 2N + 4·L·H·Q·T."""
    with torch.device("meta"):
        model = FAMILIES[model_type].build(**args)
    n = sum(p.numel() for p in model.parameters())
    if not args.get("tie_word_embeddings", False):
        n -= model.tok_embeddings.weight.numel()  # a lookup; the untied output projection stays
    head_dim = args.get("head_dim") or args["embed_dim"] // args["num_heads"]
    attention = args["num_layers"] * args["num_heads"] * head_dim * seq_len
    return 6 * n + 12 * attention, 2 * n + 4 * attention


def write_corpora(out: Path, target_chars: int, general_chars: int) -> None:
    """target.jsonl and general.jsonl: standard-library modules, split at blank-line pairs, in
    sorted file order (general from the end of the list, so the two share no text)."""
    import sysconfig

    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    out.mkdir(parents=True, exist_ok=True)
    for name, chars, order in [("target", target_chars, files), ("general", general_chars, files[::-1])]:
        written = 0
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for path in order:
                try:
                    text = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                for block in text.split("\n\n\n"):
                    if len(block.strip()) >= 200 and written < chars:
                        f.write(json.dumps({"text": block[:8000]}) + "\n")
                        written += len(block[:8000])
                if written >= chars:
                    break


def tune(log: Path, *args: str) -> subprocess.CompletedProcess:
    """``tune run <args>`` from the repository root; its output goes to ``log`` as it runs (a run
    cut off by a time limit leaves what it wrote) and comes back as the result's ``stderr``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        result = subprocess.run([*TUNE, "run", *args], cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    return subprocess.CompletedProcess(result.args, result.returncode, "", log.read_text())


def failure(result: subprocess.CompletedProcess) -> str:
    """The last line of a failed stage's error, for the table."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return ("out of memory" if "OutOfMemoryError" in result.stderr or "out of memory" in result.stderr
            else (lines[-1][:120] if lines else f"exit status {result.returncode}"))


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    out = args.out.resolve()
    stores = tokenized_corpora(out, args)
    print_header(args)
    rows = TableRows()
    for name in args.models.split(","):
        model_type, shape, train_config, precompute_config = MODELS[name]
        shape = shape or TINY_QWEN3
        train_flops, forward_flops = flops_per_token(model_type, shape, args.seq_len)
        ckpt = out / "checkpoints" / name
        if not (ckpt / "config.json").exists():
            write_random_checkpoint(ckpt, model_type, shape, TINY / "tokenizer", device=args.device)
        cache = out / "entropy" / name
        rows.append(precompute_row(name, precompute_config, ckpt, stores, cache, forward_flops, out, args))
        runs = training_runs(name, train_config, ckpt, stores, cache, out, args)
        for row in training_rows(name, runs, cache, train_flops, args):
            rows.append(row)
        if args.profile:
            print_profile(out / "profile" / name)
    print(f"\nwall time {time.perf_counter() - started:.0f} s; logs in {out}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3_0_6b,qwen3_1_7b", help=f"comma-separated, of {sorted(MODELS)}")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=16, help="rows of --seq-len tokens a training step")
    parser.add_argument("--steps", type=int, default=16, help="training steps a run, warm-up included")
    parser.add_argument("--warmup", type=int, default=6, help="steps left out of the figures (compilation)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of off/static/loss runs, interleaved")
    parser.add_argument("--target-tokens", type=int, default=2_000_000, help="about this many target tokens")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/entrodrop_bench_gpu"))
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="trace N steps of the first static run with torch.profiler (after --warmup + 1 steps)")
    parser.add_argument("--quick", action="store_true",
                        help=f"defaults for a check under 3 minutes: {' '.join(f'--{k} {v}' for k, v in QUICK.items())}"
                             f"; with --device cpu {' '.join(f'--{k} {v}' for k, v in QUICK_CPU.items())}")
    args = parser.parse_args()
    if args.quick:  # the quick defaults, then the command line again: what it names explicitly wins
        quick = QUICK if args.device == "cuda" else QUICK_CPU
        parser.set_defaults(**{k.replace("-", "_"): v for k, v in quick.items()})
        args = parser.parse_args()
    if args.profile and args.steps < args.warmup + 1 + args.profile:
        parser.error(f"--profile {args.profile} needs --steps of at least --warmup + 1 + {args.profile} "
                     f"= {args.warmup + 1 + args.profile}")
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {sorted(MODELS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU here; --device cpu --models tiny checks the pipeline on CPU")
    if not (TINY / ".built").exists():
        parser.error(f"{TINY} is missing: run `make assets` first (the tokenizer comes from it)")
    return args


def tokenized_corpora(out: Path, args: argparse.Namespace) -> dict:
    """The target and general token stores of the benchmark's corpora, tokenized once under ``out``."""
    data = out / "data"
    write_corpora(data, target_chars=args.target_tokens * 3, general_chars=args.target_tokens * 2)
    stores = {name: data / name for name in ("target", "general")}
    if not (stores["target"] / "manifest.json").exists():
        result = tune(out / "tokenize.log", "recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml",
                      "~corpora.target_val", f"corpora.target.path={data}/target.jsonl",
                      f"corpora.target.store_dir={stores['target']}", f"corpora.general.path={data}/general.jsonl",
                      f"corpora.general.store_dir={stores['general']}", f"max_seq_len={args.seq_len}",
                      "samples_per_shard=4096")
        if result.returncode:
            sys.exit(f"tokenize failed, see {out / 'tokenize.log'}:\n{result.stderr[-2000:]}")
    return stores


def print_header(args: argparse.Namespace) -> None:
    print(f"device {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}; rows of {args.seq_len} tokens, "
          f"{args.rows} a training step, {args.steps} steps a run ({args.warmup} warm-up), {args.repeats} "
          f"off/static/loss round(s); MFU against {args.peak_tflops:g} TFLOP/s, counting 6N + 12·L·H·Q·T FLOPs a "
          f"trained token and 2N + 4·L·H·Q·T a precomputed one (N parameters less the embedding lookup, L layers, H "
          f"heads of width Q, T the row length)\n")
    print("| model | stage | tokens/s | MFU | peak GiB | note |")
    print("|---|---|---|---|---|---|", flush=True)


def precompute_row(name: str, precompute_config: str, ckpt: Path, stores: dict, cache: Path, forward_flops: float,
                   out: Path, args: argparse.Namespace) -> tuple:
    """The entropy precompute of the target store into ``cache``, as the table's row."""
    result = tune(out / f"{name}_precompute.log", "recipes/precompute_entropy.py", "--config", precompute_config,
                  f"checkpointer.checkpoint_dir={ckpt}", f"target_tokens={stores['target']}", f"cache_dir={cache}",
                  f"device={args.device}")
    overall, steady = precompute_speeds(result.stderr)
    if result.returncode or overall is None:
        return (name, "precompute", None, None, None, failure(result))
    # The steady state is the figure to compare; a corpus too small for one leaves overall.
    tokens_per_s = steady or overall
    return (name, "precompute", tokens_per_s, tokens_per_s * forward_flops / 1e12 / args.peak_tflops,
            None, f"forward + entropy of the target corpus, {'steady state' if steady else 'overall'}; "
                  f"{overall:,.0f} tokens/s overall, compile warm-up included")


def training_runs(name: str, train_config: str, ckpt: Path, stores: dict, cache: Path, out: Path,
                  args: argparse.Namespace) -> dict:
    """schedule -> each repeat's steps (``read_run``), or why its run failed; the schedules of a
    round run next to each other, in turn reversed."""
    cfg = OmegaConf.load(REPO / train_config)
    micro = cfg.global_batch_size // cfg.gradient_accumulation_steps
    overrides = [
        f"checkpointer.checkpoint_dir={ckpt}", f"data.target_tokens={stores['target']}",
        f"data.target_entropy={cache}", f"data.general_tokens={stores['general']}", f"data.seq_len={args.seq_len}",
        f"global_batch_size={args.rows}", f"gradient_accumulation_steps={max(1, args.rows // micro)}",
        f"total_tokens={args.steps * args.rows * args.seq_len}", f"device={args.device}",
        "evaluation.validation.target_tokens=null", "evaluation.validation.target_entropy=null",
        "evaluation.every_n_epochs=null", "overwrite=True",
        *[f"evaluation.lm_eval.tasks.{group}=[]" for group in cfg.evaluation.lm_eval.tasks],
    ]
    runs = {schedule: [] for schedule in TRAIN_RUNS}
    for repeat in range(args.repeats):
        # static and loss are neighbours in either order: the machine's drift hits both alike
        for schedule in (list(TRAIN_RUNS) if repeat % 2 == 0 else list(TRAIN_RUNS)[::-1]):
            run_dir = out / "runs" / f"{name}_{schedule}_{repeat}"
            traced = profiled(out / "profile" / name, args) if schedule == "static" and repeat == 0 else []
            result = tune(out / f"{name}_{schedule}_{repeat}.log", "recipes/entrodrop_single_device.py", "--config",
                          train_config, f"output_dir={run_dir}", *TRAIN_RUNS[schedule][1], *overrides, *traced)
            runs[schedule].append(read_run(run_dir)["steps"] if result.returncode == 0 else failure(result))
    return runs


def profiled(profile_dir: Path, args: argparse.Namespace) -> list:
    """The overrides that trace ``--profile`` steps of a run with its ``profiler`` (none without it)."""
    if not args.profile:
        return []
    return ["profiler.enabled=True", f"profiler.output_dir={profile_dir}", f"profiler.wait_steps={args.warmup}",
            "profiler.warmup_steps=1", f"profiler.active_steps={args.profile}", "profiler.num_cycles=1",
            f"profiler.cuda={args.device == 'cuda'}"]


def print_profile(profile_dir: Path, rows: int = 10) -> None:
    """The first ``rows`` ops of the traced steps' table (``rank0_key_averages.txt``), and where the trace is."""
    tables = sorted(profile_dir.glob("iteration_*/rank0_key_averages.txt"))
    if not tables:
        print(f"\nprofile: no trace in {profile_dir} (the run failed, or ended before its traced steps)")
        return
    lines = tables[-1].read_text().splitlines()
    print(f"\nprofile of {tables[-1].parent} (ops by their own CUDA time, as torchtune ranks them: on a CPU, in the "
          "order they ran; the trace beside it, for https://ui.perfetto.dev):")
    print("\n".join(lines[: 3 + rows]))


def training_rows(name: str, runs: dict, cache: Path, train_flops: float, args: argparse.Namespace) -> list:
    """The table's rows of the training runs: each schedule's tokens/s, MFU and peak memory, and
    the paired step costs of EntroDrop and of ``signal: loss``."""
    rows, peaks = [], {}
    for schedule, (label, _) in TRAIN_RUNS.items():
        failed = [r for r in runs[schedule] if isinstance(r, str)]
        if failed:
            rows.append((name, label, None, None, None, failed[0]))
            continue
        steps = [s for run in runs[schedule] for k, s in run.items() if k > args.warmup]
        tokens_per_s = statistics.median(s["tokens_per_second"] for s in steps)
        peaks[schedule] = max((s.get("peak_memory_alloc", 0.0) for s in steps), default=0.0) or None
        rows.append((name, label, tokens_per_s, tokens_per_s * train_flops / 1e12 / args.peak_tflops,
                     peaks[schedule], f"median of {len(steps)} steps"))
    if "none" in peaks and "static" in peaks:
        rows.append((name, "EntroDrop step cost (static / off)", None, None, None,
                     paired_cost(runs["none"], runs["static"], args.warmup)))
    if "static" in peaks and "loss" in peaks:
        num_target = int(SampleStore(str(cache), "entropy").table["length"].sum())
        grown = ("-" if None in (peaks["static"], peaks["loss"])
                 else f"{(peaks['loss'] - peaks['static']) * 1024:+.2f} MiB")
        rows.append((name, "signal: loss step cost (loss / entropy)", None, None, None,
                     f"{paired_cost(runs['static'], runs['loss'], args.warmup)}; peak memory {grown}, the store "
                     f"{num_target:,} target tokens x 2 bytes (fp16) = {num_target * 2 / 2**20:.2f} MiB"))
    return rows


class TableRows(list):
    """The table's rows, each printed as it is added: a run cut off by a time limit (make
    gpu-check caps each stage) still leaves the rows it finished."""

    def append(self, row: tuple) -> None:
        super().append(row)
        name, stage, tokens_per_s, mfu, peak, note = row
        print(f"| {name} | {stage} | {'-' if tokens_per_s is None else f'{tokens_per_s:,.0f}'} | "
              f"{'-' if mfu is None else f'{mfu:.1%}'} | {'-' if peak is None else f'{peak:.1f}'} | {note} |", flush=True)


def precompute_speeds(log: str) -> tuple:
    """(overall, steady-state) tokens/s from recipes/precompute_entropy.py's log (the last of
    each; None where it logged none: a failed run, or too few batches for a steady state).

    >>> precompute_speeds("rank 0: 400 tokens in 13.0s (31 tokens/s); steady state 100 tokens/s after 2 ...")
    (31.0, 100.0)
    """
    overall = re.findall(r"\(([\d.]+) tokens/s\)", log)
    steady = re.findall(r"steady state ([\d.]+) tokens/s", log)
    return (float(overall[-1]) if overall else None), (float(steady[-1]) if steady else None)


def paired_cost(runs_a: list, runs_b: list, warmup: int) -> str:
    """The median of b's step time over a's, step k of each run of b against step k of the
    neighbouring run of a (the same batch), as the table's note."""
    ratios = [b[k]["step_seconds"] / a[k]["step_seconds"] for a, b in zip(runs_a, runs_b) for k in a
              if k > warmup and k in b]
    return f"{statistics.median(ratios) - 1:+.2%}, median of {len(ratios)} paired steps"


if __name__ == "__main__":
    main()
