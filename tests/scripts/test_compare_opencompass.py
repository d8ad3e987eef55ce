"""scripts/compare_opencompass.py: OpenCompass's verdicts come from OpenCompass's own code, and
without OpenCompass the script stops with one line naming the install command.

OpenCompass is an optional install (``make compare-install``) that CI does not make: the test that
runs its code skips without it."""

import importlib.util
import sys

import pytest
from conftest import _load_script, run_script_main

OPENCOMPASS = importlib.util.find_spec("opencompass") is not None

# Cases of tests/assets/replies.jsonl -> OpenCompass 0.5.4's verdict, a right and a wrong reading per
# benchmark and its known disagreements with the person (docs/evaluation.md, "The hard cases").
EXPECTED = {
    "gsm8k-01": True, "gsm8k-16": False,  # "1,000" reads 000
    "svamp-01": True, "svamp-16": True,  # its loader truncates the gold 2.4 to 2
    "math-01": True, "math-04": False,  # display math without a box
    "college_math-02": True, "college_math-01": False,
    "olympiadbench-01": True, "olympiadbench-13": False,  # the Chinese cue is never looked for
    "mmlu-01": True, "mmlu-12": True, "mmlu-13": False,  # "Answer: c" reads as the A of "Answer"
    "humaneval-03": True, "humaneval-01": False,
    "mbpp-01": True, "mbpp-06": False,
    "livecodebench-01": True, "livecodebench-06": False,  # a fence left open: no code
}


def run_main(monkeypatch, capsys, *args):
    return run_script_main("compare_opencompass", args, monkeypatch, capsys)


def test_without_opencompass_the_script_names_the_install_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "opencompass", None)  # what an environment without it raises
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    status, out, err = run_main(monkeypatch, capsys, "--cases")
    assert isinstance(status, str) and "\n" not in status.strip(), status  # one line, no traceback
    assert "OpenCompass 0.5.4" in status and "make compare-install" in status, status
    assert out == "" and "Traceback" not in err


@pytest.mark.recipe
@pytest.mark.skipif(not OPENCOMPASS, reason="OpenCompass is not installed (`make compare-install`; CI does not)")
def test_opencompass_verdicts_come_from_its_own_code(monkeypatch):
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    script = _load_script("compare_opencompass")
    task_class = script.import_opencompass()
    assert task_class.__module__.startswith("opencompass.")
    cases = [c for c in script.load(script.REPO / "tests" / "assets" / "replies.jsonl") if c["id"] in EXPECTED]
    assert len(cases) == len(EXPECTED)
    verdicts = dict(zip([c["id"] for c in cases], script.opencompass_verdicts(cases, task_class)))
    assert verdicts == EXPECTED
