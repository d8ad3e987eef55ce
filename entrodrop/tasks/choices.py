"""Generative multiple choice: the model writes an option, which is read back out of its reply
and compared with the gold letter.

``answer_letter`` reads the option as a person reads it, for every letter task here (MMLU,
HellaSwag, ARC-Challenge, PIQA). Each rule below is tried in turn, and the first that finds a
letter decides; within a rule the last occurrence counts (a chat answer that reconsiders ends
with its final choice):

1. the answer stated: "The answer is B", "Answer: (C)", "the correct answer would be D",
   "\\boxed{A}", "答案是C" (a lower-case letter too, when it stands alone: "Answer: c");
2. an option called right or chosen: "B is correct", "the best option is C", "making B the
   correct choice", "it is D", "I'd go with D";
3. a reply that opens with the letter: "B", "B.", "(B)", "B) heart", "B: heart";
4. an option named: "(D)", "option D";
5. the one option whose text the reply names (given the options' texts), when only one is;
6. the last option letter standing alone as a word ("A" followed by a word is the article).

No letter: "" (wrong). A reasoning model's thought (up to ``</think>``) and Markdown emphasis
are dropped first.

``first_option`` re-states OpenCompass's ``first_option_postprocess``
(``opencompass/utils/text_postprocessors.py``, commit a5acc4bb) in this project's code, for the
comparison in ``scripts/compare_opencompass.py``: a fixed list of patterns is tried in order on
the stripped reply (Chinese answer cues, an option alone at the end of the reply, ``ANSWER:``
(any case), "The (correct) answer is (X)", an option standing alone, "1." followed by the rest,
then the cushion patterns ``X:`` and any option letter); the first pattern that matches and whose
capture (or, with an empty capture, the whole match) holds an option letter decides, and that
letter is the first of ``options`` (in the options' order, not the text's) found there. A match
without an option letter moves on to the next pattern. No option letter anywhere: "" (wrong).
"""

import re
from typing import Sequence

import datasets


def _patterns(o: str) -> list[str]:
    """The patterns, in OpenCompass's order, for the option letters ``o`` (e.g. "ABCD")."""
    return [
        rf"答案是?\s*([{o}])",
        rf"答案是?\s*：\s*([{o}])",
        rf"答案是?\s*:\s*([{o}])",
        rf"答案选项应?该?是\s*([{o}])",
        rf"答案选项应?该?为\s*([{o}])",
        rf"答案应该?是\s*([{o}])",
        rf"答案应该?选\s*([{o}])",
        rf"答案选项为?\s*：\s*([{o}])",
        rf"答案选项为?\s+\(?\*?\*?([{o}])\*?\*?\)?",
        rf"答案选项是?\s*:\s*([{o}])",
        rf"答案为\s*([{o}])",
        rf"答案选\s*([{o}])",
        rf"选择?\s*([{o}])",
        # OpenCompass's list lacks a comma here, so these two are one pattern
        rf"故选?\s*([{o}])只有选?项?\s?([{o}])\s?是?对",
        rf"只有选?项?\s?([{o}])\s?是?错",
        rf"只有选?项?\s?([{o}])\s?不?正确",
        rf"只有选?项?\s?([{o}])\s?错误",
        rf"说法不?对选?项?的?是\s?([{o}])",
        rf"说法不?正确选?项?的?是\s?([{o}])",
        rf"说法错误选?项?的?是\s?([{o}])",
        rf"([{o}])\s?是正确的",
        rf"([{o}])\s?是正确答案",
        rf"选项\s?([{o}])\s?正确",
        rf"所以答\s?([{o}])",
        rf"所以\s?([{o}][.。$]?$)",
        rf"所有\s?([{o}][.。$]?$)",
        rf"[\s，：:,]([{o}])[。，,\.]?$",
        rf"[\s，,：:][故即]([{o}])[。\.]?$",
        rf"[\s，,：:]因此([{o}])[。\.]?$",
        rf"[是为。]\s?([{o}])[。\.]?$",
        rf"因此\s?([{o}])[。\.]?$",
        rf"显然\s?([{o}])[。\.]?$",
        r"答案是\s?(\S+)(?:。|$)",
        r"答案应该是\s?(\S+)(?:。|$)",
        r"答案为\s?(\S+)(?:。|$)",
        rf"(?i)ANSWER\s*:\s*([{o}])",
        rf"[Tt]he answer is:?\s+\(?([{o}])\)?",
        rf"[Tt]he answer is:?\s+\(?\*?\*?([{o}])\*?\*?\)?",
        rf"[Tt]he answer is option:?\s+\(?([{o}])\)?",
        rf"[Tt]he correct answer is:?\s+\(?([{o}])\)?",
        rf"[Tt]he correct answer is option:?\s+\(?([{o}])\)?",
        rf"[Tt]he correct answer is:?.*?boxed{{([{o}])}}",
        rf"[Tt]he correct option is:?.*?boxed{{([{o}])}}",
        rf"[Tt]he correct answer option is:?.*?boxed{{([{o}])}}",
        rf"[Tt]he answer to the question is:?\s+\(?([{o}])\)?",
        rf"^选项\s?([{o}])",
        rf"^([{o}])\s?选?项",
        rf"(\s|^)[{o}][\s。，,：:\.$]",
        r"1.\s?(.*?)$",
        rf"1.\s?([{o}])[.。$]?$",
        rf"([{o}]):",  # the cushion patterns, last
        rf"([{o}])",
    ]


def first_option(text: str, options: str = "ABCD") -> str:
    """The option letter OpenCompass's ``first_option_postprocess`` reads from a reply, or ""."""
    text = text.strip()
    for pattern in _patterns(options):
        match = re.search(pattern, text, re.DOTALL)
        if match:
            group = match.group(1) if match.groups() else None
            found = group if group else match.group(0)
            for letter in options:
                if letter in found:
                    return letter
    return ""


def _letter_rules(o: str) -> list:
    """``answer_letter``'s rules, in order, for the option letters ``o``: each a list of
    patterns whose group 1 is the letter."""
    end = r"(?![A-Za-z0-9])"  # the letter is a word of its own: not the B of "Because"
    verb = r"(?:[^\n.:]{0,30}?\b(?i:is|(?:would|should|will|must) be)\b)?"  # "answer ... is"; not "might be"
    right = r"(?i:correct|right|best|true)\b"
    return [
        [rf"(?i:\banswer\b){verb}\s*[:=\-–]?\s*(?i:option|choice)?\s*[(\[]?([{o}]){end}",
         rf"(?i:\banswer\b){verb}\s*[:=]\s*[(\[]?([{o.lower()}])(?:[)\].,]|\s*$)",
         rf"\\boxed\{{\s*(?:\\text(?:bf)?\{{)?\s*\(?([{o}])\)?",
         rf"答案(?:应该)?(?:是|为|选)?\s*[:：]?\s*[(（]?([{o}])"],
        [rf"(?<![A-Za-z])[(\[]?([{o}])[)\]]?\s+(?i:is|seems|appears)\s+(?i:to be\s+)?(?i:the\s+)?{right}",
         rf"(?i:\b(?:correct|right|best)\s+(?:option|choice|letter))\s*(?i:is|would be)?\s*[:=]?\s*[(\[]?([{o}]){end}",
         rf"(?<![A-Za-z])([{o}])\s+(?i:the\s+(?:correct|right|best)\s+(?:answer|option|choice))",  # making B the ...
         rf"(?i:\bit(?:'s|’s|\s+is|\s+must be|\s+should be|\s+would be))\s+(?i:option\s+)?[(\[]?([{o}]){end}",
         rf"(?i:\b(?:choose|chose|pick|select|go with|going with|say))\s+(?i:option\s+|choice\s+)?[(\[]?([{o}]){end}"],
        [rf"^\s*[(\[]?([{o}])(?:[)\].:：,]|\s*$|\s*\n|\s+[-–—])",
         rf"^\s*(?i:option|choice)\s*[(\[]?([{o}]){end}"],
        [rf"\(([{o}])\)", rf"(?i:\b(?:option|choice))\s+([{o}]){end}"],
    ]


def _named_option(text: str, options: str, choices: Sequence[str]) -> str:
    """The option whose text ``text`` names, when exactly one option's is named (texts with a
    letter and two characters or more, matched whole and in any case), else ""."""
    named = [letter for letter, choice in zip(options, choices)
             if len(choice.strip()) >= 2 and re.search(r"[^\W\d_]", choice)
             and re.search(rf"(?<!\w){re.escape(choice.strip().rstrip('.'))}(?!\w)", text, re.IGNORECASE)]
    return named[0] if len(named) == 1 else ""


def answer_letter(text: str, options: str = "ABCD", choices: Sequence[str] = ()) -> str:
    """The option letter a person reads in a reply (the module docstring lists the rules), or "".

    Args:
        text (str): the model's reply.
        options (str): the option letters, e.g. "ABCD" (PIQA: "AB").
        choices (Sequence[str]): the options' texts in ``options`` order, for rule 5 (may be empty).

    Returns:
        str: one letter of ``options``, or "".

    Example:
        >>> [answer_letter(r) for r in ["The answer is B.", "Answer: C", "I think it's (D)", "\\nB", "Answer: c"]]
        ['B', 'C', 'D', 'B', 'C']
        >>> answer_letter("A is tempting, but the correct answer is C."), answer_letter("Option C", "AB")
        ('C', '')
        >>> answer_letter("The heart pumps blood.", choices=["lung", "heart", "skin", "bone"])
        'B'
    """
    text = re.sub(r"\*\*|__|`", "", text.split("</think>")[-1]).strip()
    for rule in _letter_rules(options):
        hits = [m for pattern in rule for m in re.finditer(pattern, text)]
        if hits:
            return max(hits, key=lambda m: m.start(1)).group(1).upper()
    named = _named_option(text, options, choices)
    if named:
        return named
    alone = [m for m in re.finditer(rf"(?<![\w'’])([{options}])(?![\w'’])", text)
             if not (m.group(1) == "A" and re.match(r"\s+[A-Za-z]", text[m.end():]))]
    return alone[-1].group(1) if alone else ""


def _acc(predicted: str, gold: str) -> dict:
    return {"acc": float(predicted != "" and predicted == gold)}


def _clean(text: str) -> str:
    """lm-eval's HellaSwag text clean-up (the same as its ``hellaswag/utils.py`` preprocess)."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """OpenCompass's HellaSwag fields from Rowan/hellaswag: ``ctx`` is lm-eval's cleaned query with
    its "activity label: " prefix cut (``query.split(': ', 1)[-1]``), A-D the cleaned endings,
    ``letter`` the gold option."""

    def fields(doc):
        query = _clean(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())
        endings = [_clean(e) for e in doc["endings"]]
        return {"ctx": query.split(": ", 1)[-1], "A": endings[0], "B": endings[1], "C": endings[2],
                "D": endings[3], "letter": "ABCD"[int(doc["label"])]}

    return dataset.map(fields)


def arc_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """OpenCompass's ARC rows: questions with exactly four options (it drops the others), the gold
    option as the letter in its position."""
    dataset = dataset.filter(lambda doc: len(doc["choices"]["label"]) == 4)

    def fields(doc):
        text = doc["choices"]["text"]
        return {"A": text[0], "B": text[1], "C": text[2], "D": text[3],
                "letter": "ABCD"[doc["choices"]["label"].index(doc["answerKey"])]}

    return dataset.map(fields)


def hellaswag_acc(doc: dict, results: list) -> dict:
    return _acc(answer_letter(results[0], "ABCD", [doc[k] for k in "ABCD"]), doc["letter"])


arc_acc = hellaswag_acc


def piqa_acc(doc: dict, results: list) -> dict:
    """PIQA has two options, A and B."""
    gold = "AB"[doc["label"]] if doc["label"] in (0, 1) else "NULL"
    return _acc(answer_letter(results[0], "AB", [doc["sol1"], doc["sol2"]]), gold)


def mmlu_acc(doc: dict, results: list) -> dict:
    return _acc(answer_letter(results[0], "ABCD", doc["choices"]), "ABCD"[doc["answer"]])
