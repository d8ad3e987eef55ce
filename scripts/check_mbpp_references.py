"""Every MBPP reference solution scored as ``mbpp_sandbox`` scores a reply, beside the same
tests run in a plain process: prints the tasks where the two disagree, which a correct program
would lose to the sandbox (docs/evaluation.md, Sandbox).

    python scripts/check_mbpp_references.py [--data mbpp.jsonl] [--split test] [--sandbox auto]

``--data``: google-research's ``mbpp.jsonl`` (all 974 tasks; ``--split`` then picks lm-eval's
test split, tasks 11-510, or ``all``); without it, the Hugging Face dataset
``google-research-datasets/mbpp`` (``full``), which needs the hub.
"""

import argparse
import json
import subprocess
import sys
import time

from entrodrop.sandbox.code_runner import Limits, run_all
from entrodrop.tasks import code_tasks

SPLITS = {"test": range(11, 511), "validation": range(511, 601), "train": range(601, 975), "prompt": range(1, 11)}


def tasks(data: str, split: str) -> list:
    if data:
        rows = [json.loads(line) for line in open(data)]
    else:
        import datasets

        rows = [row for name in SPLITS for row in datasets.load_dataset("google-research-datasets/mbpp", "full", split=name)]
    return sorted((r for r in rows if split == "all" or r["task_id"] in SPLITS[split]), key=lambda r: r["task_id"])


def plain(row: dict, timeout_s: float) -> str:
    """The reference, its setup code and its tests in one plain process: "" when they pass."""
    source = row["code"] + "\n" + code_tasks.mbpp_tests(row)
    try:
        done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"over {timeout_s:.0f} s"
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1][:200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="", help="a local mbpp.jsonl")
    parser.add_argument("--split", default="test", choices=[*SPLITS, "all"])
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bubblewrap", "own"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows = tasks(args.data, args.split)
    start = time.monotonic()
    results = run_all(code_tasks.mbpp_jobs([[row["code"]] for row in rows], rows),
                      Limits(timeout_s=code_tasks.PROBLEM_TIMEOUT_S, sandbox=args.sandbox), args.workers)
    seconds = time.monotonic() - start
    native = [plain(row, 30.0) for row in rows]
    print(f"MBPP {args.split}: {len(rows)} reference solutions. In the sandbox ({results[0].sandbox}; {seconds:.1f} s, "
          f"{args.workers} workers): {sum(r.held for r in results)} pass; the same tests in a plain process: "
          f"{native.count('')} pass\n")
    print("| task | in the sandbox | in a plain process |\n|---|---|---|")
    for row, result, why in zip(rows, results, native):
        if result.held != (why == ""):
            print(f"| {row['task_id']} | {'passes' if result.held else result.error} | {why or 'passes'} |")


if __name__ == "__main__":
    main()
