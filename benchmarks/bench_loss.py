"""Benchmark the training loss on CPU: forward + backward time and peak memory. Prints a table.

    python benchmarks/bench_loss.py [--tokens 8192] [--dim 1024] [--vocab 151936] [--repeats 3]
                                 [--chunk-sizes 1024,4096]
    python benchmarks/bench_loss.py --device cuda --tokens 32768   # bf16 on a GPU, with liger-kernel's loss
    python benchmarks/bench_loss.py --quick   (512 tokens x width 64, vocabulary 8,192, once, one chunk size: a test runs it)

The last step of a Qwen3-0.6B-wide model in fp32: ``--tokens`` hidden states of width ``--dim``
(2 rows) against a ``--vocab`` x ``--dim`` output weight, labels random with 5% ignored (-100),
the mean loss, gradients of the hidden states and the weight. Three ways:

1. ``unfused``: the full ``[tokens, vocab]`` logits, then ``F.cross_entropy``;
2. ``torchtune chunked``: ``CEWithChunkedOutputLoss`` over 8 chunks of logits, projected chunk by
   chunk along the sequence as ``TransformerDecoder.chunked_output`` does (all 8 are kept for
   backward);
3. ``fused``: ``entrodrop.models.loss.linear_cross_entropy``, ``chunk_size`` tokens at a time, logits
   recomputed in backward;
4. with ``--device cuda`` only: ``liger``, liger-kernel's fused linear cross entropy
   (``LinearCrossEntropy(impl="liger")``, ``pip install -e '.[gpu]'``), the other fused
   candidate.

Each runs in a child process of its own, ``--repeats`` times; the table shows the median
seconds and the peak memory above what the process held with its inputs in place, the
weight's gradient (the size of the weight) included: on CPU peak resident memory
(``ru_maxrss``), fp32; on CUDA ``max_memory_allocated``, bf16, one warm-up step first and the
device synchronized around each timed one. The loss column shows each variant's value and its
relative difference from the unfused one (a fused loss must stay within 1e-3 of it). On CPU the unfused run
needs about 15 GB more than its inputs at the default sizes; the script refuses to start one
that the machine's available memory cannot hold.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
GIB = 1024**3


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def child(variant: str, tokens: int, dim: int, vocab: int, repeats: int, chunk_size: int, device: str) -> dict:
    """Run one variant ``repeats`` times in this process; its seconds and peak extra memory."""
    import torch
    import torch.nn.functional as F
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    from entrodrop.models.loss import LinearCrossEntropy, linear_cross_entropy

    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, tokens // 2, dim, generator=gen).to(device, dtype).requires_grad_()
    weight = torch.nn.Parameter((torch.randn(vocab, dim, generator=gen) * dim**-0.5).to(device, dtype))
    labels = torch.randint(0, vocab, (2, tokens // 2), generator=gen)
    labels[torch.rand(labels.shape, generator=gen) < 0.05] = -100
    labels = labels.to(device)
    chunked_ce = CEWithChunkedOutputLoss(num_output_chunks=8)
    if variant == "liger":  # the config component, bound to a stand-in model whose projection is ``weight``
        projection = torch.nn.Linear(dim, vocab, bias=False, device="meta")
        projection.weight = weight  # the same parameter, so its gradient is the one reset below
        liger = LinearCrossEntropy(impl="liger")
        liger.set_model_output(SimpleNamespace(output=projection))

    def step() -> float:
        if variant == "unfused":
            loss = F.cross_entropy(F.linear(hidden, weight).flatten(0, 1), labels.flatten(), ignore_index=-100)
        elif variant == "torchtune chunked":
            logits = [F.linear(chunk, weight) for chunk in hidden.chunk(8, dim=1)]
            loss = chunked_ce(logits, labels)
            del logits  # as torchtune's recipes do before backward; autograd keeps what it needs
        elif variant == "liger":
            loss = liger(hidden, labels)
        else:
            loss = linear_cross_entropy(hidden, weight, labels, chunk_size, reduction="mean")
        loss.backward()
        return loss.item()

    if cuda:
        step()  # warm-up: kernels compiled and loaded, allocator primed
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if cuda else rss_bytes()
    seconds, losses = [], []
    for _ in range(repeats):
        hidden.grad = weight.grad = None
        start = time.perf_counter()
        losses.append(step())
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"seconds": seconds, "peak_extra_bytes": peak - base, "loss": losses[-1],
            "threads": torch.get_num_threads()}


def run_child(variant: str, args, chunk_size: int) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--tokens", str(args.tokens), "--dim", str(args.dim),
               "--vocab", str(args.vocab), "--repeats", str(args.repeats), "--chunk-size", str(chunk_size),
               "--device", args.device]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-sizes", default="1024,4096", help="the fused loss's chunk sizes, comma-separated")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: bf16, and liger-kernel's loss too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, default=1024, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="512 tokens x 64 against 8,192 x 64, once, chunks of 128")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.dim, args.vocab, args.repeats, args.chunk_sizes = 512, 64, 8192, 1, "128"
    if args.child:
        print(json.dumps(child(args.child, args.tokens, args.dim, args.vocab, args.repeats, args.chunk_size,
                               args.device)))
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA GPU here")

    cuda = args.device == "cuda"
    logits_bytes = args.tokens * args.vocab * 4
    runs = [("unfused", "unfused", 0), ("torchtune chunked", "torchtune CEWithChunkedOutputLoss, 8 chunks", 0)]
    runs += [("fused", f"fused (entrodrop.models.loss), chunk_size {c}", c) for c in map(int, args.chunk_sizes.split(","))]
    runs += [("liger", "liger-kernel fused linear cross entropy", 0)] if cuda else []
    print(f"{args.tokens} tokens x width {args.dim}, weight {args.vocab} x {args.dim}, {'bf16' if cuda else 'fp32'} on "
          f"{args.device}, forward + backward; full logits would be {logits_bytes / GIB:.1f} GiB in fp32")
    memory = "max_memory_allocated" if cuda else "peak RSS"
    print(f"median of {args.repeats} runs; peak memory is {memory} above the inputs\n")
    # Each row as it is measured: a run cut off by a time limit (make gpu-check) keeps the rows it finished.
    print("| loss | seconds | peak extra GiB | loss value |")
    print("|---|---|---|---|", flush=True)
    threads, reference = "?", None
    for variant, label, chunk_size in runs:
        if variant == "unfused" and not cuda and available_bytes() < 3.2 * logits_bytes:
            print(f"| {label} | skipped | needs ~{3.2 * logits_bytes / GIB:.0f} GiB free |  |", flush=True)
            continue
        try:
            out = run_child(variant, args, chunk_size)
        except RuntimeError as e:  # out of memory, liger-kernel missing: a row that says so
            print(f"| {label} | failed | - | {str(e).splitlines()[-1][:100]} |", flush=True)
            continue
        reference = out["loss"] if variant == "unfused" else reference
        difference = "" if reference is None else f" ({abs(out['loss'] - reference) / abs(reference):.1e} rel.)"
        print(f"| {label} | {statistics.median(out['seconds']):.3f} | {out['peak_extra_bytes'] / GIB:.2f} | "
              f"{out['loss']:.6f}{difference} |", flush=True)
        threads = out["threads"]
    if not cuda:
        print("\nliger-kernel's loss: CUDA only, skipped on the CPU")
    print(f"\n{threads} threads")


if __name__ == "__main__":
    main()
