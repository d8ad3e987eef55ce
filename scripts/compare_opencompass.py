"""How many graded replies the project's scorers and OpenCompass's agree with a person on.

    make compare-install    # once: OpenCompass 0.5.4 into .venv (scripts/install_opencompass.sh)
    HF_ALLOW_CODE_EVAL=1 .venv/bin/python scripts/compare_opencompass.py [tests/assets/replies.jsonl] [--cases]

Prints a Markdown table, per benchmark: the cases, how many the project's verdicts agree with the
person's, how many OpenCompass's do; with ``--cases``, every case where either differs. The code
cases execute the replies' programs, in the project's sandbox: HF_ALLOW_CODE_EVAL=1 says so.

OpenCompass's verdicts come from its own code, ``opencompass==0.5.4`` (installed by ``make
compare-install``; without it the script stops and names that command), on the dataset configs of
``opencompass/configs/datasets/`` that docs/evaluation.md names:

- GSM8K (``gsm8k_gen_1d7fe4``), SVAMP (``svamp_gen_fb25e4``), MATH (``math_gen_a58d9d``),
  OlympiadBench (``OlympiadBench_0shot_gen_be8b13``) and MMLU (``mmlu_gen_4d595a``): OpenCompass's
  evaluation task, ``OpenICLEvalTask``, scores each reply alone. The case's problem is written where
  and as that config's dataset loader reads it, so OpenCompass makes the gold (its loaders: SVAMP's
  ``str(int(Answer))``, MATH's last box of the solution; GSM8K's dataset postprocessor: the text
  after "#### "), the reply is the prediction, and the config's postprocessors and evaluator decide
  (``accuracy`` 100 or 0).
- CollegeMath: OpenCompass has no CollegeMath; its MATH config scores it, the CollegeMath answer
  written as the box of the solution its MATH loader reads.
- HumanEval, MBPP, LiveCodeBench: the program is what OpenCompass's code takes from the reply
  (the config's ``humaneval_postprocess_v2``, ``MBPPEvaluator._process_answer``, and
  ``extract_code_generation``, which ``LCBCodeGenerationEvaluator`` applies), and it runs in the
  project's sandbox, judged by the project's rules, as the project's own column is. OpenCompass's
  judging is not run: ``LCBCodeGenerationEvaluator`` loads LiveCodeBench from the hub when it is
  built (it cannot run offline), and ``HumanEvalEvaluator`` and ``MBPPEvaluator`` ``exec`` the
  programs in plain child processes of this one, outside any sandbox. So the code rows differ only
  by what each takes from the reply (docs/evaluation.md names the judging differences).

No OpenCompass rule is re-stated here.
"""

import argparse
import copy
import csv
import importlib
import json
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from entrodrop.tasks import code_settings, code_tasks, livecodebench
from entrodrop.tasks.graded_replies import agreement_table, documents, load, project_verdicts

REPO = Path(__file__).resolve().parent.parent

OPENCOMPASS_VERSION = "0.5.4"
INSTALL = "make compare-install"


def import_opencompass():
    """OpenCompass's evaluation task, or exit with one line naming the install command."""
    try:
        import datasets
        import opencompass
        from opencompass.tasks import OpenICLEvalTask
        from opencompass.utils import get_logger
    except ImportError as error:
        sys.exit(f"compare_opencompass.py runs OpenCompass {OPENCOMPASS_VERSION}'s own scorers, and it does not "
                 f"import here ({error}): install it with `{INSTALL}` (scripts/install_opencompass.sh)")
    if opencompass.__version__ != OPENCOMPASS_VERSION:
        print(f"compare_opencompass.py: OpenCompass {opencompass.__version__} is installed; docs/evaluation.md's "
              f"table is OpenCompass {OPENCOMPASS_VERSION}'s ({INSTALL})", file=sys.stderr)
    get_logger().setLevel(logging.WARNING)
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return OpenICLEvalTask


def config(module: str, name: str):
    """The dataset configs ``name`` of OpenCompass's ``opencompass/configs/datasets/<module>.py``."""
    return getattr(importlib.import_module(f"opencompass.configs.datasets.{module}"), name)


# ------------------------------------------------------------------ the scored benchmarks
# Each writer puts one problem where and as its config's dataset loader reads it, and returns the
# dataset config's ``path`` (and ``name``) for that file.


def write_gsm8k(folder: Path, doc: dict, dataset: dict) -> dict:
    """``GSM8KDataset``: ``<path>/{train,test}.jsonl``, lm-eval's gsm8k rows as they are."""
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps(doc) + "\n")
    return {"path": str(folder)}


def write_svamp(folder: Path, doc: dict, dataset: dict) -> dict:
    """``SVAMPDataset``: one JSON-lines file of Body, Question, Answer."""
    (folder / "svamp.jsonl").write_text(json.dumps(doc) + "\n")
    return {"path": str(folder / "svamp.jsonl")}


def write_math(folder: Path, doc: dict, dataset: dict) -> dict:
    """``MATHDataset``: ``<path>/math.json``, problems by id."""
    (folder / "math.json").write_text(json.dumps({"0": {"problem": doc["problem"], "solution": doc["solution"]}}))
    return {"path": str(folder)}


def write_college_math(folder: Path, doc: dict, dataset: dict) -> dict:
    """MATH's loader, the CollegeMath answer (without its ``$``) as the solution's box."""
    return write_math(folder, {"problem": doc["question"], "solution": f"\\boxed{{{doc['answer'].strip().strip('$')}}}"},
                      dataset)


def write_olympiadbench(folder: Path, doc: dict, dataset: dict) -> dict:
    """``OlympiadBenchDataset``: ``<path>/<name>.json``, a list of problems (``question_type``, which
    only the prompt reads, is not in the project's rows)."""
    (folder / f"{dataset['name']}.json").write_text(json.dumps([{"question_type": "Open-ended", **doc}]))
    return {"path": str(folder)}


def write_mmlu(folder: Path, doc: dict, dataset: dict) -> dict:
    """``MMLUDataset``: ``<path>/{dev,test}/<name>_{split}.csv``, rows of question, A-D, letter."""
    for split in ("dev", "test"):
        (folder / split).mkdir()
        with open(folder / split / f"{dataset['name']}_{split}.csv", "w", newline="") as file:
            csv.writer(file).writerow([doc["question"], *doc["choices"], "ABCD"[doc["answer"]]])
    return {"path": str(folder)}


# benchmark -> (config module, the dataset configs it defines, writer)
SCORED = {
    "gsm8k": ("gsm8k.gsm8k_gen_1d7fe4", "gsm8k_datasets", write_gsm8k),
    "svamp": ("SVAMP.svamp_gen_fb25e4", "svamp_datasets", write_svamp),
    "math": ("math.math_gen_a58d9d", "math_datasets", write_math),
    "college_math": ("math.math_gen_a58d9d", "math_datasets", write_college_math),
    "olympiadbench": ("OlympiadBench.OlympiadBench_0shot_gen_be8b13", "olympiadbench_datasets",
                      write_olympiadbench),
    "mmlu": ("mmlu.mmlu_gen_4d595a", "mmlu_datasets", write_mmlu),
}


def dataset_config(benchmark: str, doc: dict) -> dict:
    """The case's dataset config: MMLU's for its subject; OlympiadBench's first category (the five
    differ only in which file they read)."""
    module, name, _ = SCORED[benchmark]
    configs = config(module, name)
    return next((c for c in configs if benchmark == "mmlu" and c["name"] == doc.get("subject")), configs[0])


def oc_scored_verdict(task_class, benchmark: str, doc: dict, reply: str) -> bool:
    """OpenCompass's ``OpenICLEvalTask`` on one reply: its config's loader reads the problem, its
    postprocessors and evaluator score the reply; right when the accuracy is 100."""
    from mmengine.config import ConfigDict

    dataset = copy.deepcopy(dataset_config(benchmark, doc))
    with tempfile.TemporaryDirectory() as work:
        data = Path(work, "data")
        data.mkdir()
        dataset.update(SCORED[benchmark][2](data, doc, dataset))
        predictions = Path(work, "predictions", "replies")
        predictions.mkdir(parents=True)
        (predictions / f"{dataset['abbr']}.json").write_text(json.dumps({"0": {"prediction": reply}}))
        task_class(ConfigDict(models=[{"abbr": "replies"}], datasets=[[dataset]], work_dir=work)).run()
        result = json.loads(Path(work, "results", "replies", f"{dataset['abbr']}.json").read_text())
    if "accuracy" not in result:
        raise RuntimeError(f"OpenCompass's {benchmark} evaluator gave no accuracy: {result}")
    return result["accuracy"] == 100


# ------------------------------------------------------------------ code


def oc_programs(cases: list, docs: list) -> dict:
    """Index -> the program OpenCompass's code takes from each code case's reply."""
    from opencompass.datasets.livecodebench.extract_utils import extract_code_generation

    humaneval = dict(config("humaneval.humaneval_openai_sample_evals_gen_dcae0e", "humaneval_datasets")[0]["eval_cfg"]
                     ["pred_postprocessor"])
    humaneval_postprocess = humaneval.pop("type")
    mbpp = dict(config("mbpp.mbpp_gen_830460", "mbpp_datasets")[0]["eval_cfg"]["evaluator"])
    mbpp_evaluator = mbpp.pop("type")(**mbpp)
    programs = {}
    for i, case in enumerate(cases):
        if case["benchmark"] == "humaneval":  # HumanEvalEvaluator runs the prompt and the completion
            programs[i] = docs[i]["prompt"] + humaneval_postprocess(case["reply"], **humaneval)
        elif case["benchmark"] == "mbpp":
            programs[i] = mbpp_evaluator._process_answer(case["reply"])
        elif case["benchmark"] == "livecodebench":  # the evaluator's extractor_version 'v1'
            programs[i] = extract_code_generation(case["reply"])
    return programs


def oc_code_verdicts(cases: list, docs: list) -> dict:
    """Index -> verdict of OpenCompass's program for every code case, run in the project's sandbox."""
    programs = oc_programs(cases, docs)
    verdicts = {}
    humaneval = [i for i, c in enumerate(cases) if c["benchmark"] == "humaneval"]
    mbpp = [i for i, c in enumerate(cases) if c["benchmark"] == "mbpp"]
    runs = [(humaneval, [docs[i]["prompt"] + docs[i]["canonical_solution"] for i in humaneval],
             [docs[i]["test"] for i in humaneval], [f"check({docs[i]['entry_point']})" for i in humaneval]),
            (mbpp, [docs[i]["code"] for i in mbpp], [code_tasks.mbpp_tests(docs[i]) for i in mbpp],
             ["" for _ in mbpp])]
    for indices, references, tests, calls in runs:
        if indices:
            results = code_tasks.verdicts(code_tasks.jobs([programs[i] for i in indices], references, tests, calls))
            verdicts.update({i: r == code_tasks.PASS for i, r in zip(indices, results)})
    for i, case in enumerate(cases):
        if case["benchmark"] == "livecodebench":
            doc = docs[i]
            tests = livecodebench.decode_tests(doc["public_test_cases"]) + livecodebench.decode_tests(
                doc["private_test_cases"])
            func_name = json.loads(doc["metadata"] or "{}").get("func_name", "")
            verdicts[i] = livecodebench.run_tests(programs[i], tests, func_name)
    return verdicts


def opencompass_verdicts(cases: list, task_class) -> list:
    """OpenCompass's verdict on every case, from its own code."""
    docs = documents(cases)
    code = oc_code_verdicts(cases, docs)
    return [oc_scored_verdict(task_class, case["benchmark"], doc, case["reply"]) if case["benchmark"] in SCORED
            else code[i] for i, (case, doc) in enumerate(zip(cases, docs))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("replies", nargs="?", type=Path, default=REPO / "tests" / "assets" / "replies.jsonl")
    parser.add_argument("--cases", action="store_true", help="list every case where a scorer differs from the person")
    args = parser.parse_args()
    task_class = import_opencompass()
    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        sys.exit("the code cases execute the replies' programs (in the sandbox): run with HF_ALLOW_CODE_EVAL=1")
    # The consent, as this command line takes it, handed to the code tasks as a run hands them its config's.
    code_settings.use_sandbox(replace(code_settings.sandbox_settings(), allow_code=True))
    # OpenCompass's config still sets equations=True, which latex2sympy2 logs as deprecated at every parse.
    logging.getLogger("latex2sympy2_extended.math_normalization").setLevel(logging.ERROR)
    cases = load(args.replies)
    verdicts = {"project": project_verdicts(cases), "OpenCompass": opencompass_verdicts(cases, task_class)}
    print(agreement_table(cases, verdicts))
    if args.cases:
        print("\n| case | kind | person | project | OpenCompass |\n|---|---|---|---|---|")
        for i, case in enumerate(cases):
            if any(v[i] != case["verdict"] for v in verdicts.values()):
                print(f"| {case['id']} | {case['kind']} | {case['verdict']} | {verdicts['project'][i]} | "
                      f"{verdicts['OpenCompass'][i]} |")


if __name__ == "__main__":
    main()
