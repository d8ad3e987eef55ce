"""Prompts and answer checks of the math tasks scored here: GSM8K (``gsm8k_answer``, lm-eval's
prompt and shots), SVAMP, CollegeMath and OlympiadBench.

Each task extracts its answer here, as a person reads it, and Hugging Face's math-verify decides
whether it equals the gold answer:

- GSM8K and SVAMP (``final_number``): the number of the last box, else of the last answer
  statement ("The answer is 18.", "#### 18", "Answer: 18"), else the last number of the reply;
  never a LaTeX delimiter (``$$``, ``$.``), thousands separators dropped (``1,000``, ``1 000``,
  ``1\\,000``), ``18.00`` read as 18, ``3/4`` and ``\\frac{3}{4}`` as one number;
- CollegeMath: the last ``\\boxed{}``, else the answer stated after "The final answer is";
- OlympiadBench: the boxed answer or answers after the last "So the final answer is"
  ("所以最终答案是"), else the formulas (or text) of that sentence, else the reply's boxes.

math-verify agrees with human graders on the forms a string comparison misses (``.5``,
``\\pm``, ``2^{10}``, radicals, sets, intervals, rearranged equations, ``\\text{(B)}``...). What
math-verify does not do is kept here: OlympiadBench's per-problem absolute tolerance (``error``)
and its several answers in any order.
"""

import functools
import logging
import re
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, TypeVar

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

# LaTeX first (gold answers and boxes are LaTeX), then plain expressions such as ``3/4``.
EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())
# CPU seconds this process may spend on the math-verify calls of one reply (``one_budget``), or
# on one call outside one (a parse, or a comparison of two parses; the costliest forms tried cost
# 0.3 s), not wall seconds: math-verify's own timeouts are SIGALRM alarms, which a busy machine
# runs out of on a correct answer. A busy machine slows a call in wall time, not in CPU time, so
# the verdict does not depend on the load (``cpu_bounded``).
TIMEOUT_S = 5
T = TypeVar("T")
# When the reply being scored runs out of CPU time (``time.process_time``), or None outside one
# (``one_budget``): all its math-verify calls share one ``TIMEOUT_S``, however many answers it gives.
_REPLY_ENDS: List[Optional[float]] = [None]
# A number: thousands groups (after a comma, a space, a narrow space or LaTeX's ``\\,`` and
# ``{,}``), a decimal part, a fraction ``3/4``; or a leading-dot decimal.
SEPARATOR = r"(?:,|\\,|\{,\}|[ \u00a0\u2009\u202f])"
NUMBER = re.compile(rf"-?(?:\d{{1,3}}(?:{SEPARATOR}\d{{3}})+(?![\d])|\d+)(?:\.\d+)?(?:/\d+(?![\d.,]\d))?|-?\.\d+")
GROUPED = re.compile(rf"-?\d{{1,3}}(?:{SEPARATOR}\d{{3}})+(?:\.\d+)?")  # one number: 1,000 or 1\,000.5
FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
# "The answer is 18", "Answer: 18", "#### 18" (the GSM8K shots' form), "答案是18".
ANSWER_CUE = re.compile(r"answer\s*(?:is|was|would be|will be|=|:)|####|答案(?:是|为)", re.IGNORECASE)
FORMULA = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
BOX = re.compile(r"\\(?:boxed|fbox)(?=[\s{])")
SPACE, UNBRACED = re.compile(r"\s*"), re.compile(r"[^\s$]*")  # after a box's name: space, then an unbraced content
# "So the final answer is", "Final answer:", "**Final Answer:**", "所以最终答案是".
FINAL_ANSWER = re.compile(r"final answer(?:\*\*)?\s*(?:is\b|:)(?:\*\*)?|最终答案是", re.IGNORECASE)


def on_cpu_limit(signum, frame) -> None:
    """SIGPROF's handler while ``cpu_bounded`` runs: math-verify's own timeout exception, which
    its ``parse`` turns into no answer and its ``verify`` into "not equal". A SIGPROF handled just
    after the bound was lifted (the timer already off) raises nothing."""
    if signal.getitimer(signal.ITIMER_PROF) != (0.0, 0.0):
        raise TimeoutException("over its CPU time")


def cpu_bounded(call: Callable[[], T], limit_s: float, over: T) -> T:
    """``call()``, or ``over`` once it has used ``limit_s`` seconds of this process's CPU time.

    ITIMER_PROF counts the CPU time of the whole process, threads included. lm-eval scores after
    generation, in its main thread, while the model's threads wait and data loaders are other
    processes; a thread busy at the same time would only cut the bound short. The timer repeats
    every ``limit_s``: math-verify catches the first expiry inside one comparison and goes on to
    the next pair of parses, which the next expiry cuts off in turn. Signals are the main
    thread's: elsewhere ``call()`` runs unbounded, as math-verify's alarms would refuse to run.
    The caller's SIGPROF handler and timer (a profiler's) are restored afterwards.
    """
    warmed_up()
    if _REPLY_ENDS[0] is not None:  # inside one reply's budget: what is left of it, at most
        limit_s = min(limit_s, _REPLY_ENDS[0] - time.process_time())
        if limit_s <= 0:
            return over
    if threading.current_thread() is not threading.main_thread():
        return call()
    previous_handler = signal.signal(signal.SIGPROF, on_cpu_limit)
    previous_timer = signal.setitimer(signal.ITIMER_PROF, limit_s, limit_s)
    try:
        return call()
    except TimeoutException:
        return over
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous_handler)
        signal.setitimer(signal.ITIMER_PROF, *previous_timer)


def one_budget(score: Callable[..., T]) -> Callable[..., T]:
    """``score`` (a task's ``process_results``) with one CPU budget, ``TIMEOUT_S``, for every
    math-verify call it makes on its reply, not one a call, which would let a reply of many answers
    cost as many budgets (docs/evaluation.md, "A bound in CPU time"). A call that finds the budget
    spent reads no answer (``parsed``) or finds no equality (``equivalent``)."""

    @functools.wraps(score)
    def scored(*args, **kwargs):
        warmed_up()  # once a process, outside any reply's budget
        outer = _REPLY_ENDS[0]
        if outer is None:
            _REPLY_ENDS[0] = time.process_time() + TIMEOUT_S
        try:
            return score(*args, **kwargs)
        finally:
            _REPLY_ENDS[0] = outer

    return scored


@functools.cache
def warmed_up() -> bool:
    """Load math-verify's LaTeX parser and sympy's comparisons once, unbounded: the first parse
    of a process pays for building the parser, which is no answer's cost. math-verify's one
    warning that its timeouts are off ("you must provide the logic for timeout interruption
    yourself"), which ``cpu_bounded`` does, is left unsaid."""
    logger = logging.getLogger("math_verify")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        verify(parse("$\\frac{1}{2}$", EXTRACTION, parsing_timeout=None), parse("0.5", EXTRACTION, parsing_timeout=None),
               timeout_seconds=None)
    finally:
        logger.setLevel(level)
    return True


def parsed(latex: str, limit_s: float = TIMEOUT_S) -> list:
    """math-verify's reading of ``latex`` (math mode: bare, ``$...$`` or ``\\boxed{...}``), or no
    reading after ``limit_s`` seconds of CPU time."""
    text = latex.strip()
    if not text.startswith(("$", "\\boxed", "\\(", "\\[")):
        text = f"${text}$"
    return cpu_bounded(lambda: parse(text, EXTRACTION, parsing_timeout=None), limit_s, [])


def equivalent(gold: str, predicted: Optional[str], limit_s: float = TIMEOUT_S) -> bool:
    """Whether math-verify finds ``predicted`` equal to ``gold`` (both LaTeX). A number written
    with thousands separators is that number (math-verify reads the thin space of ``1\\,000``
    as a product).

    Example:
        >>> equivalent("$\\\\frac{1}{2}$", "0.5"), equivalent("1024", "2^{10}"), equivalent("3", "-3")
        (True, True, False)
        >>> equivalent("1000", "1\\\\,000"), equivalent("1000", "1 000"), equivalent("1000", "1 001")
        (True, True, False)
    """
    if predicted is None or not predicted.strip():
        return False
    if GROUPED.fullmatch(predicted.strip()):
        predicted = re.sub(SEPARATOR, "", predicted.strip())
    gold_read, predicted_read = parsed(gold, limit_s), parsed(predicted, limit_s)
    return cpu_bounded(lambda: verify(gold_read, predicted_read, timeout_seconds=None), limit_s, False)


# Extraction ----------------------------------------------------------------------------------

def numbers(text: str) -> List[str]:
    """The numbers written in ``text``, in order, as plain numbers: thousands separators
    dropped, ``\\frac{3}{4}`` as ``3/4``, a Unicode minus as ``-``.

    Example:
        >>> numbers(r"5 apples, 1,007.5 in all, 1 000 or $\\$2{,}500$; half: .5 or \\frac{1}{2}; 3/4")
        ['5', '1007.5', '1000', '2500', '.5', '1/2', '3/4']
    """
    text = FRACTION.sub(r"\1/\2", text.replace("\u2212", "-"))
    return [re.sub(SEPARATOR, "", n) for n in NUMBER.findall(text)]


def last_number(text: str) -> Optional[str]:
    """The last number written in ``text`` (see ``numbers``), or None.

    Example:
        >>> last_number("5 apples and 2 more: 1,007.5 in all."), last_number(r"$$\\boxed{140}$$"), last_number("no")
        ('1007.5', '140', None)
    """
    found = numbers(text)
    return found[-1] if found else None


def stated_number(text: str) -> Optional[str]:
    """The number of the last answer statement that has one in its sentence ("The answer is 18",
    "Answer: 18 apples", "#### 18", "The answer is 5 + 7 = 12": after the last ``=``), or None.

    Example:
        >>> stated_number("The answer is 18. Check: 18 - 3 = 15"), stated_number("Answer: 5 + 7 = 12 apples")
        ('18', '12')
    """
    for cue in reversed(list(ANSWER_CUE.finditer(text))):
        sentence = re.split(r"\n|\.(?:\s|$)", text[cue.end():], maxsplit=1)[0]
        found = numbers(sentence.rsplit("=", 1)[-1])
        if found:
            return found[0]
    return None


def final_number(text: str) -> Optional[str]:
    """The final number of a worked answer, as a person reads it: the first number of the last
    box (after its last ``=``, as for a statement), else the last answer statement's number, else
    the last number in the reply (a number the reply writes after its stated answer does not
    replace it).

    Example:
        >>> final_number(r"so 18 * 2 = 36 eggs. $$\\boxed{36}$$"), final_number("The answer is 18.00. Step 2: 5")
        ('36', '18.00')
        >>> final_number(r"$\\boxed{2 \\times 9 = 18}$")
        '18'
    """
    box = boxed_answer(text)
    found = numbers(box.rsplit("=", 1)[-1]) if box is not None else []
    return found[0] if found else stated_number(text) or last_number(text)


def closing_braces(text: str) -> Dict[int, int]:
    """Where each ``{`` of ``text`` that is closed is closed, in one pass: a box's content is then
    found in constant time, so a reply of many unclosed boxes costs its length, not its square
    (32 KiB of ``\\boxed{`` took 4.8 s of CPU, scanned to the end once a box).

    Example:
        >>> closing_braces("{a{b}}{")
        {2: 4, 0: 5}
    """
    opened, closes = [], {}
    for match in re.finditer(r"[{}]", text):
        if match.group() == "{":
            opened.append(match.start())
        elif opened:
            closes[opened.pop()] = match.start()
    return closes


def boxed_answers(text: str) -> List[str]:
    """The contents of every ``\\boxed{...}`` (or ``\\boxed x``) in ``text``, in order; a box
    nested in another counts once, an unclosed one not at all.

    Example:
        >>> boxed_answers(r"x = \\boxed{\\frac{1}{2}} or \\boxed{-1}; \\boxed 7.")
        ['\\\\frac{1}{2}', '-1', '7']
    """
    found, end, closes = [], 0, None
    for match in BOX.finditer(text):
        if match.start() < end:
            continue
        start = SPACE.match(text, match.end()).end()
        if text.startswith("{", start):
            closes = closing_braces(text) if closes is None else closes
            close = closes.get(start)
            if close is None:
                continue
            content, end = text[start + 1:close], close
        else:
            content = UNBRACED.match(text, start).group().rstrip(".,;")
            end = start + len(content)
        found.append(content)
    return found


def boxed_answer(text: str) -> Optional[str]:
    """The content of the last box in ``text``, or None."""
    boxes = boxed_answers(text)
    return boxes[-1] if boxes else None


def split_top_level(text: str) -> List[str]:
    """``text`` split at the commas outside any bracket: ``1, (2, 3)`` -> ``['1', '(2, 3)']``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += 1 if char in "([{" else -1 if char in ")]}" else 0
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def expand_plus_minus(parts: List[str]) -> List[str]:
    """Each answer with ``\\pm`` as its two answers, as OlympiadBench's judge counts them.

    Example:
        >>> expand_plus_minus(["1 \\\\pm \\\\sqrt{2}", "0"])
        ['1 + \\\\sqrt{2}', '1 - \\\\sqrt{2}', '0']
    """
    return [p.replace("\\pm", sign) for p in parts for sign in (("+", "-") if "\\pm" in p else ("",))]


# SVAMP ---------------------------------------------------------------------------------------

def svamp_prompt(doc: dict) -> str:
    """SVAMP's problem (the body, then the question), asking for a worked answer."""
    return f"Question: {doc['Body'].strip()} {doc['Question'].strip()}\nLet's think step by step\nAnswer:"


@one_budget
def svamp_score(doc: dict, results: List[str]) -> dict:
    """Accuracy of the final number (``final_number``) before the model starts another question."""
    predicted = final_number(results[0].split("Question:")[0])
    return {"acc": float(equivalent(repr(float(doc["Answer"])), predicted))}


# GSM8K ---------------------------------------------------------------------------------------

@one_budget
def gsm8k_score(doc: dict, results: List[str]) -> dict:
    """Accuracy of the final number (``final_number``) before the model starts another question,
    against the number after the gold solution's ``####``.

    Example:
        >>> gold = {"answer": "Natalia sold 48/2 = 24 clips in May.\\n#### 72"}
        >>> [gsm8k_score(gold, [r])["acc"] for r in [r"48 + 24 = 72. $\\boxed{72}$.", "#### 72.00", "So 72 - 24 = 48"]]
        [1.0, 1.0, 0.0]
    """
    gold = doc["answer"].split("####")[-1].strip().replace(",", "")
    return {"acc": float(equivalent(gold, final_number(results[0].split("Question:")[0])))}


# CollegeMath ---------------------------------------------------------------------------------

@one_budget
def college_math_score(doc: dict, results: List[str]) -> dict:
    """Accuracy of the last boxed answer (else the answer stated after "The final answer is")
    against ``answer`` (LaTeX in ``$...$``)."""
    answer = boxed_answer(results[0])
    if answer is None:
        stated = stated_answers(after_final_cue(results[0]))
        answer = stated[0] if stated else None
    return {"acc": float(equivalent(doc["answer"], answer))}


# OlympiadBench -------------------------------------------------------------------------------

ANSWER_TYPES = {"Numerical": "a numerical value", "Expression": "an expression", "Equation": "an equation",
                "Interval": "an interval", "Tuple": "a tuple"}
ANSWER_TYPES_ZH = {"Numerical": "数值", "Expression": "表达式", "Equation": "方程", "Interval": "区间", "Tuple": "元组"}


def olympiadbench_prompt(doc: dict) -> str:
    """The open-ended competition prompt in the problem's language (English unless ``language``
    says Chinese) and subject, with the answer type, several answers and the unit spelled out
    when the problem has them."""
    chinese = doc.get("language") == "Chinese"
    names = ANSWER_TYPES_ZH if chinese else ANSWER_TYPES
    kinds = [names.get(k.strip(), k.strip().lower()) for k in (doc.get("answer_type") or "").split(",") if k.strip()]
    context = f"{doc['context'].strip()}\n" if doc.get("context") else ""
    physics = doc.get("subject") == "Physics"
    if chinese:
        kind_hint = f"答案类型为{'、'.join(kinds)}。" if kinds else ""
        box = "\\boxed{用英文逗号分隔的多个答案}" if doc.get("is_multiple_answer") else "\\boxed{答案}"
        unit = f"单位（{doc['unit']}）写在框外，不要放进框里。" if doc.get("unit") else ""
        return (f"以下是一道中国{'物理' if physics else '数学'}竞赛的解答题。{kind_hint}"
                f"请用LaTeX书写变量和公式，并以“所以最终答案是{box}。”结尾。{unit}\n\n"
                f"{context}{doc['question'].strip()}\n\n解答：")
    kind_hint = f"The answer is {' and '.join(kinds)}. " if kinds else ""
    box = "\\boxed{answers separated by commas}" if doc.get("is_multiple_answer") else "\\boxed{answer}"
    unit = f" Give the unit ({doc['unit']}) after the box, not inside it." if doc.get("unit") else ""
    return (f"Solve this open-ended problem from an international {'physics' if physics else 'mathematics'} "
            f"competition. {kind_hint}Write variables and formulas in LaTeX and finish with "
            f"\"So the final answer is {box}.\"{unit}\n\n{context}{doc['question'].strip()}\n\nSolution:")


def after_final_cue(text: str) -> str:
    """What follows the last "final answer is" (``FINAL_ANSWER``), or "" when ``text`` never says so."""
    parts = FINAL_ANSWER.split(text)
    return parts[-1] if len(parts) > 1 else ""


def stated_answers(sentence: str) -> List[str]:
    """The answers written after "the final answer is" without a box: the formulas of that
    paragraph (``$...$``, ``$$...$$``, ``\\(...\\)``), else its text without the final stop.

    Example:
        >>> stated_answers(" $12$ (in $\\\\mathrm{cm}$).\\n\\nDone"), stated_answers(": 3/4."), stated_answers(" ")
        (['12', '\\\\mathrm{cm}'], ['3/4'], [])
    """
    paragraph = sentence.lstrip(" \t:：").split("\n\n", 1)[0].strip()
    formulas = [next(g for g in m.groups() if g is not None).strip() for m in FORMULA.finditer(paragraph)]
    if formulas:
        return [f for f in formulas if f]
    plain = re.sub(r"\*\*", "", paragraph).rstrip(" .。")
    return [plain] if plain else []


def olympiadbench_answers(text: str, multiple: bool) -> List[str]:
    """The answers a response gives: the boxes after its last "final answer is", else the
    formulas that sentence states unboxed (``stated_answers``), else the boxes of the whole
    response; all of them for a problem with several answers, else the last box (the first
    stated formula); several answers may also share one box, separated by commas."""
    tail = after_final_cue(text)
    boxes = boxed_answers(tail)
    if not boxes:
        stated = stated_answers(tail)
        boxes = stated if multiple else stated[:1]
    boxes = boxes or boxed_answers(text)
    if not multiple:
        return boxes[-1:]
    return expand_plus_minus([part for box in boxes for part in split_top_level(box)])


def tolerances(error, count: int) -> List[Optional[float]]:
    """OlympiadBench's ``error`` field as one absolute tolerance per answer (None: exact).

    Example:
        >>> tolerances("0.1,", 2), tolerances("1e-2", 2), tolerances(None, 1)
        ([0.1, None], [0.01, 0.01], [None])
    """
    values = [float(e) if e.strip() else None for e in str(error).split(",")] if error else [None]
    return values * count if len(values) == 1 else values + [None] * (count - len(values))


def as_float(latex: str) -> Optional[float]:
    """The value of ``latex`` when math-verify reads it as a real number, else None."""
    found = parsed(latex)
    try:
        return float(found[0]) if found and getattr(found[0], "is_number", False) else None
    except (TypeError, ValueError):
        return None


def matches(gold: str, predicted: str, tolerance: Optional[float]) -> bool:
    """``predicted`` equals ``gold`` for math-verify, or both are numbers within ``tolerance``."""
    if equivalent(gold, predicted):
        return True
    if tolerance is None:
        return False
    g, p = as_float(gold), as_float(predicted)
    return g is not None and p is not None and abs(g - p) <= tolerance * (1 + 1e-9)


def all_matched(gold: List[str], predicted: List[str], tolerance: List[Optional[float]]) -> bool:
    """Whether the answers pair up one to one, in any order (OlympiadBench's judge's rule)."""
    if len(gold) != len(predicted):
        return False
    left = list(predicted)
    for g, e in zip(gold, tolerance):
        hit = next((p for p in left if matches(g, p, e)), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


@one_budget
def olympiadbench_score(doc: dict, results: List[str]) -> dict:
    """Accuracy: the boxed answers match the gold ones (several: one to one, in any order),
    numbers within the problem's absolute ``error`` when it gives one."""
    multiple = bool(doc.get("is_multiple_answer"))
    gold = [g.strip().strip("$") for g in doc["final_answer"]]
    if multiple:
        gold = expand_plus_minus([part for g in gold for part in split_top_level(g)])
    predicted = olympiadbench_answers(results[0], multiple)
    return {"acc": float(all_matched(gold, predicted, tolerances(doc.get("error"), len(gold))))}
