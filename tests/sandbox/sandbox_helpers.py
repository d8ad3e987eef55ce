"""What the sandbox's tests of hostile programs share (``test_hostile_programs.py``,
``test_seccomp_filter.py``): a hostile program's opening, a correct program to run after it, and a
harness caught while its candidate runs. Imported by name (``from sandbox_helpers import ...``):
pytest puts each test file's folder on ``sys.path``."""

import contextlib
import threading
import time
from typing import Iterator

from conftest import descendants

from entrodrop.sandbox.code_runner import Harness, Limits, Run, passed, same_stdout, sandbox_in_use

# A hostile program's opening: ``attempt(fn)`` is "reached" if ``fn`` ran, "refused" if it raised OSError.
ATTEMPT = """
import os, signal, socket, sys
def attempt(fn):
    try:
        fn()
        return "reached"
    except OSError:
        return "refused"
"""
# A correct program, run after a hostile one to show the evaluation goes on.
GOOD = {"kind": "stdin", "code": "a, b = map(int, input().split())\nprint(a + b)", "inputs": ["2 3\n"]}


def good_passes(result: Run) -> bool:
    return passed(result, ["5\n"], same_stdout)


def loaded(pid: int) -> bool:
    """Process ``pid`` is a candidate that has loaded its program (the load sets its CPU limit);
    False for any other, or once it has ended."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            return "Max cpu time              unlimited" not in f.read()
    except OSError:
        return False


@contextlib.contextmanager
def candidate_running(job: dict, limits: Limits) -> Iterator[Harness]:
    """A harness running ``job`` in a thread, yielded once its candidate has loaded the program,
    and killed after (which ends the run, and the candidate with it)."""
    harness = Harness(sandbox_in_use(limits.sandbox))
    thread = threading.Thread(target=harness.run, args=(job, limits, False))
    thread.start()
    try:
        for _ in range(1500):  # polls /proc for the load, 30 s at most
            if any(loaded(pid) for pid in descendants(harness.process.pid)):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("no candidate loaded its program")
        yield harness
    finally:
        harness.process.kill()
        thread.join()
