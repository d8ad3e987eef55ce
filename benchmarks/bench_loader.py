"""Benchmark the training loader: tokens/s on one worker and resident memory. Prints a table.

    python benchmarks/bench_loader.py [--steps 400]
    python benchmarks/bench_loader.py --quick   (stores of 100k and 1M tokens, 20 steps: a test runs it)

Builds a target token store + entropy cache of 1M and of 100M tokens (sample lengths uniform
in [32, 1024], random ids and entropies) and one 20M-token general store, then, each in a
fresh process, iterates the loader for ``--steps`` global batches of 8 x 1024 and reports
tokens/s (real tokens, padding excluded), the start-up seconds of the target store's
integrity check (every token id read back and hashed) and of ``build_loader`` as a whole,
and memory: peak RSS, and at the end its anonymous (allocated) and file-backed (mapped
files: libraries, and store pages if they were mapped) parts. Not loading the store shows
as both staying flat from 1M to 100M tokens. The stores live in a temporary directory
(about 800 MB), deleted at the end.

For scale it also measures what training consumes: the demo Qwen3 (4 layers, 256 wide;
scripts/make_tiny_assets.py) doing forward, backward and an AdamW step on the loader's
batches at 8 x 256, the demo's shape. Targets: the loader at least 20x that, and resident
memory growing by at most 50 MB from the 1M to the 100M cache.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SIZES = {"1M": 1_000_000, "100M": 100_000_000}  # target tokens of each cache; the general store has 20M
QUICK_SIZES = {"100k": 100_000, "1M": 1_000_000}  # --quick, with a general store of 1M
VOCAB = 2112


def build_stores(root: Path, target_tokens: int, general_tokens: int, seed: int) -> None:
    from entrodrop.data.sample_store import SampleStoreWriter, sample_table

    rng = np.random.default_rng(seed)

    def write(store_dir: Path, kinds, num_tokens: int, key: dict) -> None:
        lengths = rng.integers(32, 1025, size=int(num_tokens / 528) + 1)
        writers = {k: SampleStoreWriter(str(store_dir / k), k, key, len(lengths), 8192, create=True) for k in kinds}
        for shard in range(writers[kinds[0]].num_shards):
            rows = writers[kinds[0]].shard_samples(shard)
            tokens = [rng.integers(0, VOCAB, n, dtype=np.int32) for n in lengths[rows.start : rows.stop]]
            table = sample_table(tokens)
            writers["tokens"].write_shard(shard, tokens, table)
            if "entropy" in writers:
                writers["entropy"].write_shard(shard, [rng.uniform(0, 8, len(t)).astype(np.float16) for t in tokens], table)
        for w in writers.values():
            w.finalize()

    key = {"model": None, "tokenizer": "bench", "corpus": "bench", "max_seq_len": 1024}
    write(root / "target", ["tokens", "entropy"], target_tokens, key)
    write(root / "general", ["tokens"], general_tokens, {**key, "corpus": "general"})


def memory() -> dict:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    mib = lambda field: int(status[field].split()[0]) / 1024  # noqa: E731
    return {"peak_rss_mib": mib("VmHWM"), "anon_mib": mib("RssAnon"), "file_mib": mib("RssFile")}


def measure_loader(root: Path, steps: int) -> dict:
    from entrodrop.data.loader import build_loader
    from entrodrop.data.sample_store import SampleStore

    # The integrity check alone (every target token id read back and hashed), then the whole
    # start-up, which runs it again: build_loader refuses a corrupted store before step 1.
    start = time.perf_counter()
    SampleStore(str(root / "target" / "tokens"), "tokens").check_tokens()
    check_s = time.perf_counter() - start
    start = time.perf_counter()
    loader = build_loader(str(root / "target" / "tokens"), str(root / "target" / "entropy"),
                          str(root / "general" / "tokens"), seq_len=1024, global_batch_size=8,
                          target_ratio=0.6, seed=0)
    startup_s = time.perf_counter() - start
    it = iter(loader)
    next(it)
    start, tokens = time.perf_counter(), 0
    for _ in range(steps):
        tokens += int((next(it)["domain"] >= 0).sum())
    return {"tokens_per_s": tokens / (time.perf_counter() - start), "check_s": check_s, "startup_s": startup_s,
            **memory()}


def measure_training(root: Path, steps: int) -> dict:
    import torch

    from entrodrop.data.loader import build_loader
    from entrodrop.data.packing import block_causal_mask
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.tiny import DEMO_QWEN3

    torch.manual_seed(0)
    model = qwen3(**DEMO_QWEN3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = build_loader(str(root / "target" / "tokens"), str(root / "target" / "entropy"),
                          str(root / "general" / "tokens"), seq_len=1024, global_batch_size=2,
                          target_ratio=0.6, seed=0)
    it = iter(loader)

    def step() -> int:
        batch = next(it)
        # 2 x 1024 rows reshaped to the demo's 8 x 256: the cost is what matters here.
        tokens, labels = batch["tokens"].view(8, 256), batch["labels"].view(8, 256)
        docs, pos = batch["document_ids"].view(8, 256), batch["input_pos"].view(8, 256).remainder(256)
        logits = model(tokens, mask=block_causal_mask(docs), input_pos=pos)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return int((batch["domain"] >= 0).sum())

    step()
    start, tokens = time.perf_counter(), 0
    for _ in range(steps):
        tokens += step()
    return {"tokens_per_s": tokens / (time.perf_counter() - start)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--worker", choices=["loader", "training"])
    parser.add_argument("--root", type=Path)
    parser.add_argument("--quick", action="store_true", help="caches of 100k and 1M target tokens, 20 steps")
    args = parser.parse_args()
    sizes, general_tokens = (QUICK_SIZES, 1_000_000) if args.quick else (SIZES, 20_000_000)
    if args.quick:
        args.steps = 20
    if args.worker == "loader":
        print(json.dumps(measure_loader(args.root, args.steps)))
        return
    if args.worker == "training":
        print(json.dumps(measure_training(args.root, max(args.steps // 20, 10))))
        return

    def run(worker: str, root: Path) -> dict:
        cmd = [sys.executable, __file__, "--worker", worker, "--root", str(root), "--steps", str(args.steps)]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1])

    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for name, size in sizes.items():
            root = Path(tmp) / name
            start = time.perf_counter()
            build_stores(root, size, general_tokens, seed=1)
            print(f"built the {name}-token stores in {time.perf_counter() - start:.0f}s; the loader on them",
                  flush=True)
            rows[name] = run("loader", root)
        print("the demo model's training on the first", flush=True)
        training = run("training", Path(tmp) / next(iter(sizes)))

    print(f"\nloader, one worker, global batch 8 x 1024, target ratio 0.6, {args.steps} steps; "
          f"training: the demo Qwen3 (4 x 256 wide), 8 x 256, fwd+bwd+AdamW = {training['tokens_per_s']:.0f} tokens/s\n")
    print(f"| {'target cache':<12} | {'tokens/s':>10} | {'x training':>10} | {'check s':>7} | {'start-up s':>10} | "
          f"{'peak RSS MiB':>12} | {'anon MiB':>8} | {'file MiB':>10} |")
    print(f"|{'-' * 14}|{'-' * 12}|{'-' * 12}|{'-' * 9}|{'-' * 12}|{'-' * 14}|{'-' * 10}|{'-' * 12}|")
    for name, r in rows.items():
        print(f"| {name + ' tokens':<12} | {r['tokens_per_s']:>10.0f} | {r['tokens_per_s'] / training['tokens_per_s']:>10.1f} "
              f"| {r['check_s']:>7.2f} | {r['startup_s']:>10.2f} "
              f"| {r['peak_rss_mib']:>12.0f} | {r['anon_mib']:>8.0f} | {r['file_mib']:>10.0f} |")
    print("\ncheck s: the target token store's integrity check (every id read back and hashed, page cache warm);"
          "\nstart-up s: build_loader, which runs it, opens the stores and checks the entropy join")
    (small, first), (large, last) = list(rows.items())
    print(f"\npeak RSS growth from {small} to {large} tokens: {last['peak_rss_mib'] - first['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
