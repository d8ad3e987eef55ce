"""One prepared command for a lent GPU window: run it under a cap, and keep what it wrote under $OUT.

    python scripts/gpu_window.py --carry reproduce      # what the device call carries, and its size
    python3 scripts/gpu_window.py reproduce --cap 510   # on the GPU machine: SEEDS=10 make reproduce
    python3 scripts/gpu_window.py demo --cap 540        # make demo, its GPU version whole
    python3 scripts/gpu_window.py profile --cap 420     # make gpu-profile: 20 steps at Qwen3-0.6B, traced
    python scripts/gpu_window.py profile --dry-run      # the same command on this CPU, at tiny size

A lent machine gives 15 minutes in all and at most 10 a command, and keeps nothing; what a command
writes under ``$OUT`` comes back, at most 64 MiB goes there with it (``--carry`` sums the list and
exits 1 above that). The command runs in a session of its own, its output line by line into
``$OUT/<name>.log``; at ``--cap`` seconds it gets Ctrl-C (SIGINT: the project's commands say what
they kept and stop), and SIGKILL ``GRACE_S`` later. However it ended, its tables, figures and
logs (``RESULTS``, each file under ``MAX_FILE_BYTES``) are copied into ``$OUT/<name>/``, and the
last line says how it ended. Standard library only: the GPU machine's Python has no venv until
``make`` builds one (docs/performance.md, "Running the GPU check").
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

REPO = Path(__file__).resolve().parent.parent
CARRY_LIMIT_BYTES = 64 * 2**20
MAX_FILE_BYTES = 32 * 2**20  # a 20-step trace at 0.6B, gzipped
GRACE_S = 30


class Command(NamedTuple):
    argv: List[str]
    env: Dict[str, str]
    carry: List[str]  # what the device call carries (--carry sums it)
    results: List[str]  # what comes back into $OUT/<name>/, as globs from the repository root
    # The same command at tiny size on this CPU; None where tests check its plan instead
    # (tests/experiments/test_reproduce.py and test_demo.py: each stage's device, the files it writes).
    tiny: Optional[List[str]]


COMMANDS = {
    "reproduce": Command(["make", "reproduce"], {"SEEDS": "10"},
                         [".whl", "assets", "outputs/demo/corpora", "outputs/demo/.stages/01.done"],
                         ["outputs/reproduce/*.md", "outputs/reproduce/*.png", "outputs/reproduce/*.json",
                          "outputs/demo/pretrain/logs/*.txt"], None),
    "demo": Command(["make", "demo"], {}, [".whl", "assets"],
                    ["outputs/demo_gpu/report/*", "outputs/demo_gpu/*/logs/*.txt", "outputs/demo_gpu/*/eval/*.json*"],
                    None),
    "profile": Command(["make", "gpu-profile"], {}, [".whl", "assets"],
                       ["outputs/gpu_profile/*.log", "outputs/gpu_profile/profile/*/*/*"],
                       [sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--quick", "--profile", "2",
                        "--out", "outputs/gpu_profile"]),
}


def carried_bytes(paths) -> dict:
    """Each carried path's size in bytes (a folder: every file under it); None where it is missing."""
    sizes = {}
    for path in map(Path, paths):
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else None
        sizes[str(path)] = None if files is None else sum(f.stat().st_size for f in files)
    return sizes


def run_capped(argv, env: dict, cap_s: float, log: Path) -> str:
    """Run ``argv`` in a session of its own, its output into ``log`` as it comes; at ``cap_s`` Ctrl-C
    it, and SIGKILL it ``GRACE_S`` later. How it ended, in words."""
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                   start_new_session=True)
        try:
            return f"exit status {process.wait(timeout=cap_s)}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                return f"cut at the {cap_s:g} s cap (Ctrl-C), exit status {process.wait(timeout=GRACE_S)}"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                return f"cut at the {cap_s:g} s cap, killed {GRACE_S} s after its Ctrl-C, exit status {process.wait()}"


def bring_back(patterns, to: Path) -> int:
    """Copy the files ``patterns`` match (relative to the repository) into ``to``, keeping their
    relative paths, each under ``MAX_FILE_BYTES``; how many."""
    copied = 0
    for pattern in patterns:
        for path in sorted(REPO.glob(pattern)):
            if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                target = to / path.relative_to(REPO)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
                copied += 1
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(COMMANDS))
    parser.add_argument("--cap", type=float, default=510.0, help="seconds before the command is stopped")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "outputs/gpu_window")))
    parser.add_argument("--carry", action="store_true", help="list what the device call carries, and its size")
    parser.add_argument("--dry-run", action="store_true", help="the command at tiny size, on this CPU")
    args = parser.parse_args()
    argv, env, carry, results, tiny = COMMANDS[args.name]
    if args.carry:
        sizes = carried_bytes(carry)
        for path, size in sizes.items():
            print(f"{path}: {'missing' if size is None else f'{size / 2**20:.1f} MiB'}")
        total = sum(size or 0 for size in sizes.values())
        print(f"carry: {[p for p in sizes]}, {total / 2**20:.1f} of {CARRY_LIMIT_BYTES / 2**20:.0f} MiB")
        sys.exit(1 if total > CARRY_LIMIT_BYTES or None in sizes.values() else 0)
    if args.dry_run and tiny is None:
        parser.error(f"{args.name} has no run at tiny size: its plan on the CPU is tested instead (COMMANDS)")
    if args.dry_run:
        argv, env = tiny, {"DEVICE": "cpu"}
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ended = run_capped(argv, env, args.cap, args.out / f"{args.name}.log")
    copied = bring_back(results, args.out / args.name)
    print(f"{args.name}: {ended} after {time.monotonic() - started:.0f} s; {copied} files in {args.out / args.name}, "
          f"the log in {args.out / f'{args.name}.log'}")


if __name__ == "__main__":
    main()
