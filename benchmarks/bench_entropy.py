"""Benchmark the entropy precompute against the work any method must do. Prints a table.

    python benchmarks/bench_entropy.py [--embed-dim 1024] [--num-samples 32]
    python benchmarks/bench_entropy.py --quick   (width 128, 4 samples, once: a test runs it)

The model is a Qwen3 with Qwen3's real vocabulary (151,936) and Qwen3-0.6B's width (1024,
16 x 128 heads, 8 KV heads) but 2 layers, random weights, loaded from a Hugging Face
checkpoint through our checkpointer; the samples are the tiny target corpus (`make assets`),
tokenized with the tiny tokenizer. Each method runs in its own process over the same
samples in the same batches:

    floor     final hidden states, then the logits chunk by chunk, thrown away
    naive     full [batch, seq, vocab] fp32 logits, then log_softmax
    ours      shard_entropies + SampleStoreWriter, as recipes/precompute_entropy.py does
              (token chunks x vocabulary blocks, online logsumexp), batched by length
    packed    the same with pack_rows_of: samples packed whole into rows of --pack-rows-of
              tokens, --batch-size rows a batch, block-causal mask (dense on CPU)

Peak memory is the process's peak resident set during the timed pass (the high-water mark
is reset after loading and warm-up), so it includes the resident model. Targets: ours at
least 0.9x the floor's tokens/s, at most 1.2x its peak memory. The floor and ``naive`` batch
by length; ``packed`` is measured against the same floor (the work any layout must do).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
METHODS = ["floor", "naive", "ours", "packed"]


def bench_args(embed_dim: int) -> dict:
    return dict(vocab_size=151_936, num_layers=2, num_heads=16, num_kv_heads=8, embed_dim=embed_dim,
                intermediate_dim=3 * embed_dim, max_seq_len=4096, head_dim=128, tie_word_embeddings=True)


def write_checkpoint(out: Path, embed_dim: int) -> None:
    from entrodrop.models.checkpointing import write_random_checkpoint

    args = {**bench_args(embed_dim), "norm_eps": 1e-6, "rope_base": 1e6}
    write_random_checkpoint(out, "QWEN3", args, REPO / "assets" / "tiny" / "tokenizer", dtype=torch.float32)


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def worker(method: str, ckpt: Path, embed_dim: int, num_samples: int, batch_size: int, chunk_size: int,
           vocab_chunk_size: int, pack_rows_of: int) -> dict:
    from entrodrop.data.corpus import tokenize_corpus
    from entrodrop.data.sample_store import SampleStoreWriter, sample_table
    from entrodrop.method.entropy import shard_entropies
    from entrodrop.models.checkpointing import HFCheckpointer
    from entrodrop.models.head import layerwise_hidden_states, output_weight
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.qwen3._model_builders import qwen3_tokenizer

    tiny = REPO / "assets" / "tiny" / "qwen3"
    tokenizer = qwen3_tokenizer(str(tiny / "vocab.json"), str(tiny / "merges.txt"), str(tiny / "tokenizer.json"))
    samples = tokenize_corpus(tokenizer, str(REPO / "assets" / "tiny" / "target.jsonl"), "text", 256)[:num_samples]
    checkpointer = HFCheckpointer(str(ckpt), "QWEN3", tempfile.mkdtemp())
    model = qwen3(**bench_args(embed_dim)).eval()
    model.load_state_dict(checkpointer.load_checkpoint()["model"])
    del checkpointer

    @torch.no_grad()
    def floor_or_naive(batch_samples, count):
        lengths = torch.tensor([len(s) for s in batch_samples])
        order = sorted(range(len(batch_samples)), key=lambda i: lengths[i])
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            tokens = torch.zeros(len(idx), int(lengths[idx].max()), dtype=torch.long)
            for row, i in enumerate(idx):
                tokens[row, : lengths[i]] = torch.tensor(batch_samples[i])
            predicts = torch.arange(tokens.shape[1]) < (lengths[idx] - 1).unsqueeze(1)
            if method == "floor":
                hidden = layerwise_hidden_states(model, tokens)[predicts]
                for c in range(0, hidden.shape[0], chunk_size):
                    logits = (hidden[c : c + chunk_size] @ output_weight(model).T).float()
                    del logits  # computed and thrown away: the work any method must do
            else:
                logp = torch.log_softmax(model(tokens), dim=-1)
                _ = -(logp.exp() * logp).sum(-1)[predicts]
            count(int(lengths[idx].sum()))

    cache_dir = Path(tempfile.mkdtemp())

    def ours(batch_samples, count):
        writer = SampleStoreWriter(str(cache_dir / str(time.monotonic_ns())), "entropy", {"model": "bench"},
                                   len(batch_samples), len(batch_samples), create=True)
        pack_len = pack_rows_of if method == "packed" else None
        entropies = shard_entropies(model, batch_samples, batch_size, chunk_size, vocab_chunk_size, pack_len,
                                    on_batch=count)
        writer.write_shard(0, [h.numpy() for h in entropies], sample_table(batch_samples))

    run = ours if method in ("ours", "packed") else floor_or_naive
    run(samples[:batch_size], lambda n: None)  # warm-up
    tokens = []
    reset_peak_rss()
    start = time.perf_counter()
    run(samples, tokens.append)
    seconds = time.perf_counter() - start
    return {"method": method, "tokens": sum(tokens), "seconds": seconds, "tokens_per_s": sum(tokens) / seconds,
            "peak_rss_mib": peak_rss_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embed-dim", type=int, default=1024)
    parser.add_argument("--num-samples", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--vocab-chunk-size", type=int, default=2048)
    parser.add_argument("--pack-rows-of", type=int, default=256, help="packed: tokens a row (>= the longest sample, 256)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each method; the median is shown")
    parser.add_argument("--worker", choices=METHODS)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--quick", action="store_true", help="width 128, 4 samples in batches of 2, one run a method")
    args = parser.parse_args()
    if args.quick:
        args.embed_dim, args.num_samples, args.batch_size, args.repeats = 128, 4, 2, 1
    if args.worker:
        print(json.dumps(worker(args.worker, args.checkpoint, args.embed_dim, args.num_samples,
                                args.batch_size, args.chunk_size, args.vocab_chunk_size, args.pack_rows_of)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "bench_qwen3"
        write_checkpoint(ckpt, args.embed_dim)
        runs = {m: [] for m in METHODS}
        for repeat in range(args.repeats):  # interleaved, so drift in the machine hits every method
            for method in METHODS:
                print(f"repeat {repeat + 1}/{args.repeats}: {method}", flush=True)
                cmd = [sys.executable, __file__, "--worker", method, "--checkpoint", str(ckpt),
                       "--embed-dim", str(args.embed_dim), "--num-samples", str(args.num_samples),
                       "--batch-size", str(args.batch_size), "--chunk-size", str(args.chunk_size),
                       "--vocab-chunk-size", str(args.vocab_chunk_size), "--pack-rows-of", str(args.pack_rows_of)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                runs[method].append(json.loads(out.strip().splitlines()[-1]))
    rows = {m: {k: statistics.median(r[k] for r in rs) for k in ("tokens", "tokens_per_s", "peak_rss_mib")}
            for m, rs in runs.items()}
    floor = rows["floor"]
    print(f"\nentropy precompute, CPU ({torch.get_num_threads()} threads), vocab 151936, width {args.embed_dim}, "
          f"{int(floor['tokens'])} tokens, batch {args.batch_size}, chunk {args.chunk_size} tokens, "
          f"vocab chunk {args.vocab_chunk_size}, packed: {args.batch_size} rows of {args.pack_rows_of}, "
          f"median of {args.repeats} runs\n")
    print(f"| {'method':<6} | {'tokens/s':>9} | {'x floor':>7} | {'peak RSS MiB':>12} | {'x floor':>7} |")
    print(f"|{'-' * 8}|{'-' * 11}|{'-' * 9}|{'-' * 14}|{'-' * 9}|")
    for method, r in rows.items():
        print(f"| {method:<6} | {r['tokens_per_s']:>9.0f} | {r['tokens_per_s'] / floor['tokens_per_s']:>7.2f} "
              f"| {r['peak_rss_mib']:>12.0f} | {r['peak_rss_mib'] / floor['peak_rss_mib']:>7.2f} |")


if __name__ == "__main__":
    main()
