"""What a reply can cost the evaluation (entrodrop.eval.sandbox). A review (issue 39) found a
functional LiveCodeBench answer tagged as a set of 25,000 integers of one hash (equal modulo
2**61 - 1, Python's hash modulus) cost about 6 s a test to decode, once in the harness and again
in the evaluation, which had no deadline on it: 49-63 s for one 4-test problem. Python places a
set's or a dict's item by walking past every earlier item of the same hash, so such a value is
now refused for its hashes before it is built, with the reason, and a correct answer with sets
and dicts scores as before. The harness passes a checked answer on as it came: encoding it again
cost the depth of its nested sets times its size. The sandbox tests run under bubblewrap
(skipped where it cannot run here) and under the own layer."""

import json

import pytest
import test_hostile_programs

from entrodrop.eval.sandbox.code_runner import Limits, checked_run, passed, run_all, same_value
from entrodrop.eval.sandbox.sandbox_child import SAME_HASH, decode, encode

sandbox = test_hostile_programs.sandbox  # the fixture: bubblewrap (where it runs here), then the own layer
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


def test_the_evaluation_refuses_a_flooded_output_from_the_harness():
    """The evaluation decodes what the harness sends with the same check, so a harness that
    passed a flood on would be refused (and replaced), not waited on."""
    result = {"outputs": [FLOODS["a set of ints"]], "error": None, "held": False, "sandbox": "", "unavailable": None}
    with pytest.raises(ValueError, match="share one hash"):
        checked_run(result, "functional")


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
    """The flood is refused in the harness, with the reason, before it is built; a correct
    answer with sets and dicts (a tuple, which LiveCodeBench reads as a list) passes."""
    floods = [functional(SENDS.format(reply=repr(FLOODS[kind]))) for kind in ("a set of ints", "a dict's keys")]
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
