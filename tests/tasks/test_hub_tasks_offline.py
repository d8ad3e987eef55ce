"""The shipped lm-eval tasks for SVAMP, CollegeMath, OlympiadBench and LiveCodeBench v1.

Their data lives on the Hugging Face hub, which this machine cannot reach, so each task is run
end to end on a local file of a few problems written here in the dataset's own schema (a YAML
that includes the shipped one and points it at the file), by a stand-in model that answers some
problems right and some wrong. The answer checks and the code runner are tested directly.
"""

import ast
import base64
import json
import pickle
import zlib

import lm_eval
import pytest
import yaml
from conftest import REPO
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager

from entrodrop.eval.task_checks import (
    check_metrics,
    check_packages,
    check_tasks,
    runs_model_code,
    task_metrics,
)
from entrodrop.tasks.code_extract import called_function, code_in_reply, program
from entrodrop.tasks.livecodebench import (
    decode_tests,
    prompt,
    run_tests,
    sandbox,
    solution,
)
from entrodrop.tasks.math_answers import (
    boxed_answer,
    college_math_score,
    equivalent,
    olympiadbench_prompt,
    olympiadbench_score,
    split_top_level,
    svamp_score,
)

TASKS = REPO / "entrodrop" / "tasks"


def encode_private(tests: list) -> str:
    """LiveCodeBench's storage of private tests: base64(zlib(pickle(json text)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


SVAMP = [
    {"ID": "t1", "Body": "Jack had 8 pens and gave 3 of them to Mary.", "Question": "How many pens does Jack have now?",
     "Equation": "( 8.0 - 3.0 )", "Answer": 5.0, "Type": "Subtraction"},
    {"ID": "t2", "Body": "A farmer has 6 rows of 4 trees.", "Question": "How many trees does the farmer have?",
     "Equation": "( 6.0 * 4.0 )", "Answer": 24.0, "Type": "Multiplication"},
]
COLLEGE_MATH = [
    {"data_source": "college_math.test", "question_number": "1", "question": "Compute $\\int_0^1 x\\,dx$.",
     "answer": "$\\frac{1}{2}$", "license": "test", "data_topic": "college_math.calculus"},
    {"data_source": "college_math.test", "question_number": "2", "question": "Solve $2x + 6 = 0$ for $x$.",
     "answer": "$-3$", "license": "test", "data_topic": "college_math.algebra"},
]
GSM8K = [  # lm-eval's gsm8k fields; the answer's number follows "####"
    {"question": "Janet's ducks lay 16 eggs per day. She eats three and bakes with four. She sells the rest "
                 "for $2 each. How much does she make?", "answer": "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18"},
    {"question": "A store sold 250 shirts at $4 each. How much did it make?", "answer": "250 * 4 = 1000\n#### 1000"},
]
OLYMPIADBENCH = [
    {"id": 1, "subfield": "Algebra", "context": None, "question": "Find all real $x$ with $x^2 = 4$.",
     "solution": ["$x = \\pm 2$."], "final_answer": ["$-2, 2$"], "is_multiple_answer": True, "unit": None,
     "answer_type": "Numerical", "error": None},
    {"id": 2, "subfield": "Number Theory", "context": None, "question": "What is the remainder of $2^{10}$ mod 7?",
     "solution": ["$1024 = 7 \\cdot 146 + 2$."], "final_answer": ["$2$"], "is_multiple_answer": False,
     "unit": None, "answer_type": "Numerical", "error": None},
]
OLYMPIADBENCH_ZH = [  # a Chinese physics problem, answered within its tolerance
    {"id": 3, "subfield": "Mechanics", "context": None,
     "question": "质量为 $2 \\mathrm{~kg}$ 的物体受 $6 \\mathrm{~N}$ 的合力，求加速度。",
     "solution": ["$a = F / m = 3$"], "final_answer": ["$3$"], "is_multiple_answer": False,
     "unit": "$\\mathrm{~m/s^2}$", "answer_type": "Numerical", "error": "0.1", "language": "Chinese",
     "subject": "Physics"},
]
LIVECODEBENCH = [
    {"question_title": "Add two numbers", "question_content": "Read a and b and print a + b.", "platform": "atcoder",
     "question_id": "t1", "contest_id": "t", "contest_date": "2023-05-01T00:00:00", "starter_code": "",
     "difficulty": "easy", "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
     "private_test_cases": encode_private([{"input": "10 -4\n", "output": "6\n", "testtype": "stdin"}]),
     "metadata": "{}"},
    {"question_title": "Double", "question_content": "Return twice the number x.", "platform": "leetcode",
     "question_id": "t2", "contest_id": "t", "contest_date": "2023-05-02T00:00:00",
     "starter_code": "class Solution:\n    def double(self, x: int) -> int:\n        ",
     "difficulty": "easy", "public_test_cases": json.dumps([{"input": "3", "output": "6", "testtype": "functional"}]),
     "private_test_cases": encode_private([{"input": "-5", "output": "-10", "testtype": "functional"}]),
     "metadata": json.dumps({"func_name": "double"})},
]

# The stand-in model's answer to each problem: the first right, the second wrong.
ANSWERS = {
    "gave 3 of them": "Jack keeps 8 - 3 = 5 pens. The answer is 5.\n\n",
    "ducks lay": "She sells 9 eggs for $2 each.\n\n$$\\boxed{18}$$",  # lm-eval's gsm8k reads "$$" as the number
    "250 shirts": "250 * 4 = 100. The answer is 100.",
    "6 rows of 4": "6 + 4 = 10. The answer is 10.\n\n",
    "int_0^1": "The integral is x^2/2 from 0 to 1, so \\boxed{\\frac12}.",
    "2x + 6": "Subtract 6 and divide: \\boxed{3}.",
    "x^2 = 4": "Both signs work. So the final answer is \\boxed{-2, 2}.",
    "2^{10}": "It is 1024, so the final answer is \\boxed{4}.",
    "求加速度": "由牛顿第二定律，a = F/m ≈ 3.02。所以最终答案是\\boxed{3.02}。",
    "print a + b": "```python\na, b = map(int, input().split())\nprint(a + b)",
    "twice the number": "```python\nclass Solution:\n    def double(self, x: int) -> int:\n        return x + 2",
}


class CannedLM(LM):
    """Answers each generation request from ANSWERS by a phrase of its problem; records prompts."""

    def __init__(self):
        super().__init__()
        self.prompts = []

    def generate_until(self, requests):
        self.prompts += [r.args[0] for r in requests]
        return [next(a for key, a in ANSWERS.items() if key in r.args[0].split("Question:")[-1]) for r in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


LOCAL = {  # task -> (problems, the split it reads, overrides to read a local JSON-lines file, metric)
    "svamp": (SVAMP, "test", {"dataset_path": "json"}, "acc"),
    # lm-eval's 5 shots come from the hub's train split, which a local copy lacks
    "gsm8k_answer": (GSM8K, "test", {"dataset_path": "json", "dataset_name": None, "num_fewshot": 0,
                                     "training_split": None, "fewshot_split": None}, "acc"),
    "college_math": (COLLEGE_MATH, "test", {}, "acc"),
    "olympiadbench_oe_to_maths_en_comp": (OLYMPIADBENCH, "train", {"dataset_path": "json", "dataset_name": None},
                                          "acc"),
    "livecodebench_v1": (LIVECODEBENCH, "test", {}, "pass@1,sandbox"),
}
# Subsets run only within their group's local copy (which lists the local subsets instead).
SUBSETS = {"olympiadbench_oe_to_physics_zh_cee": (OLYMPIADBENCH_ZH, "train",
                                                  {"dataset_path": "json", "dataset_name": None}, "acc")}
LOCAL_GROUPS = {"olympiadbench": ["olympiadbench_oe_to_maths_en_comp", "olympiadbench_oe_to_physics_zh_cee"]}


@pytest.fixture(scope="module")
def local_tasks(tmp_path_factory):
    """lm-eval's TaskManager over the shipped tasks plus, for each, ``<task>_local``: a YAML that
    includes the shipped one and reads a local file instead of the hub; and for each group,
    ``<group>_local``: the shipped group over some of its subsets' local copies. Without lm-eval's
    own tasks, which none of these needs (the tests of lm-eval's names read ``shipped_tasks``)."""
    local = tmp_path_factory.mktemp("local_tasks")
    for task, (docs, split, overrides, _) in (LOCAL | SUBSETS).items():
        data = local / f"{task}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs))
        config = {"include": str(TASKS / f"{task}.yaml"), "task": f"{task}_local", **overrides,
                  "dataset_kwargs": {"data_files": {split: str(data)}}}
        (local / f"{task}_local.yaml").write_text(json.dumps(config))  # JSON is YAML
    for group, subsets in LOCAL_GROUPS.items():
        config = yaml.safe_load((TASKS / f"{group}.yaml").read_text())
        config.update(group=f"{group}_local", task=[f"{t}_local" for t in subsets])
        (local / f"{group}_local.yaml").write_text(json.dumps(config))
    return TaskManager(include_path=[str(TASKS), str(local)], include_defaults=False)


@pytest.mark.parametrize("task", LOCAL)
def test_shipped_task_runs_on_a_local_copy_of_its_data(task, local_tasks, monkeypatch, code_task_settings):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code_task_settings(allow_code=True)
    lm = CannedLM()
    out = lm_eval.simple_evaluate(model=lm, tasks=[f"{task}_local"], log_samples=False, confirm_run_unsafe_code=True,
                                  task_manager=local_tasks)
    result = out["results"][f"{task}_local"]
    metric = LOCAL[task][3] if "," in LOCAL[task][3] else f"{LOCAL[task][3]},none"
    assert result[metric] == 0.5, result
    assert len(lm.prompts) == 2
    if task == "svamp":  # four worked shots, then the problem
        assert lm.prompts[0].count("Let's think step by step") == 5 and lm.prompts[0].endswith("Answer:")


def test_olympiadbench_is_the_unweighted_mean_of_its_subsets(local_tasks, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = CannedLM()
    out = lm_eval.simple_evaluate(model=lm, tasks=["olympiadbench_local"], log_samples=False, task_manager=local_tasks)
    results = out["results"]
    assert results["olympiadbench_oe_to_maths_en_comp_local"]["acc,none"] == 0.5
    assert results["olympiadbench_oe_to_physics_zh_cee_local"]["acc,none"] == 1.0
    # As OpenCompass averages: each subset once (by size it would be 2/3); the key stays acc,none.
    assert results["olympiadbench_local"]["acc,none"] == 0.75
    chinese = next(p for p in lm.prompts if "求加速度" in p)
    assert chinese.startswith("以下是一道中国物理竞赛的解答题。") and "所以最终答案是\\boxed{答案}" in chinese
    shipped = yaml.safe_load((TASKS / "olympiadbench.yaml").read_text())["task"]
    assert [t.removeprefix("olympiadbench_oe_to_") for t in shipped] == [  # OpenCompass's five
        "maths_en_comp", "maths_zh_comp", "maths_zh_cee", "physics_en_comp", "physics_zh_cee"]
    assert set(shipped) <= set(local_tasks.all_tasks)


def test_every_shipped_task_is_registered(shipped_tasks):
    assert {"gsm8k_answer", "svamp", "college_math", "olympiadbench", "livecodebench_v1",
            "humaneval_likelihood", "humaneval_pass1", "humaneval_sandbox", "mbpp_sandbox"} <= set(shipped_tasks.all_tasks)


METRICS = {"svamp": "acc,none", "humaneval_likelihood": "logprob_per_char,none", "livecodebench_v1": "pass@1,sandbox"}


def test_task_settings_are_checked_at_start_up(shipped_tasks, local_tasks):
    groups = {"math": ["svamp", "svmp"], "code": ["humaneval_likelihood", "livecodebench_v1"]}
    problems = check_tasks(groups, "maths", shipped_tasks, False, METRICS)
    assert len(problems) == 3
    assert "'svmp' is not an lm-eval task" in problems[0]
    assert "target_group='maths' is not one of the groups ['math', 'code']" in problems[1]
    assert "['livecodebench_v1'] execute model-written code" in problems[2]
    assert check_tasks(groups | {"math": ["svamp"]}, "math", shipped_tasks, True, METRICS) == []
    assert runs_model_code(local_tasks, "livecodebench_v1_local")  # marked in the YAML it includes
    assert runs_model_code(shipped_tasks, "humaneval_infilling")  # a group of lm-eval's unsafe tasks
    assert not runs_model_code(shipped_tasks, "svamp") and not runs_model_code(shipped_tasks, "mmlu")
    # Code runs only in the sandbox: lm-eval's own code tasks are refused, the local copies of ours are not.
    sandboxed = {"code": ["humaneval_sandbox", "mbpp_sandbox", "livecodebench_v1_local", "humaneval_pass1"]}
    metrics = {"humaneval": "pass@1,create_test", **{t: "pass@1,sandbox" for t in sandboxed["code"]}}
    assert check_tasks(sandboxed, "code", local_tasks, True, metrics) == []
    assert check_tasks({"code": ["humaneval"]}, "code", shipped_tasks, True, metrics) == [
        "evaluation.lm_eval.tasks: ['humaneval'] run model-written code outside the sandbox (lm-eval's own runner forks "
        "the process that holds the model, unguarded): use humaneval_sandbox, mbpp_sandbox, livecodebench_v1 (or "
        "humaneval_pass1 offline) instead"]
    assert check_tasks({"general": ["ai2_arc"]}, "general", shipped_tasks, True, METRICS) == [
        "evaluation.lm_eval.tasks.general: 'ai2_arc' is an lm-eval tag; list its tasks instead"]


def test_each_task_names_a_metric_its_result_has(shipped_tasks):
    """The metric of every task is checked at start-up against the keys its YAML makes lm-eval
    report: a filter's name, a group's aggregate, a function's own name."""
    assert task_metrics(shipped_tasks, "gsm8k") == ["exact_match,strict-match", "exact_match,flexible-extract"]
    assert task_metrics(shipped_tasks, "minerva_math") == ["exact_match,none", "math_verify,none"]
    assert task_metrics(shipped_tasks, "mbpp") == ["pass_at_1,none"]
    assert "pass@1,create_test" in task_metrics(shipped_tasks, "humaneval")
    assert task_metrics(shipped_tasks, "olympiadbench") == ["acc,none"]  # a group of five subsets
    assert task_metrics(shipped_tasks, "hellaswag") == ["acc,none", "acc_norm,none"]
    groups = {"math": ["gsm8k", "minerva_math"], "general": ["hellaswag"]}
    assert check_metrics(groups, {"gsm8k": "exact_match,flexible-extract", "minerva_math": "math_verify,none",
                                  "hellaswag": "acc_norm,none", "unused": "acc,none"}, shipped_tasks) == []
    assert check_metrics(groups, {"gsm8k": "exact_match,none", "hellaswag": "acc,none"}, shipped_tasks) == [
        "evaluation.lm_eval.metrics.gsm8k='exact_match,none': gsm8k reports "
        "['exact_match,strict-match', 'exact_match,flexible-extract']",
        "evaluation.lm_eval.metrics: no metric for 'minerva_math', which reports ['exact_match,none', "
        "'math_verify,none']: add `minerva_math: \"<one of them>\"`"]


def test_a_benchmark_without_its_packages_fails_at_start_up_with_the_install_command(shipped_tasks, monkeypatch):
    import entrodrop.eval.task_checks as checks

    installed = {"sympy": "1.14.0", "math_verify": "0.9.0", "antlr4": "4.13.2", "langdetect": None,
                 "immutabledict": "4.2.0", "nltk": "3.9.1"}
    monkeypatch.setattr(checks, "installed_version", installed.get)
    assert check_packages(shipped_tasks, ["gsm8k", "minerva_math", "ifeval", "leaderboard_ifeval"]) == [
        "evaluation.lm_eval.tasks: 'minerva_math' needs antlr4-python3-runtime 4.11.* (version 4.13.2 is installed): "
        "pip install -e '.[benchmarks]'",
        "evaluation.lm_eval.tasks: 'ifeval' needs langdetect (not installed): pip install -e '.[benchmarks]'",
        "evaluation.lm_eval.tasks: 'leaderboard_ifeval' needs langdetect (not installed): pip install -e '.[benchmarks]'"]
    assert check_packages(shipped_tasks, ["minerva_math_algebra"])  # a member alone needs them too
    monkeypatch.setattr(checks, "installed_version", {**installed, "antlr4": "4.11.0", "langdetect": "1.0.9"}.get)
    assert check_packages(shipped_tasks, ["minerva_math", "ifeval"]) == []


def test_math_answer_checks():
    assert svamp_score({"Answer": 1200.0}, ["So 1,000 + 200 = 1,200. The answer is 1200.\n\nQuestion: 7"])["acc"] == 1
    assert svamp_score({"Answer": 5.0}, ["I do not know."])["acc"] == 0
    assert boxed_answer("a \\boxed{1} then \\boxed{\\frac{2}{3}}") == "\\frac{2}{3}"
    assert boxed_answer("no box") is None
    assert equivalent("$\\frac{1}{2}$", "0.5") and equivalent("\\frac12", "\\dfrac{1}{2}")
    assert equivalent("50", "50\\%") and not equivalent("x+1", "x-1") and not equivalent("1", None)
    assert split_top_level("1, (2, 3), \\{4,5\\}") == ["1", "(2, 3)", "\\{4,5\\}"]
    assert college_math_score({"answer": "$-3$"}, ["so \\boxed{-3}"])["acc"] == 1
    multiple = {"final_answer": ["$-2, 2$"], "is_multiple_answer": True, "error": None}
    assert olympiadbench_score(multiple, ["\\boxed{-2, 2}"])["acc"] == 1
    assert olympiadbench_score(multiple, ["\\boxed{2, -2}"])["acc"] == 1  # any order, as OpenCompass's judge
    assert olympiadbench_score(multiple, ["\\boxed{2}"])["acc"] == 0
    text = olympiadbench_prompt({**OLYMPIADBENCH[0], "unit": "cm", "answer_type": "Numerical,Interval"})
    assert "a numerical value and an interval" in text and "\\boxed{answers separated by commas}" in text
    assert "(cm) after the box" in text and text.endswith("Find all real $x$ with $x^2 = 4$.\n\nSolution:")
    tolerant = {"final_answer": ["$3.14$"], "is_multiple_answer": False, "error": "0.01"}
    assert olympiadbench_score(tolerant, ["\\boxed{3.141}"])["acc"] == 1
    assert olympiadbench_score(tolerant, ["\\boxed{3.2}"])["acc"] == 0
    year = {"final_answer": ["$2024$"], "is_multiple_answer": False, "error": "0.01"}  # the tolerance is absolute
    assert olympiadbench_score(year, ["\\boxed{2024}"])["acc"] == 1
    assert olympiadbench_score(year, ["\\boxed{2004}"])["acc"] == 0
    assert boxed_answer("so \\boxed 7") == "7" and boxed_answer("\\boxed{unclosed") is None


def test_livecodebench_prompt_extraction_and_test_decoding():
    stdin, functional = LIVECODEBENCH
    assert "stdin" in prompt(stdin) and "class Solution" in prompt(functional)
    assert prompt(stdin).endswith("### Answer: (use the provided format with backticks)\n\n")
    assert solution("```python\nprint(1)\n```\nmore text", stdin) == "print(1)"
    assert solution("```python\nprint(1)", stdin) == "print(1)"  # a fence cut by the token limit
    assert solution("print(1)\n", stdin) == "print(1)"
    assert solution("```\nprint(1)\n```", stdin) == "print(1)"  # a fence without a language
    # A method body continues the starter code; a whole class is the program.
    assert solution("```python\nreturn x * 2\n```", functional) == (
        "class Solution:\n    def double(self, x: int) -> int:\n        return x * 2\n")
    assert solution("Sure:\n```python\nclass Solution:\n    def double(self, x):\n        return 2 * x\n```\n"
                    "print(Solution().double(3))", functional) == (
        "class Solution:\n    def double(self, x):\n        return 2 * x\n")
    assert decode_tests(stdin["private_test_cases"]) == [{"input": "10 -4\n", "output": "6\n", "testtype": "stdin"}]
    assert decode_tests(stdin["public_test_cases"])[0]["output"] == "3\n"


@pytest.mark.slow
def test_livecodebench_runner_passes_right_code_and_fails_wrong_slow_or_crashing_code():
    stdin = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"},
             {"input": "0.5 0.25\n", "output": "0.750\n", "testtype": "stdin"}]
    assert run_tests("a, b = map(float, input().split())\nprint(a + b)", stdin, "")  # 0.75 == 0.750 as numbers
    assert not run_tests("print(5)", stdin, "")
    assert not run_tests("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin, "")  # crashes on 0.5
    assert not run_tests("while True: pass", stdin[:1], "", timeout=0.5)
    functional = [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]
    assert run_tests("class Solution:\n    def f(self, xs, y):\n        return xs + [y]", functional, "f")
    assert run_tests("class Solution:\n    def f(self, xs, y):\n        return (*xs, y)", functional, "f")
    assert not run_tests("class Solution:\n    def f(self, xs, y):\n        return xs", functional, "f")
    # What the solution prints is not the verdict: chatter passes, a forged verdict does not.
    chatty = "import sys\nclass Solution:\n    def f(self, xs, y):\n        sys.stdout.write('dbg')\n        return xs + [y]"
    assert run_tests(chatty, functional, "f")
    forged = "import json, os\nprint(json.dumps({'passed': True}), flush=True)\nos._exit(0)"
    assert not run_tests(forged, stdin, "")


def test_livecodebench_refuses_to_run_code_unless_allowed(monkeypatch, code_task_settings):
    code_task_settings(allow_code=False)
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")  # Hugging Face's code_eval's variable allows nothing here
    with pytest.raises(RuntimeError, match="allow_code_execution"):
        sandbox([["print(3)"]], [LIVECODEBENCH[0]])


HUMANEVAL_PROMPT = ('import re\n\n\ndef words(text: str) -> list:\n    """The words of text."""\n'
                    '    return re.findall(r"\\w+", text)\n\n\n'
                    'def count_words(text: str) -> int:\n    """How many words text has.\n    >>> count_words("a b")\n'
                    '    2\n    """\n')


@pytest.mark.parametrize("reply", [
    "    return len(words(text))\n",  # a base model's continuation
    "    return len(words(text))\n\n\ndef check(candidate):\n    assert candidate('') == 0\n",  # ... and its own tests
    "```python\nreturn len(words(text))\n```",  # a body in a fence, its indentation lost
    "Here you go:\n\n```python\ndef count_words(text: str) -> int:\n    return len(words(text))\n```\n"
    "It reuses `words`.",
    "```python\nprint(count_words('a b'))\n```\nThe function:\n```python\ndef count_words(text):\n"
    "    return len(re.findall(r'\\w+', text))\n```",  # an example block first, then the function
    "def count_words(text):\n    return len(words(text))\n\nassert count_words('a b') == 3  # a wrong example\n"
    "print(count_words('x'))",
    "The function is:\ndef count_words(text):\n    return len(words(text))\nThat is all.",
    "```python\ndef count_words(text: str) -> int:\n    return len(words(text))\n",  # a fence cut by the token limit
])
def test_the_program_is_the_one_a_person_reads_in_the_reply(reply):
    code = program(reply, HUMANEVAL_PROMPT, "count_words")
    namespace = {}
    exec(compile(code, "<program>", "exec"), namespace)  # the project's own strings, not model output
    assert namespace["count_words"]("one two three") == 3
    assert code.startswith(HUMANEVAL_PROMPT.rstrip())  # its import and helper kept
    assert not any(isinstance(node, ast.Assert) for node in ast.parse(code).body)  # examples dropped


def test_a_tab_indented_body_is_measured_by_its_leading_tab_alone():
    """A tab inside the line must not count as indentation: ``\tx\t= 1`` is one level deep, so
    under a method (two levels) it is re-indented, not appended as the starter code's own text."""
    starter = "class Solution:\n    def f(self, x):\n        "
    assert program("\tx\t= 1\n\treturn x", starter, "f") == (
        "class Solution:\n    def f(self, x):\n        x\t= 1\n        return x\n")


def test_code_is_found_between_markers_in_quotes_and_after_prose():
    code = "def square(x):\n    return x * x"
    assert code_in_reply(f"[BEGIN]\n '{code}' \n[DONE]") == code  # OpenCompass's MBPP shots quote the code
    assert code_in_reply(f"[BEGIN]\n{code}\n") == code
    assert code_in_reply(f"'{code}'") == code
    assert code_in_reply(code.replace("square", "sq\\_uare")) == code.replace("square", "sq_uare")  # Markdown's \_
    assert code_in_reply(f"You can square it like this:\n{code}\nThis returns x squared.") == code
    draft = "<think>```python\ndef square(x):\n    return x\n```</think>"  # a reasoning model's draft
    assert code_in_reply(draft + "```python\n" + code + "\n```") == code
    future = "from __future__ import annotations\n"  # it must come first: the prompt is left out
    assert program(future + code, "def square(x):\n    '''x * x'''\n", "square") == future + code + "\n"
    assert called_function("assert math.isclose(area(2), 6)", "import math\ndef area(r):\n    return 3 * r") == "area"
    assert program("No code here, sorry.", "", "square") == "No code here, sorry."  # kept: it then fails its tests


def until(task: str) -> list:
    return yaml.safe_load((TASKS / f"{task}.yaml").read_text().replace("!function", ""))["generation_kwargs"]["until"]


def cut(reply: str, stops: list) -> str:
    """The reply as generation returns it: up to its first stop string."""
    for stop in stops:
        reply = reply.split(stop)[0]
    return reply


@pytest.mark.parametrize("task", ["humaneval_sandbox", "mbpp_sandbox", "livecodebench_v1"])
@pytest.mark.parametrize("fence", ["```python", "```"])
def test_code_task_stops_leave_a_fenced_chat_reply_whole(task, fence):
    reply = (f"Here is my solution.\n\n{fence}\n# Count with a loop.\nclass Counter:\n    pass\n\n\ndef f(xs):\n"
             f"    if not xs:\n        return 0\n    return len(xs)\n```\n\nExample:\n{fence}\nprint(f([1, 2]))\n```")
    code = code_in_reply(cut(reply, until(task)), "f")
    assert "return len(xs)" in code and "class Counter" in code
