"""The tests, here: HumanEval's and MBPP's (``asserts`` jobs) run in the trusted harness, the
program reached only by remote calls to its candidate (``candidates.Candidate``).

The benchmark's test code runs after the reference solution's definitions (its imports and
helpers, ``setup``), with each function the tests call by name replaced by a proxy that makes the
remote call (``Remote``): arguments out as plain values, a plain value back (or the program's
error), compared here. The expected values never leave this process, so a program that reads
every byte of its own has nothing to forge a verdict with. An object of a class of the reference
the tests build (MBPP's ``Pair(5, 24)``, its trees' ``Node``) is built in the candidate with the
program's own class and stays there: the test holds a ``Handle``, whose attribute reads and writes
(``root.left = Node(2)``) and calls are requests. A built-in exception the program raised
(``RAISABLE``) is raised in the test, so a test that expects one behaves as it would in the
program's process.
"""

import ast
import builtins
import random
import time
import traceback

from entrodrop.sandbox.candidates import Candidate, CandidateFailed, ProgramRaised, checked
from entrodrop.sandbox.sandbox_child import encode, is_namedtuple


class Tests:
    """What the tests reach the program through: its functions and classes (``Remote``) and its
    objects (``Handle``), each use a request to the candidate by the
    deadline of all the tests' requests, answered with a plain value or a handle."""

    def __init__(self, candidate: Candidate, reference: dict = {}):
        self.candidate, self.handles = candidate, {}
        # The reference's namedtuple classes, for those the program returns (``named``).
        self.namedtuples = {name: cls for name, cls in reference.items() if is_namedtuple(cls)}

    def named(self, name: str, items: int):
        """The reference's namedtuple class ``name`` of ``items`` fields, for one the program returns
        (``decode``): its fields read by name (``p.x``) and its ``==`` a tuple's, never the program's."""
        cls = self.namedtuples.get(name)
        return cls if cls is not None and len(cls._fields) == items else None

    def handle(self, number: int, name: str) -> "Handle":
        """One ``Handle`` a number: an object the candidate sends twice is the same one here."""
        if number not in self.handles:
            self.handles[number] = Handle(self, number, name)
        return self.handles[number]

    def share(self, value):
        return [value._Handle__number, value._Handle__name] if type(value) is Handle and value._Handle__tests is self else None

    def encoded(self, value):
        try:
            return encode(value, share=self.share)
        except (TypeError, ValueError) as e:
            raise self.candidate.fail(f"the test passes a value that cannot cross to the sandbox ({e})") from None

    def request(self, message: dict):
        candidate = self.candidate
        try:
            left = candidate.deadline - time.monotonic()
            what = f"{candidate.limits['timeout_s']:.1f} s for all the calls"
            return checked(candidate.request(message, left, what, raises=True), self.handle, named=self.named)
        except CandidateFailed as e:
            raise candidate.fail(e.reason) from None
        except ProgramRaised as e:  # the type is from the allow-list: never one the test could not expect
            raise getattr(builtins, e.name)(e.message) from None

    def call(self, message: dict, args: tuple, kwargs: dict):
        self.candidate.calls += 1
        return self.request({**message, "args": [self.encoded(a) for a in args],
                             "kwargs": [[k, self.encoded(v)] for k, v in kwargs.items()], "solution": False})


class Remote:
    """What the tests call instead of the program's function (``op`` "call") or of a class of the
    reference (``op`` "new": ``Node(1)`` is built in the candidate with the program's own
    ``Node``, and the test holds its ``Handle``): a request to the candidate."""

    def __init__(self, tests: Tests, op: str, name: str):
        self.tests, self.op, self.name = tests, op, name

    def __call__(self, *args, **kwargs):
        return self.tests.call({"op": self.op, "name": self.name}, args, kwargs)


class Handle:
    """An object of the program's that stays in the candidate: the test reads and sets its
    attributes (``root.left = Node(2)``) and calls it (a method) as requests; it passes back as
    the same object. Compared here only by identity: its ``__eq__`` is the program's, which
    never runs here."""

    __slots__ = ("__tests", "__number", "__name")

    def __init__(self, tests: Tests, number: int, name: str):
        for slot, value in (("_Handle__tests", tests), ("_Handle__number", number), ("_Handle__name", name)):
            object.__setattr__(self, slot, value)

    def __getattr__(self, attr: str):  # only for names Handle itself lacks
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self.__tests.request({"op": "getattr", "handle": self.__number, "attr": attr})

    def __setattr__(self, attr: str, value) -> None:
        self.__tests.request({"op": "setattr", "handle": self.__number, "attr": attr,
                              "value": self.__tests.encoded(value)})

    def __call__(self, *args, **kwargs):
        return self.__tests.call({"op": "call", "handle": self.__number}, args, kwargs)

    def __bool__(self) -> bool:  # the program's __bool__ or __len__ decides, as in its process
        return self.__tests.request({"op": "truth", "handle": self.__number}) is True

    def __repr__(self) -> str:
        return f"<{self.__name} object in the sandbox>"


def parsed(source: str, what: str) -> ast.Module:
    """``source`` parsed; one that does not parse fails the sample with the reason, not the harness."""
    try:
        return ast.parse(source, f"<{what}>")
    except (SyntaxError, ValueError) as e:  # ValueError: a null byte
        raise CandidateFailed(f"the {what} cannot be parsed: {type(e).__name__}: {e}"[:300]) from None


def under_test(setup: str, tests: str, call: str) -> tuple:
    """The functions and the classes the tests use by name: those ``setup`` (the reference
    solution) defines at its top level that the test module's own statements or ``call`` name.
    A helper used only inside ``check`` (HumanEval's ``poly``) stays the reference's.

    Example:
        >>> setup = "def poly(xs, x): ...\\ndef find_zero(xs): ...\\nclass Pair: ..."
        >>> under_test(setup, "def check(c):\\n    poly([1], 0)\\nassert c(Pair())", "check(find_zero)")
        (['find_zero'], ['Pair'])
    """
    body = parsed(setup, "reference solution").body
    functions = [node.name for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [node.name for node in body if isinstance(node, ast.ClassDef)]
    named = set()
    for tree in (parsed(tests, "tests"), parsed(call, "test call")):
        pending = list(tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                named.add(node.id)
            pending.extend(ast.iter_child_nodes(node))
    return [name for name in functions if name in named], [name for name in classes if name in named]


def run_asserts(candidate: Candidate, job: dict) -> None:
    """The benchmark's tests, here, against remote calls; ``CandidateFailed`` unless every
    assertion held, the tests ran to their end and called the program."""
    names, classes = under_test(job["setup"], job["tests"], job.get("call", ""))
    if not names:
        raise CandidateFailed("the tests call no function the reference solution defines")
    namespace = {"__name__": "__tests__"}
    try:
        exec(compile(job["setup"], "<reference>", "exec"), namespace)
    except Exception as e:
        raise CandidateFailed(f"the reference solution's code failed in the harness: {type(e).__name__}: {e}"[:300]) from None
    tests = Tests(candidate, dict(namespace))  # before the names the tests use become remote
    for name in names:
        namespace[name] = Remote(tests, "call", name)
    for name in classes:
        namespace[name] = Remote(tests, "new", name)
    random.seed(0)  # tests that draw random inputs draw the same ones for every program
    try:
        exec(compile(job["tests"], "<tests>", "exec"), namespace)
        if job.get("call"):
            exec(compile(job["call"], "<call>", "exec"), namespace)
    except CandidateFailed:
        raise
    except AssertionError as e:
        frames = [f for f in traceback_frames(e) if f[0] in ("<tests>", "<call>")]
        where = job["tests"].split("\n")[frames[-1][1] - 1].strip()[:200] if frames and frames[-1][0] == "<tests>" else ""
        raise candidate.fail(f"assertion failed: {where}" if where else "assertion failed") from None
    except BaseException as e:  # noqa: BLE001 - a wrong value can make the test itself raise
        raise candidate.fail(f"the test raised {type(e).__name__}: {e}"[:300]) from None
    if candidate.failed:  # caught by a bare except in the test
        raise CandidateFailed(candidate.failed)
    if not candidate.calls:
        raise CandidateFailed("the tests never called the program")


def traceback_frames(error: BaseException) -> list:
    return [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(error.__traceback__)]

