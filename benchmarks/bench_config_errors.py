"""How long `tune run` takes to report a config mistake, and what it prints. Prints a table.

    python benchmarks/bench_config_errors.py [--repeats 3]
    python benchmarks/bench_config_errors.py --quick   (the floor and the first mistake, once: a test runs it)

Each of three mistakes (an optimizer value, a length above the model's max_seq_len, a missing
tokenizer file) is given to the tiny training config through the real `tune run`, in a fresh
process each time; the floor is `python -c "import torchtune"`, which `tune` pays before it reads
the config. Target: each reported within 4 s, in one message with no traceback, before lm-eval's
task index is built (the message is the whole of stderr). Run it on an idle machine.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TUNE = Path(sys.executable).with_name("tune")
TRAIN = ["run", "recipes/entrodrop_single_device.py", "--config", "configs/tiny/qwen3_entrodrop_single_device.yaml"]
MISTAKES = {
    "optimizer.lr=-1e-3": ["optimizer.lr=-1e-3"],
    "data.seq_len=4096": ["data.seq_len=4096"],
    "tokenizer.merges_file=<missing>": ["tokenizer.merges_file=/nonexistent/merges.txt"],
}


def timed(cmd, repeats: int):
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the floor and the first mistake, once")
    args = parser.parse_args()
    mistakes = dict(list(MISTAKES.items())[:1]) if args.quick else MISTAKES
    if args.quick:
        args.repeats = 1
    floor, _ = timed([sys.executable, "-c", "import torchtune"], args.repeats)
    print(f"| mistake | seconds (median of {args.repeats}) | exit | stderr lines | traceback |")
    print("|---|---|---|---|---|")
    print(f"| (floor: import torchtune) | {floor:.2f} | - | - | - |")
    with tempfile.TemporaryDirectory() as out:
        for name, overrides in mistakes.items():
            seconds, result = timed([str(TUNE), *TRAIN, f"output_dir={out}/run", *overrides], args.repeats)
            lines = result.stderr.strip().splitlines()
            print(f"| {name} | {seconds:.2f} | {result.returncode} | {len(lines)} | {'Traceback' in result.stderr} |",
                  flush=True)


if __name__ == "__main__":
    main()
