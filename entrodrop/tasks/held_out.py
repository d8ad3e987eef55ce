"""A demo's held-out target text as a local lm-eval task (``demo_target_held_out``): the blocks
of the target domain that ``scripts/demo.py`` holds out of training, each scored whole.

HumanEval's likelihood only falls while a model specializes on another domain, so it cannot
show the best point of a continual pre-training run; the held-out part of the target domain
can improve, and then worsen once the run overfits.
"""

import json
from pathlib import Path

import datasets


def held_out_text(path: str, **kwargs) -> datasets.DatasetDict:
    """The records of the JSON-lines file ``path`` (one ``{"text": ...}`` a line) as a ``test``
    split, in file order. ``kwargs``: the task's metadata, which lm-eval passes along too.

    Raises:
        FileNotFoundError: ``path`` does not exist (the demo's corpora stage writes it).
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no held-out target text; scripts/demo.py writes it (its corpora stage)")
    records = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list([{"text": r["text"]} for r in records])})


def logprob_per_char(doc: dict, results: list) -> dict:
    """The text's log-likelihood (lm-eval's rolling windows: every token scored once, the first
    after the prefix token) per character: higher is better, comparable across tokenizers, the
    unit of ``humaneval_likelihood``."""
    (logprob,) = results
    return {"logprob_per_char": logprob / max(len(doc["text"]), 1)}
