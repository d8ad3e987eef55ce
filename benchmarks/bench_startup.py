"""How long the tiny training config takes from `tune run` to its first step. Prints a table.

    python benchmarks/bench_startup.py [--repeats 3] [--repo /tmp/old32 --repo .]
    python benchmarks/bench_startup.py --quick   (one run, no warm-up run: a test runs it)

Each run is the real `tune run recipes/entrodrop_single_device.py` on
configs/tiny/qwen3_entrodrop_single_device.yaml, whose lm-eval task (humaneval_likelihood) is
set, in a fresh process; the clock stops when the run's DiskLogger writes its ``Step 1`` line
(written and flushed right after the first optimizer step), and the run is then stopped. The
floor is `python -c "import torchtune"`, which `tune` pays before it reads the config.

``--repo`` runs the recipe and the library of another checkout (a `git worktree` of an older commit, sharing
this environment and ``assets/``), so a change is timed beside the code before it; the token
stores and entropy caches are built once, by this checkout (``entrodrop.experiments.tiny_data``),
in a temporary directory (or ``--data``, kept for the next time). The first run of a checkout
fills lm-eval's index cache (``entrodrop.eval.task_checks``); ``--cold`` clears it before every run. The load average is
printed with the table: the machine is shared, and a busy one is slower.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from entrodrop.experiments.tiny_data import tiny_data

REPO = Path(__file__).resolve().parent.parent
TUNE = Path(sys.executable).with_name("tune")
CONFIG = "configs/tiny/qwen3_entrodrop_single_device.yaml"
TRAIN = ["run", "recipes/entrodrop_single_device.py", "--config", CONFIG]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def first_step_seconds(repo: Path, overrides: list, output_dir: Path, timeout: float = 300) -> float:
    """Seconds from starting `tune run` to the first ``Step 1`` line of its log; the run is then stopped."""
    # stderr to a file: a pipe nobody reads until the run ends would stop the run once it filled.
    stderr = output_dir.with_name(f"{output_dir.name}.stderr")
    start = time.perf_counter()
    # A session of its own, so the whole process group (tune and what it starts) is stopped after.
    with open(stderr, "w") as err:
        # PYTHONPATH: the checkout's own library, not the one this environment installed (editable, this checkout).
        process = subprocess.Popen([str(TUNE), *TRAIN, f"output_dir={output_dir}", *overrides], cwd=repo,
                                   env={**ENV, "PYTHONPATH": str(repo)},
                                   stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        while time.perf_counter() - start < timeout:
            logs = list((output_dir / "logs").glob("*.txt")) if (output_dir / "logs").is_dir() else []
            if any(line.startswith("Step 1 ") for log in logs for line in log.read_text().splitlines()):
                return time.perf_counter() - start
            if process.poll() is not None:
                raise RuntimeError(f"{repo}: the run ended before its first step:\n{stderr.read_text()[-3000:]}")
            time.sleep(0.02)
        raise RuntimeError(f"{repo}: no first step within {timeout} s")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def import_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torchtune"], check=True)
    return time.perf_counter() - start


def clear_index_cache() -> None:
    """Remove lm-eval's index cache (``entrodrop.eval.task_checks``), where this checkout has one."""
    try:
        from entrodrop.eval.task_checks import index_cache_dir
    except ImportError:
        return
    for path in index_cache_dir().glob("*.json") if index_cache_dir().is_dir() else []:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repo", action="append", type=Path, help="a checkout whose recipe runs (repeatable; "
                        "default this one)")
    parser.add_argument("--data", type=Path, help="where the token stores and caches are built (default: a temporary "
                        "directory)")
    parser.add_argument("--cold", action="store_true", help="clear lm-eval's index cache before every run")
    parser.add_argument("--quick", action="store_true", help="one run of this checkout, without the warm-up run")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    repos = [r.resolve() for r in args.repo or [REPO]]
    with tempfile.TemporaryDirectory() as tmp:
        overrides = tiny_data(args.data or Path(tmp) / "data")
        floor = statistics.median(import_seconds() for _ in range(args.repeats))
        load_before = os.getloadavg()
        rows = []
        for repo in repos:
            # One warm-up run: the first start after a change compiles .pyc files and fills caches.
            if not args.cold and not args.quick:
                print(f"{repo}: a warm-up run", flush=True)
                first_step_seconds(repo, overrides, Path(tmp) / f"warm-{len(rows)}")
            seconds = []
            for k in range(args.repeats):
                print(f"{repo}: run {k + 1}/{args.repeats}", flush=True)
                if args.cold:
                    clear_index_cache()
                seconds.append(first_step_seconds(repo, overrides, Path(tmp) / f"run-{len(rows)}-{k}"))
            rows.append((repo, seconds))
        load_after = os.getloadavg()
    print(f"| checkout | seconds to the first step (median of {args.repeats}) | min | max |")
    print("|---|---|---|---|")
    print(f"| (floor: import torchtune) | {floor:.2f} | - | - |")
    for repo, seconds in rows:
        print(f"| {repo} | {statistics.median(seconds):.2f} | {min(seconds):.2f} | {max(seconds):.2f} |")
    print(f"\n{os.cpu_count()} CPUs; load average (1, 5, 15 min) before {', '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {', '.join(f'{x:.2f}' for x in load_after)}; "
          f"lm-eval index cache: {'cleared each run' if args.cold else 'warm'}")


if __name__ == "__main__":
    main()
