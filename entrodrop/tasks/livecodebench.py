"""LiveCodeBench v1 code generation as an lm-eval task: prompt, code extraction, pass@1.

The protocol is LiveCodeBench's own: the problem statement, then either the starter code to
complete (LeetCode, ``functional`` tests: call ``Solution().<func_name>(*args)``, one JSON
argument per input line) or an instruction to read stdin and write stdout (AtCoder and
Codeforces, ``stdin`` tests: compare output lines, tokens as exact decimals when they differ as
text; no other tolerance, LiveCodeBench's rule). A problem passes when all its public and private
tests pass. The generated code runs in the sandbox (``entrodrop.sandbox``), only when the run
allows code execution, and the outputs are compared outside it.
"""

import base64
import json
import pickle
import zlib
from dataclasses import replace
from typing import List

from entrodrop.sandbox.code_runner import (
    passed,
    run,
    run_all,
    same_stdout,
    same_value,
)
from entrodrop.sandbox.sandbox_child import encode
from entrodrop.tasks.code_extract import program
from entrodrop.tasks.code_settings import allowed, sandbox_settings
from entrodrop.tasks.code_tasks import FAIL, PASS, SKIPPED, first_rank

TEST_TIMEOUT = 6.0  # seconds per test, LiveCodeBench's own limit


def prompt(doc: dict) -> str:
    """The problem, the answer format (starter code or stdin/stdout), then the answer header."""
    if doc["starter_code"].strip():
        answer_format = ("### Format: Complete the starter code below; write your solution between the "
                         f"delimiters.\n```python\n{doc['starter_code'].rstrip()}\n```\n\n")
    else:
        answer_format = ("### Format: Read the input from stdin, solve the problem and write the answer to "
                         "stdout (do not hard-code the sample inputs). Write your solution between the "
                         "delimiters.\n```python\n# YOUR CODE HERE\n```\n\n")
    return (f"### Question:\n{doc['question_content'].strip()}\n\n{answer_format}"
            "### Answer: (use the provided format with backticks)\n\n")


def solution(completion: str, doc: dict) -> str:
    """The program of a reply (``code_extract.program``): for a functional problem, its
    ``func_name`` is the entry point and a body continues its starter code; a stdin program is
    kept whole. The closing fence need not be there (a reply cut by its token limit)."""
    func_name = json.loads(doc["metadata"] or "{}").get("func_name", "")
    if func_name and doc["starter_code"].strip():
        return program(completion, doc["starter_code"], func_name)
    return program(completion)


def decode_tests(encoded: str) -> list:
    """Test cases stored as JSON text, or (the private tests) as base64 of zlib of a pickled
    JSON string."""
    try:
        return json.loads(encoded)
    except json.JSONDecodeError:
        return json.loads(pickle.loads(zlib.decompress(base64.b64decode(encoded.encode()))))


def job_and_expected(code: str, tests: list, func_name: str):
    """The sandbox job of one problem's tests, their expected outputs, and how to compare them."""
    if any(t.get("testtype") == "functional" for t in tests):
        inputs = [[json.loads(line) for line in t["input"].split("\n") if line.strip()] for t in tests]
        job = {"kind": "functional", "code": code, "func_name": func_name, "inputs": inputs}
        return job, [encode(json.loads(t["output"])) for t in tests], same_value
    return {"kind": "stdin", "code": code, "inputs": [t["input"] for t in tests]}, [t["output"] for t in tests], same_stdout


def run_tests(code: str, tests: list, func_name: str, timeout: float = TEST_TIMEOUT) -> bool:
    """True when ``code`` passes every test, run in the sandbox (``entrodrop.sandbox``): the
    child reports its outputs, and they are compared here, where the program cannot reach."""
    job, expected, compare = job_and_expected(code, tests, func_name)
    return passed(run(job, replace(sandbox_settings().limits, timeout_s=timeout)), expected, compare)


def sandbox(resps: List[List[str]], docs: List[dict]) -> List[str]:
    """lm-eval's filter: every greedy completion's code run on all its problem's public and
    private tests, ``evaluation.lm_eval.sandbox.workers`` at a time, each response replaced by its verdict."""
    allowed()
    if not first_rank():
        return [SKIPPED for _ in docs]
    problems = [job_and_expected(solution(r[0], d), decode_tests(d["public_test_cases"])
                                 + decode_tests(d["private_test_cases"]),
                                 json.loads(d["metadata"] or "{}").get("func_name", "")) for r, d in zip(resps, docs)]
    settings = sandbox_settings()
    runs = run_all([job for job, _, _ in problems], settings.for_task(TEST_TIMEOUT), settings.workers)
    return [PASS if passed(result, expected, compare) else FAIL for result, (_, expected, compare) in zip(runs, problems)]
