"""scripts/check_mbpp_references.py: it lists exactly the MBPP tasks whose reference solution the
sandbox scores otherwise than a plain process, with both reasons."""

import json
import sys

from conftest import _load_script

ROW = {"text": "", "test_setup_code": "", "challenge_test_list": []}
TASKS = [  # MBPP's form: a tree built by test_setup_code passes; a test that passes a lambda cannot; a wrong
    # reference fails in both, so it is not listed
    {**ROW, "task_id": 11, "code": "class Node:\n    def __init__(self, data):\n        self.data = data\n"
                                  "        self.left = None\ndef value(node):\n    return node.left.data",
     "test_setup_code": "root = Node(1)\nroot.left = Node(2)", "test_list": ["assert value(root) == 2"] * 3},
    {**ROW, "task_id": 12, "code": "def apply(f, x):\n    return f(x)", "test_list": ["assert apply(lambda x: x + 1, 1) == 2"]},
    {**ROW, "task_id": 13, "code": "def wrong(x):\n    return x", "test_list": ["assert wrong(1) == 2"]},
]


def test_the_script_lists_the_tasks_the_sandbox_scores_otherwise(tmp_path, monkeypatch, capsys):
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in TASKS))
    monkeypatch.setattr(sys, "argv", ["check_mbpp_references.py", "--data", str(data), "--workers", "1"])
    _load_script("check_mbpp_references").main()
    out = capsys.readouterr().out
    assert "MBPP test: 3 reference solutions" in out and "1 pass; the same tests in a plain process: 2 pass" in out
    rows = [line for line in out.splitlines() if line.startswith("| 1")]
    why = "the test passes a value that cannot cross to the sandbox (a function is not a plain value)"
    assert rows == [f"| 12 | {why} | passes |"]
