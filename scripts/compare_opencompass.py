"""How many graded replies the project's scorers and OpenCompass's agree with a person on.

    HF_ALLOW_CODE_EVAL=1 .venv/bin/python scripts/compare_opencompass.py [tests/data/replies.jsonl] [--cases]

Prints a Markdown table, per benchmark: the cases, how many the project's verdicts agree with the
person's, how many OpenCompass's do; with ``--cases``, every case where either differs. The code
cases execute the replies' programs, in the project's sandbox: HF_ALLOW_CODE_EVAL=1 says so.

OpenCompass is not installed here. Its scoring rules, at commit
a5acc4bba3b658f151617a3b393602110fb7a740 of open-compass/opencompass, are RE-STATED below in this
project's own code, from reading that source (``opencompass/datasets/{gsm8k,math,OlympiadBench,
humaneval,mbpp}.py``, ``opencompass/evaluator/math_evaluator.py``,
``opencompass/datasets/livecodebench/extract_utils.py``, ``opencompass/utils/text_postprocessors.py``):

- GSM8K, SVAMP: ``gsm8k_postprocess`` (cut at "Question:", the last ``-?\\d+\\.\\d+|-?\\d+``) and
  ``Gsm8kEvaluator`` (equal strings, or ``|float(pred) - int(gold)| < 1e-6``); SVAMP's gold is
  ``str(int(Answer))``, GSM8K's the text after "#### " without commas;
- MATH, CollegeMath (OpenCompass has no CollegeMath; its MATH scorer): ``MATHVerifyEvaluator``,
  the gold ``$<last box of the solution>$`` parsed with LaTeX and expression configs, the reply
  with LaTeX only (boxes first, no anchorless fallback, units and equations normalised);
- OlympiadBench: ``olympiadbench_postprocess_v2`` (the rest of the line after the last "So the
  final answer is", else the whole reply) and ``MathJudger.judge`` at precision 1e-8;
- HumanEval: ``humaneval_postprocess_v2`` (the first closed fenced block, else the reply, then
  ``lstrip``), appended to the prompt;
- MBPP: ``MBPPEvaluator._process_answer`` ([BEGIN]/[DONE], quotes and fences, ``\\_``);
- LiveCodeBench: ``extract_code_generation`` (the lines between the first two lines holding
  a fence; fewer than two: no code);
- MMLU: ``first_option_postprocess(options='ABCD')`` (``choices.first_option``), exact match.

For the code benchmarks only the extraction is re-stated: every program (the project's and
OpenCompass's) runs in the project's sandbox and is judged as the project judges it, so the code
columns differ by what each takes from the reply.
"""

import argparse
import json
import logging
import math
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from entrodrop.tasks import code_tasks, livecodebench  # noqa: E402
from entrodrop.tasks.choices import first_option  # noqa: E402
from entrodrop.tasks.math_answers import boxed_answer  # noqa: E402
from entrodrop.tasks.replies import agreement_table, documents, load, project_verdicts  # noqa: E402

# ------------------------------------------------------------------ GSM8K and SVAMP


def oc_last_number(reply: str) -> str:
    """``gsm8k_postprocess``: the last integer or decimal before any "Question:", else "NULL"."""
    found = re.findall(r"-?\d+\.\d+|-?\d+", reply.split("Question:")[0])
    return found[-1] if found else "NULL"


def oc_number_equal(predicted: str, gold: str) -> bool:
    """``Gsm8kEvaluator.is_equal``."""
    try:
        return predicted == gold or abs(float(predicted) - int(gold)) < 1e-6
    except ValueError:
        return False


# ------------------------------------------------------------------ MATH and CollegeMath


def oc_math_verify(reply: str, gold: str) -> bool:
    """``MATHVerifyEvaluator``: ``gold`` in ``$...$`` against the reply's LaTeX, boxes first; an
    unparseable gold counts as wrong (OpenCompass skips it but keeps it in the denominator)."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_parsed = parse(f"${gold}$", [LatexExtractionConfig(), ExprExtractionConfig()], extraction_mode="first_match")
    if not gold_parsed:
        return False
    normalization = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, equations=True,
                                        boxed="all", units=True)
    answer = parse(reply, [LatexExtractionConfig(normalization_config=normalization, boxed_match_priority=0,
                                                 try_extract_without_anchor=False)], extraction_mode="first_match")
    return bool(verify(answer, gold_parsed))  # OpenCompass passes the reply's parse first


# ------------------------------------------------------------------ OlympiadBench


def oc_olympiad_tail(reply: str) -> str:
    """``olympiadbench_postprocess_v2`` as configured (English cue only): the rest of the line after
    the last "So the final answer is", stripped, else the whole reply."""
    found = re.findall(r"So the final answer is (.*)", reply)
    return found[-1].strip() if found else reply


def oc_boxes_or_formulas(text: str) -> str:
    """``MathJudger.preprocess``'s extraction: every ``\\boxed{}`` joined with commas (a box that
    never closes raises), else the ``$...$`` formulas of the last line, else the text."""
    found = []
    for match in re.finditer(r"\\boxed\{", text):
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if depth:
            raise ValueError("unbalanced box")
        found.append(text[match.end():end - 1])
    if not found:
        found = re.findall(r"\$(.*?)\$", text.strip().split("\n")[-1])
    return ",".join(found) + "," if found else text


OC_SYMBOLS = {"\\left": "", "\\right": "", "∶": ":", "，": ",", "$": "", "\\approx": "=", "\\simeq": "=",
              "\\sim": "=", "^\\prime": "'", "^{\\prime}": "'", "^\\circ": "", "%": ""}


def oc_clean(text: str) -> str:
    """``MathJudger.preprocess``'s clean-up: after ``\\in ``, symbols replaced, edges stripped."""
    text = text.split("\\in ")[1] if "\\in " in text else text
    for old, new in OC_SYMBOLS.items():
        text = text.replace(old, new)
    text = text.strip("\n$,.:;^_=+`!@#$%^&*~，。")
    return re.sub(r"\\(?:mathrm|mathbf)\{~?([^}]*)\}", r"\1", text)


def oc_split(text: str) -> list:
    """Top-level comma split (only ``()`` and ``[]`` nest), each ``\\pm`` as a ``+`` and a ``-`` item."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += 1 if char in "([" else -1 if char in ")]" else 0
        if char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if start < len(text):
        items.append(text[start:].strip())
    return [i.replace("\\pm", s) for i in items for s in (("+", "-") if "\\pm" in i else ("",))]


def oc_sympy(latex: str):
    from sympy import sympify
    from sympy.parsing.latex import parse_latex

    return sympify(parse_latex(latex))


def oc_expression_equal(a: str, b: str, precision: float) -> bool:
    """Right-hand sides parsed by sympy: numbers within ``precision``, expressions whose
    difference simplifies below 1e-3."""
    import sympy

    x, y = (oc_sympy(e.split("=")[1].strip() if "=" in e else e.strip()) for e in (a, b))
    if x == y:
        return True
    x, y = (e.subs(oc_sympy("\\pi"), math.pi) for e in (x, y))
    if x.has(sympy.Symbol) != y.has(sympy.Symbol):
        return False
    if not x.has(sympy.Symbol):
        return abs(x.evalf() - y.evalf()) <= precision * 1.01
    return abs(sympy.simplify(x - y).evalf()) < 1e-3


def oc_equation_equal(a: str, b: str) -> bool:
    """Equations equal when (lhs - rhs) of one over the other's is a non-zero integer."""
    import sympy

    def moved(equation):
        lhs, rhs = equation.split("=")
        return sympy.simplify(oc_sympy(lhs) - oc_sympy(rhs))

    x, y = moved(a), moved(b)
    return any(r.is_Integer and r != 0 for r in (sympy.simplify(x / y), sympy.simplify(y / x)))


def oc_interval_equal(a: str, b: str, precision: float) -> bool:
    if a == b:
        return True
    left, right = a.split("\\cup"), b.split("\\cup")
    if len(left) != len(right):
        return False
    for x, y in zip(left, right):
        if x[0] != y[0] or x[-1] != y[-1]:
            return False
        if not all(oc_expression_equal(p, q, precision)
                   for p, q in zip(x.strip("[]()").split(","), y.strip("[]()").split(","))):
            return False
    return True


def oc_item_equal(a: str, b: str, precision: float = 1e-8) -> bool:
    """``MathJudger.is_equal``: equal text; intervals; numbers (also x100 and /100); expressions;
    equations - each tried in turn, a failure to parse moving on."""
    if a == b and a:
        return True
    if a.startswith(("(", "[")) and a.endswith((")", "]")) and b.startswith(("(", "[")) and b.endswith((")", "]")):
        try:
            if oc_interval_equal(a, b, precision):
                return True
        except Exception:  # noqa: BLE001 - OpenCompass returns False on any failure here
            return False
    checks = [lambda: any(abs(g - float(b)) <= precision * 1.01 for g in (float(a) / 100, float(a), float(a) * 100)),
              lambda: oc_expression_equal(a, b, precision) and not ("=" in a and "=" in b),
              lambda: oc_equation_equal(a, b)]
    for check in checks:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001 - an unparseable side is not equal, as there
            pass
    return False


def oc_olympiad_judge(reply: str, gold: str) -> bool:
    """``OlympiadBenchEvaluator(version='v2')`` on one reply: the reply's answers and the gold's
    pair up one to one."""
    try:
        predicted = oc_clean(oc_boxes_or_formulas(oc_olympiad_tail(reply)))
        expected = oc_clean(oc_boxes_or_formulas(gold))
    except ValueError:
        return False
    if predicted == expected:
        return True
    left = oc_split(re.sub(r"[\u4e00-\u9fff]+", "", predicted))
    right = oc_split(re.sub(r"[\u4e00-\u9fff]+", "", expected))
    if len(left) != len(right):
        return False
    for item in list(left):
        match = next((other for other in right if oc_item_equal(item, other)), None)
        if match is None:
            return False
        right.remove(match)
    return True


# ------------------------------------------------------------------ code


def oc_humaneval_code(reply: str) -> str:
    """``humaneval_postprocess_v2``: the first closed fenced block, else the reply; left-stripped."""
    blocks = re.findall(r"```\w*\n(.*?)```", reply, re.DOTALL)
    return (blocks[0] if blocks else reply).lstrip()


OC_MBPP_PATTERNS = [rf"{begin}\s*{quote}(.*){close}\s*{done}"
                    for quote, close in (("'", "'"), ("'", ""), ("", ""))
                    for begin, done in ((r"\[BEGIN\]", r"\[DONE\]"), ("BEGIN", r"\[DONE\]"), (r"\[BEGIN\]", "DONE"),
                                        ("BEGIN", "DONE"))] + [
    r"```python\s*(.*)\s*```", r"```\s*(.*)\s*```", r"```python\s*(.*)\s*$", r"```\s*(.*)\s*$", r"(.*)\s*```.*",
    r"\[BEGIN\]\s*'(.*)", r"\[BEGIN\](.*)", r"'(.*)'\s*\[DONE\]"]


def oc_mbpp_code(reply: str) -> str:
    """``MBPPEvaluator._process_answer``: the first pattern's capture, then cut at a fence and at
    ``'?\\s*[?DONE]?``, ``\\_`` unescaped, stripped."""
    for pattern in OC_MBPP_PATTERNS:
        match = re.search(pattern, reply, re.DOTALL)
        if match:
            reply = match.group(1)
            break
    reply = re.split(r"'?\s*\[?DONE\]?", reply.split("```")[0])[0]
    return reply.replace("\\_", "_").strip()


def oc_livecodebench_code(reply: str) -> str:
    """``extract_code_generation`` (chat): the lines between the first two that hold a fence."""
    lines = reply.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    return "\n".join(lines[fences[0] + 1:fences[1]]) if len(fences) >= 2 else ""


def oc_code_verdicts(cases: list, docs: list) -> dict:
    """Index -> verdict of OpenCompass's program for every code case, run in the project's sandbox."""
    verdicts = {}
    humaneval = [i for i, c in enumerate(cases) if c["benchmark"] == "humaneval"]
    mbpp = [i for i, c in enumerate(cases) if c["benchmark"] == "mbpp"]
    runs = [(humaneval, [docs[i]["prompt"] + oc_humaneval_code(cases[i]["reply"]) for i in humaneval],
             [docs[i]["prompt"] + docs[i]["canonical_solution"] for i in humaneval],
             [docs[i]["test"] for i in humaneval], [f"check({docs[i]['entry_point']})" for i in humaneval]),
            (mbpp, [oc_mbpp_code(cases[i]["reply"]) for i in mbpp], [docs[i]["code"] for i in mbpp],
             ["\n".join(docs[i]["test_list"]) for i in mbpp], ["" for _ in mbpp])]
    for indices, programs, references, tests, calls in runs:
        if indices:
            results = code_tasks.verdicts(programs, references, tests, calls)
            verdicts.update({i: r == code_tasks.PASS for i, r in zip(indices, results)})
    for i, case in enumerate(cases):
        if case["benchmark"] == "livecodebench":
            doc = docs[i]
            tests = livecodebench.decode_tests(doc["public_test_cases"]) + livecodebench.decode_tests(
                doc["private_test_cases"])
            func_name = json.loads(doc["metadata"] or "{}").get("func_name", "")
            verdicts[i] = livecodebench.run_tests(oc_livecodebench_code(case["reply"]), tests, func_name)
    return verdicts


def opencompass_verdicts(cases: list) -> list:
    """OpenCompass's verdict on every case, by the rules re-stated above."""
    docs = documents(cases)
    code = oc_code_verdicts(cases, docs)
    verdicts = []
    for i, (case, doc) in enumerate(zip(cases, docs)):
        reply, benchmark = case["reply"], case["benchmark"]
        if benchmark == "gsm8k":
            verdict = oc_number_equal(oc_last_number(reply), doc["answer"].split("#### ")[-1].replace(",", ""))
        elif benchmark == "svamp":
            verdict = oc_number_equal(oc_last_number(reply), str(int(doc["Answer"])))
        elif benchmark == "math":
            verdict = oc_math_verify(reply, boxed_answer(doc["solution"]))
        elif benchmark == "college_math":
            verdict = oc_math_verify(reply, doc["answer"].strip().strip("$"))
        elif benchmark == "olympiadbench":
            verdict = oc_olympiad_judge(reply, doc["final_answer"][0])
        elif benchmark == "mmlu":
            verdict = first_option(reply, "ABCD") == "ABCD"[doc["answer"]]
        else:
            verdict = code[i]
        verdicts.append(verdict)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("replies", nargs="?", type=Path, default=REPO / "tests" / "data" / "replies.jsonl")
    parser.add_argument("--cases", action="store_true", help="list every case where a scorer differs from the person")
    args = parser.parse_args()
    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        sys.exit("the code cases execute the replies' programs (in the sandbox): run with HF_ALLOW_CODE_EVAL=1")
    # OpenCompass's config still sets equations=True, which latex2sympy2 logs as deprecated at every parse.
    logging.getLogger("latex2sympy2_extended.math_normalization").setLevel(logging.ERROR)
    cases = load(args.replies)
    verdicts = {"project": project_verdicts(cases), "OpenCompass": opencompass_verdicts(cases)}
    print(agreement_table(cases, verdicts))
    if args.cases:
        print("\n| case | kind | person | project | OpenCompass |\n|---|---|---|---|---|")
        for i, case in enumerate(cases):
            if any(v[i] != case["verdict"] for v in verdicts.values()):
                print(f"| {case['id']} | {case['kind']} | {case['verdict']} | {verdicts['project'][i]} | "
                      f"{verdicts['OpenCompass'][i]} |")


if __name__ == "__main__":
    main()
