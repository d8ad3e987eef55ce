"""Run model-written programs where they can neither harm the machine nor forge their verdict.

Every code task (``humaneval_pass1``, ``livecodebench_v1``, and the sandboxed variants of
lm-eval's ``humaneval`` and ``mbpp``) scores through ``passes``. Each program runs in a fresh
Python interpreter (``sandbox_child.py``; spawned, not forked from the process that holds the
model) in a new empty temporary directory, with a scrubbed environment, in its own process
group, under rlimits (address space, CPU seconds, file size, open files, no new process), in a
network namespace of its own and with Landlock keeping its writes inside the directory, where
the kernel allows them (the child reports what it got). The whole group is killed at the
deadline.

The child reports raw outputs only; the comparison is here, in the parent:

- stdin tests (LiveCodeBench): stdout against the expected text, line by line after stripping;
  a line that differs still matches when its tokens are equal as exact decimals (``1.0`` and
  ``1.000``), LiveCodeBench's own rule: no tolerance beyond that;
- functional tests (LiveCodeBench): the return value against the expected JSON, by value and
  type (``same_value``; a tuple counts as a list, as LiveCodeBench converts it);
- assertion tests (HumanEval, MBPP): the values each assertion compares (``same_record``),
  against those of the benchmark's reference solution run the same way, whose own assertions
  must hold (``holds``).

An object that claims to equal everything has no plain encoding and fails.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Dict, List, Optional, Sequence

CHILD = Path(__file__).with_name("sandbox_child.py")
# What the child's environment keeps; the rest (tokens, keys, paths of the training run) is dropped.
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
RESULTS_LIMIT = 64 << 20  # bytes of outputs read back; a program printing more fails


@dataclass(frozen=True)
class Limits:
    """What one program may use. ``timeout_s`` is per test (LiveCodeBench's 6 s); the program's
    deadline is ``timeout_s`` x tests + ``startup_s`` of wall clock, its CPU the same in seconds."""

    timeout_s: float = 6.0
    startup_s: float = 5.0
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64


@dataclass
class Run:
    """What came back from one program: its ``outputs`` (one a test, fewer when it stopped),
    ``error`` (why it stopped: an exception, ``timeout``, ``no report``), and what the child's
    lock-down got: ``network`` (cut | open), ``files`` (confined | open), ``processes`` (refused |
    allowed)."""

    outputs: List
    error: Optional[str]
    network: str = "unknown"
    files: str = "unknown"
    processes: str = "unknown"


def run(job: Dict, limits: Limits = Limits()) -> Run:
    """Run one job (``sandbox_child.run_job``'s ``kind``, ``code``, ``inputs`` or ``tests``...)
    in a sandboxed child and read its report."""
    tests = max(len(job.get("inputs", ())), 1)
    deadline = limits.timeout_s * tests + limits.startup_s
    child_limits = {"memory_bytes": limits.memory_bytes, "cpu_s": int(deadline) + 1,
                    "file_bytes": limits.file_bytes, "open_files": limits.open_files}
    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="entrodrop-code-") as tmp:
        env = {**ENVIRONMENT, "HOME": tmp, "TMPDIR": tmp}
        child = subprocess.Popen([sys.executable, "-I", str(CHILD), str(write_end)], cwd=tmp, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 pass_fds=(write_end,), start_new_session=True)
        os.close(write_end)
        try:
            with os.fdopen(read_end, "rb") as results:
                child.stdin.write(json.dumps({**job, "limits": child_limits}).encode())
                child.stdin.close()
                report = read_report(results, child, deadline)
        finally:
            kill_group(child)
    return report


def read_report(results, child: subprocess.Popen, deadline: float) -> Run:
    """The child's report, or why there is none; waits at most ``deadline`` seconds."""
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(results.read, RESULTS_LIMIT + 1)
        try:
            data = pending.result(timeout=deadline)
        except TimeoutError:
            kill_group(child)  # the read returns once no process holds the pipe
            return Run([], "timeout")
    if len(data) > RESULTS_LIMIT:
        return Run([], "outputs over the size limit")
    try:
        report = json.loads(data)
        return Run(report["outputs"], report["error"], report["network"], report["files"], report["processes"])
    except (ValueError, KeyError, TypeError):
        return Run([], f"no report (exit status {child.wait()})")


def kill_group(child: subprocess.Popen) -> None:
    """Kill the child's process group (whatever it started, should a fork get through) and reap it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def run_all(jobs: Sequence[Dict], limits: Limits = Limits(), workers: int = 1) -> List[Run]:
    """``run`` over ``jobs``, ``workers`` children at a time, in order."""
    if workers <= 1:
        return [run(job, limits) for job in jobs]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: run(job, limits), jobs))


# ------------------------------------------------------------------ comparison

def same_value(a, b) -> bool:
    """Encoded values (``sandbox_child.encode``) equal by value and type: ints and floats compare
    as numbers (``3 == 3.0``, as Python's ``==`` in the tests), a bool is neither, a tuple is
    not a list.

    Example:
        >>> from entrodrop.eval.sandbox_child import encode
        >>> same_value(encode([1, 2.0]), encode([1.0, 2])), same_value(encode(True), encode(1))
        (True, False)
    """
    (tag_a, a), (tag_b, b) = a, b
    if {tag_a, tag_b} <= {"int", "float"}:
        return float(a) == float(b) if "float" in (tag_a, tag_b) else a == b
    if tag_a != tag_b:
        return False
    if tag_a in ("list", "tuple", "set"):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if tag_a == "dict":
        return len(a) == len(b) and all(same_value(ka, kb) and same_value(va, vb) for (ka, va), (kb, vb) in zip(a, b))
    return a == b


def same_stdout(got: str, expected: str) -> bool:
    """LiveCodeBench's rule: line by line after stripping; a differing line still matches when its
    tokens are equal as exact decimals.

    Example:
        >>> same_stdout("1.0 2\\n", "1.000 2"), same_stdout("1.0001", "1")
        (True, False)
    """
    got_lines = [line.strip() for line in got.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(expected_lines):
        return False
    for a, b in zip(got_lines, expected_lines):
        if a == b:
            continue
        a_tokens, b_tokens = a.split(), b.split()
        try:
            if len(a_tokens) != len(b_tokens) or any(Decimal(x) != Decimal(y) for x, y in zip(a_tokens, b_tokens)):
                return False
        except InvalidOperation:
            return False
    return True


def same_record(a: List, b: List) -> bool:
    """Two records of one assertion (``["eq", a, b]`` or ``["is", x]``) with the same values."""
    return a[0] == b[0] and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a[1:], b[1:]))


def holds(record: List) -> bool:
    """Whether a recorded assertion held: its two sides equal, or its value true.

    Example:
        >>> holds(["eq", ["int", 3], ["float", "3.0"]]), holds(["is", ["bool", False]])
        (True, False)
    """
    if record[0] == "eq":
        return same_value(record[1], record[2])
    tag, value = record[1]
    return bool(float(value) if tag == "float" else value)


def passed(result: Run, expected: List, compare) -> bool:
    """Every expected output came back, complete, and ``compare``s equal."""
    return (result.error is None and len(result.outputs) == len(expected)
            and all(compare(got, want) for got, want in zip(result.outputs, expected)))
