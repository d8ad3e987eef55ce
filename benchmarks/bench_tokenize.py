"""Benchmark recipes/tokenize_corpus.py on a streamed general corpus: tokens/s and peak memory. Prints a table.

    python benchmarks/bench_tokenize.py [--gigabytes 1.0] [--out outputs/bench_tokenize]
    python benchmarks/bench_tokenize.py --quick   (a 2 MB corpus: a test runs it)

Builds, once, a JSON-lines corpus of ``--gigabytes`` in Infinity-Instruct's shape (``{"conversations":
[{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``) from the standard
library's and site-packages' ``.py``, ``.txt`` and ``.rst`` files, cut into turns of varied
length (each pass over the files cuts them differently, so rows differ), and its first tenth.
Then, each through ``tune run`` into a fresh store (tiny Qwen3 tokenizer, ``source: json``,
``streaming: True``, ``conversation_style: sharegpt``, ``max_seq_len`` 4096), tokenizes the
tenth with one process and the whole with one and with two (``--nproc_per_node 2``): wall
seconds of the command, tokens written (the store's manifest), and the peak of the resident
memory summed over the launcher and all its children (polled every 0.2 s). Bounded memory
shows as about the same peak for the tenth and the whole.
"""

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import psutil
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"
TUNE = str(Path(sys.executable).parent / "tune")


def texts():
    """The text of every readable .py, .txt and .rst file of the standard library and site-packages."""
    for root in sorted({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}):
        for path in sorted(p for p in Path(root).rglob("*") if p.suffix in (".py", ".txt", ".rst") and p.is_file()):
            try:
                yield path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                pass


def build_corpus(path: Path, num_bytes: int) -> None:
    """Conversations of 2 to 6 turns of 100 to 6000 characters, until the file holds ``num_bytes``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, written, passes = path.with_suffix(".tmp"), 0, 0
    with tmp.open("wb") as f:
        while written < num_bytes:
            rng, turns = random.Random(passes), []
            for text in texts():
                start = 0
                while start < len(text) and written < num_bytes:
                    size = rng.randint(100, 6000)
                    turns.append(text[start : start + size])
                    start += size
                    if len(turns) >= rng.randint(2, 6):
                        line = json.dumps({"conversations": [{"from": ("human", "gpt")[i % 2], "value": t}
                                                             for i, t in enumerate(turns)]}, ensure_ascii=False)
                        written += f.write((line + "\n").encode("utf-8"))
                        turns = []
                if written >= num_bytes:
                    break
            passes += 1
    tmp.rename(path)


def tokenize(out: Path, corpus: Path, label: str, nproc: int) -> dict:
    """``tune run`` of the recipe on ``corpus`` into a fresh store: seconds, tokens, peak summed RSS."""
    store = out / "stores" / label
    shutil.rmtree(store, ignore_errors=True)
    entry = {**dict.fromkeys(["name", "revision", "column", "template", "max_tokens", "max_samples", "validation_size",
                              "validation_store_dir", "problem_key"]),
             "unknown_roles": "drop",
             "source": "json", "split": "train", "data_files": str(corpus), "streaming": True, "seed": 0,
             "conversation_column": "conversations", "conversation_style": "sharegpt", "chat_template": False,
             "long_samples": "split", "store_dir": str(store)}
    tokenizer = {"_component_": "entrodrop.models.qwen3.qwen3_tokenizer", "path": f"{TINY}/qwen3/vocab.json",
                 "merges_file": f"{TINY}/qwen3/merges.txt", "special_tokens_path": f"{TINY}/qwen3/tokenizer.json",
                 "max_seq_len": None}
    config, log = out / f"{label}.yaml", out / f"{label}.log"
    OmegaConf.save(OmegaConf.create({"tokenizer": tokenizer, "corpora": {"general": entry}, "max_seq_len": 4096,
                                     "samples_per_shard": 4096}), config)
    cmd = [TUNE, "run", *(["--nproc_per_node", str(nproc)] if nproc > 1 else []), "recipes/tokenize_corpus.py",
           "--config", str(config)]
    with log.open("w") as f:
        start, peak = time.perf_counter(), 0
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
        launcher = psutil.Process(proc.pid)
        while proc.poll() is None:
            rss = 0
            for p in [launcher, *launcher.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a process that ended meanwhile
                    rss += p.memory_info().rss
            peak = max(peak, rss)
            time.sleep(0.2)
        seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{label}: tokenize failed (exit {proc.returncode}), see {log}:\n{log.read_text()[-3000:]}")
    tokens = json.loads((store / "manifest.json").read_text())["num_tokens"]
    return {"tokens": tokens, "seconds": seconds, "peak_mib": peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0, help="corpus size, GB (1e9 bytes)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench_tokenize")
    parser.add_argument("--quick", action="store_true", help="a corpus of 0.002 GB (2 MB)")
    args = parser.parse_args()
    if args.quick:
        args.gigabytes = 0.002
    if not (TINY / ".built").exists():
        parser.error(f"{TINY} is missing: run `make assets` first (the tokenizer comes from it)")
    out, started = args.out.resolve(), time.perf_counter()
    tenth, full = (out / f"corpus-{args.gigabytes:g}GB{part}.jsonl" for part in ("-first-tenth", ""))
    for corpus, num_bytes in ((tenth, int(args.gigabytes * 1e8)), (full, int(args.gigabytes * 1e9))):
        if not corpus.exists() or corpus.stat().st_size < num_bytes:
            build_corpus(corpus, num_bytes)  # the same rows in the same order: the tenth is the whole's prefix
    print(f"corpora in {out} ready in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    rows = []
    for corpus, nproc in [(tenth, 1), (full, 1), (full, 2)]:
        label = f"{corpus.stem}-{nproc}proc"
        rows.append((corpus.stat().st_size / 1e9, nproc, tokenize(out, corpus, label, nproc)))
        print(f"{label}: {rows[-1][2]}", file=sys.stderr)

    print(f"\nrecipes/tokenize_corpus.py, streamed JSON lines (sharegpt), tiny Qwen3 tokenizer, max_seq_len 4096; "
          f"{psutil.cpu_count()} CPUs; peak RSS summed over the launcher and its children\n")
    print("| corpus GB | processes | tokens | seconds | tokens/s | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for gb, nproc, r in rows:
        print(f"| {gb:.3g} | {nproc} | {r['tokens']:,} | {r['seconds']:.1f} | {r['tokens'] / r['seconds']:,.0f} "
              f"| {r['peak_mib']:,.0f} |")


if __name__ == "__main__":
    main()
