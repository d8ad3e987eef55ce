"""The generative HellaSwag, ARC-Challenge, PIQA and MMLU tasks (OpenCompass's ``*_gen`` protocol).

The hub is out of reach here, so each task runs end to end on a local file in its dataset's own
schema (a YAML that includes the shipped one and reads the file), answered by a stand-in model:
one reply right, one wrong, so every score is 0.5, and the prompts are checked against
OpenCompass's templates. The letter is read as a person reads it (``answer_letter``);
``first_option`` re-states OpenCompass's reader for the comparison script.
"""

import json
from pathlib import Path

import lm_eval
import pytest
from conftest import REPO
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml

from entrodrop.tasks.choices import answer_letter, first_option

TASKS = REPO / "entrodrop" / "tasks"


@pytest.mark.parametrize("reply, options, letter", [
    ("B", "ABCD", "B"),
    (" C\n", "ABCD", "C"),
    ("The answer is (C).", "ABCD", "C"),
    ("The correct answer is D) because", "ABCD", "D"),
    ("ANSWER: b", "ABCD", "A"),  # (?i) matches "b", no upper-case letter: on to "any option", the A of ANSWER
    ("answer: d", "ABCD", ""),
    ("Answer: D", "ABCD", "D"),
    ("I think A or B", "ABCD", "B"),  # an option alone at the end of the reply comes first
    ("I think A or B, maybe.", "ABCD", "A"),  # then the first option letter in the text
    ("A. Paris is the capital", "ABCD", "A"),
    ("No idea.", "ABCD", ""),
    ("Option C", "AB", ""),  # PIQA reads only A and B
    ("答案是C", "ABCD", "C"),
])
def test_first_option_follows_opencompass(reply, options, letter):
    assert first_option(reply, options) == letter


@pytest.mark.parametrize("reply, letter", [
    ("B", "B"), (" C\n", "C"), ("\nB", "B"), ("**D**", "D"), ("(A)", "A"), ("B) the heart", "B"),
    ("The answer is B.", "B"), ("Answer: C", "C"), ("answer: d", "D"), ("ANSWER: A", "A"),
    ("I think it's (D)", "D"), ("The correct answer is D) because", "D"), ("The answer is: **C**", "C"),
    ("A is tempting, but the answer is C.", "C"),  # the last answer stated
    ("At first I said the answer is A. On reflection, the answer is B.", "B"),
    ("The heart pumps blood, so B is correct.", "B"), ("I'd go with C.", "C"), ("Option B", "B"),
    ("The answer is B, not A.", "B"),  # OpenCompass's reader: A, the option at the end
    ("I think it is B. Because A and C are wrong.", "B"), ("Pumping blood makes B the right answer.", "B"),
    ("A person needs oxygen: the best choice is D", "D"),  # the article A is no option
    ("答案是C", "C"), ("\\boxed{B}", "B"), ("<think>Maybe A.</think>The answer is C.", "C"),
    ("Because of this, none fits.", ""), ("No idea.", ""),
])
def test_answer_letter_reads_the_reply_as_a_person_does(reply, letter):
    assert answer_letter(reply) == letter


def test_answer_letter_reads_an_option_named_by_its_text_when_only_one_is():
    options = ["lung", "heart", "skin", "bone"]
    assert answer_letter("The heart.", "ABCD", options) == "B"
    assert answer_letter("Not the lung but the skin?", "ABCD", options) == ""  # two named: no choice
    assert answer_letter("Option C", "AB") == "" and answer_letter("The answer is B", "AB") == "B"  # PIQA: A, B


@pytest.mark.parametrize("task", ["hellaswag_gen.yaml", "arc_challenge_gen.yaml", "piqa_gen.yaml",
                                  "_mmlu_gen_template_yaml"])
def test_a_chat_answer_finishes_and_is_read(task):
    """A chat answer may open with a newline and reason in paragraphs before its letter: the
    stops leave it whole and the limit leaves room for it."""
    settings = load_yaml(TASKS / task, resolve_func=False)["generation_kwargs"]
    reply = "\nLet me think.\n\nOption A fails here, and so does option C.\n\nThe answer is B."
    for stop in settings["until"]:
        reply = reply.split(stop)[0]
    assert answer_letter(reply, "AB" if "piqa" in task else "ABCD") == "B"
    assert settings["max_gen_toks"] >= 256


def shot_hellaswag(i):
    return {"ind": 100 + i, "activity_label": f"Shot {i}", "ctx_a": f"Example context {i}.", "ctx_b": "it",
            "ctx": "", "endings": [f"ending {i}a.", f"ending {i}b.", f"ending {i}c.", f"ending {i}d."],
            "source_id": "s", "split": "train", "split_type": "indomain", "label": str(i % 4)}


HELLASWAG = [
    {"ind": 1, "activity_label": "Baking cookies", "ctx_a": "A woman puts dough on a tray.", "ctx_b": "she",
     "ctx": "", "endings": ["puts the tray in the oven.", "eats the tray.", "paints the dough [title] blue.",
                            "sings."], "source_id": "s", "split": "val", "split_type": "indomain", "label": "0"},
    {"ind": 2, "activity_label": "Sailing", "ctx_a": "A man hoists the sail.", "ctx_b": "the boat",
     "ctx": "", "endings": ["sinks.", "moves across the lake.", "flies.", "melts."], "source_id": "s",
     "split": "val", "split_type": "indomain", "label": "1"},
]
ARC = [
    {"id": "a1", "question": "Which gas do plants take in?",
     "choices": {"text": ["carbon dioxide", "helium", "neon", "argon"], "label": ["A", "B", "C", "D"]},
     "answerKey": "A"},
    {"id": "a2", "question": "Which has three options?",  # OpenCompass drops it
     "choices": {"text": ["x", "y", "z"], "label": ["A", "B", "C"]}, "answerKey": "A"},
    {"id": "a3", "question": "What melts ice fastest?",
     "choices": {"text": ["cold", "heat", "dark", "wind"], "label": ["1", "2", "3", "4"]}, "answerKey": "2"},
]
PIQA = [
    {"goal": "To open a jar", "sol1": "hit it with a feather", "sol2": "twist the lid", "label": 1},
    {"goal": "To dry wet hair", "sol1": "use a towel", "sol2": "use a spoon", "label": 0},
]
MMLU_DEV = [{"question": f"Dev question {i}?", "subject": "anatomy", "choices": ["w", "x", "y", "z"],
             "answer": i % 4} for i in range(5)]
MMLU = [
    {"question": "Which organ pumps blood?", "subject": "anatomy",
     "choices": ["lung", "heart", "skin", "bone"], "answer": 1},
    {"question": "How many chambers has the human heart?", "subject": "anatomy",
     "choices": ["two", "three", "four", "five"], "answer": 2},
]

# The stand-in model's reply to each problem, by a phrase of it: the first right, the second wrong.
REPLIES = {
    "A woman puts dough": "\nA",
    "hoists the sail": "The answer is C.",  # gold B
    "plants take in": "I think A or B",  # gold A; no choice made, the last letter is read
    "melts ice": "B",  # gold 2 -> B
    "open a jar": " B",
    "dry wet hair": "\nUsing a spoon would not dry anything, so the answer is B.",  # gold A
    "pumps blood": "\nThe heart pumps blood, so the answer is B.",  # gold B; the first capital is T
    "chambers": "Two atria and two ventricles make five? The answer is D.",  # gold C
    "Anatomy one": " A", "Anatomy two": " C", "Anatomy three": " D",  # the aggregation test
    "Virology one": " A",
}


class CannedLM(LM):
    def __init__(self):
        super().__init__()
        self.prompts = []

    def generate_until(self, requests):
        self.prompts += [r.args[0] for r in requests]
        last = [r.args[0].split("\n\n")[-1] for r in requests]  # the problem, after any shots
        return [next(a for key, a in REPLIES.items() if key in q) for q in last]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


LOCAL = {  # task -> its shipped YAML, split -> rows
    "hellaswag_gen": ("hellaswag_gen.yaml", {"train": [shot_hellaswag(i) for i in range(10)],
                                             "validation": HELLASWAG}),
    "arc_challenge_gen": ("arc_challenge_gen.yaml", {"validation": ARC}),
    "piqa_gen": ("piqa_gen.yaml", {"validation": PIQA}),
    "mmlu_gen_anatomy": ("mmlu_gen/mmlu_gen_anatomy.yaml", {"dev": MMLU_DEV, "test": MMLU}),
    # two subjects of unequal size for the group's average: 2/3 right and 1/1 right
    "mmlu_gen_agg_a": ("mmlu_gen/mmlu_gen_anatomy.yaml", {"dev": MMLU_DEV, "test": [
        {"question": f"Anatomy {n}?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": g}
        for n, g in [("one", 0), ("two", 2), ("three", 1)]]}),
    "mmlu_gen_agg_b": ("mmlu_gen/mmlu_gen_virology.yaml", {"dev": MMLU_DEV, "test": [
        {"question": "Virology one?", "subject": "virology", "choices": ["a", "b", "c", "d"], "answer": 0}]}),
}


@pytest.fixture(scope="module")
def task_manager(tmp_path_factory):
    local = tmp_path_factory.mktemp("general_tasks")
    for task, (shipped, splits) in LOCAL.items():
        files = {}
        for split, rows in splits.items():
            files[split] = str(local / f"{task}_{split}.jsonl")
            Path(files[split]).write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = {"include": str(TASKS / shipped), "task": f"{task}_local", "dataset_path": "json",
                  "dataset_name": None, "dataset_kwargs": {"data_files": files}}
        (local / f"{task}_local.yaml").write_text(json.dumps(config))
    group = load_yaml(TASKS / "mmlu_gen" / "_mmlu_gen.yaml", resolve_func=False)
    (local / "mmlu_gen_agg_local.yaml").write_text(json.dumps(
        {**group, "group": "mmlu_gen_agg_local", "task": ["mmlu_gen_agg_a_local", "mmlu_gen_agg_b_local"]}))
    # Our tasks alone: lm-eval's own would cost 13 s to index (the name test below has them).
    return TaskManager(include_path=[str(TASKS), str(local)], include_defaults=False)


def run(task, task_manager, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = CannedLM()
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], log_samples=False, task_manager=task_manager)
    return out["results"], lm.prompts


def test_every_task_is_registered_and_the_group_has_57_subjects(task_manager):
    names = set(task_manager.all_tasks)
    assert {"hellaswag_gen", "arc_challenge_gen", "piqa_gen", "mmlu_gen"} <= names
    group = load_yaml(TASKS / "mmlu_gen" / "_mmlu_gen.yaml", resolve_func=False)
    assert len(group["task"]) == len(set(group["task"])) == 57 and set(group["task"]) <= names
    assert group["aggregate_metric_list"] == [{"metric": "acc", "aggregation": "mean", "weight_by_size": False}]


def test_lm_evals_likelihood_tasks_keep_their_names_beside_ours(shipped_tasks):
    assert {"hellaswag", "arc_challenge", "piqa", "mmlu", "hellaswag_gen", "mmlu_gen"} <= set(shipped_tasks.all_tasks)


@pytest.mark.slow
def test_hellaswag_gen(task_manager, monkeypatch):
    results, prompts = run("hellaswag_gen_local", task_manager, monkeypatch)
    assert results["hellaswag_gen_local"]["acc,none"] == 0.5
    prompt = prompts[0]
    assert prompt.startswith("Continue the following text without adding any additional information or "
                             "formatting:\n\nExample context 0. It\nA) ending 0a.\nB) ending 0b.")
    assert prompt.count("What is the right option?") == 11  # ten shots and the problem
    assert "D) ending 9d.\nWhat is the right option?\nB\n\nA woman puts" in prompt  # shot 9's gold is B
    assert prompt.endswith("\n\nA woman puts dough on a tray. She\nA) puts the tray in the oven.\n"
                           "B) eats the tray.\nC) paints the dough. blue.\nD) sings.\nWhat is the right option?")


def test_arc_challenge_gen(task_manager, monkeypatch):
    results, prompts = run("arc_challenge_gen_local", task_manager, monkeypatch)
    assert results["arc_challenge_gen_local"]["acc,none"] == 0.5
    assert prompts[0] == ("Question: Which gas do plants take in?\nA. carbon dioxide\nB. helium\nC. neon\n"
                          "D. argon\nAnswer:")
    assert len(prompts) == 2  # the three-option question is dropped


def test_piqa_gen(task_manager, monkeypatch):
    results, prompts = run("piqa_gen_local", task_manager, monkeypatch)
    assert results["piqa_gen_local"]["acc,none"] == 0.5
    assert prompts[0] == "To open a jar\nA. hit it with a feather\nB. twist the lid\nAnswer:"


def test_mmlu_gen_subject(task_manager, monkeypatch):
    results, prompts = run("mmlu_gen_anatomy_local", task_manager, monkeypatch)
    assert results["mmlu_gen_anatomy_local"]["acc,none"] == 0.5
    hint = "There is a single choice question about anatomy. Answer the question by replying A, B, C or D.\n"
    prompt = prompts[0]
    assert prompt.startswith(hint + "Question: Dev question 0?\nA. w\nB. x\nC. y\nD. z\nAnswer: A\n\n" + hint)
    assert prompt.count(hint) == 6  # five dev shots and the problem
    assert prompt.endswith(hint + "Question: Which organ pumps blood?\nA. lung\nB. heart\nC. skin\nD. bone\nAnswer:")


def test_mmlu_gen_group_averages_subjects_without_weights(task_manager, monkeypatch):
    results, _ = run("mmlu_gen_agg_local", task_manager, monkeypatch)
    assert results["mmlu_gen_agg_a_local"]["acc,none"] == pytest.approx(2 / 3)
    assert results["mmlu_gen_agg_b_local"]["acc,none"] == 1.0
    assert results["mmlu_gen_agg_local"]["acc,none"] == pytest.approx((2 / 3 + 1) / 2)  # not 3/4
