"""Generative multiple choice in OpenCompass's way: the model writes an option letter, which is
read back out of its reply and compared with the gold letter.

``first_option`` follows OpenCompass's ``first_option_postprocess``
(``opencompass/utils/text_postprocessors.py``): a fixed list of patterns is tried in order on the
stripped reply (Chinese answer cues, an option alone at the end of the reply, ``ANSWER:``
(any case), "The (correct) answer is (X)", an option standing alone, "1." followed by the rest,
then the cushion patterns ``X:`` and any option letter); the first pattern that matches and whose
capture (or, with an empty capture, the whole match) holds an option letter decides, and that
letter is the first of ``options`` (in the options' order, not the text's) found there. A match
without an option letter moves on to the next pattern. No option letter anywhere: "" (wrong).

``first_capital`` follows its ``first_capital_postprocess``: the reply's first upper-case
character, used by OpenCompass's ``mmlu_gen_4d595a``.
"""

import re

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


def first_capital(text: str) -> str:
    """The first upper-case character of the reply (OpenCompass's ``first_capital_postprocess``)."""
    return next((c for c in text if c.isupper()), "")


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
    return _acc(first_option(results[0], "ABCD"), doc["letter"])


arc_acc = hellaswag_acc


def piqa_acc(doc: dict, results: list) -> dict:
    """PIQA has two options, so OpenCompass reads them with ``options='AB'``."""
    gold = "AB"[doc["label"]] if doc["label"] in (0, 1) else "NULL"
    return _acc(first_option(results[0], "AB"), gold)


def mmlu_acc(doc: dict, results: list) -> dict:
    """``mmlu_gen_4d595a`` reads the reply's first capital letter."""
    return _acc(first_capital(results[0]), "ABCD"[doc["answer"]])
