"""``datasets`` sources into token stores (entrodrop.data.store_plans with sources, rendering and
selection, entrodrop.data.token_stores, recipes/tokenize_corpus.py), on fixtures shaped like the
real corpora: NuminaMath-CoT, Infinity-Instruct and rStar-Coder's synthetic_sft, each as local
parquet and as JSON lines, with exact duplicate rows, null and empty columns, and rows longer
than ``max_seq_len``.

The expected stores are computed here from the fixture rows with the rule of the
``entrodrop.data.store_plans`` docstring, not with its functions: each row rendered (a column, a
template, turns as plain text or through ``tokenize_messages``), null or empty rows skipped,
the first row of each distinct text kept, ``numpy.random.default_rng(seed).permutation`` of
those, the validation rows first, then the training rows cut to the budget in whole rows.
"""

import copy
import json
import math
import random
import re
import tracemalloc
from pathlib import Path
from typing import Any, Dict, List, Optional

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TINY
from omegaconf import OmegaConf
from torchtune.data import Message

from entrodrop.config import schemas
from entrodrop.data import selection, store_plans
from entrodrop.data.fingerprints import store_key
from entrodrop.data.sample_store import SampleStore
from entrodrop.data.selection import validation_count
from entrodrop.data.store_plans import plan_corpus
from entrodrop.data.token_stores import write_token_store
from entrodrop.errors import OutputDirError, SourceError
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.storage.files import LOCK_NAME, take_dir_lock

SEQ = 64  # max_seq_len of most tests: the long fixture rows are 70 to 130 tokens
RECIPE = "recipes/tokenize_corpus.py"
TOKENIZER = {"_component_": "entrodrop.models.qwen3.qwen3_tokenizer", "path": str(TINY / "qwen3" / "vocab.json"),
             "merges_file": str(TINY / "qwen3" / "merges.txt"),
             "special_tokens_path": str(TINY / "qwen3" / "tokenizer.json"), "max_seq_len": None}
WORDS = ("the of a to and is in that it for as with was on be by this are from at or an which but not have one all "
         "were we when there can more if no out so said what up its about into than them only other new some could "
         "time these two may then do first any my now such like our over man even most made after also did many "
         "before must through back years where much your way well down should because each just those people how "
         "too little state good very make world still own see men work long get here between both life being under "
         "never day same another know while last might us great old year off come since against go came right used "
         "take three").split()


# ---------------------------------------------------------------------------- fixtures


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def numina_rows() -> List[dict]:
    """AI-MO/NuminaMath-CoT: source, problem, solution, messages (the same two texts as turns)."""
    rng = random.Random(1)
    rows = []
    for i in range(40):
        problem = f"Problem {i}: {words(rng, rng.randint(4, 14))}?"
        solution = f"{words(rng, rng.randint(45, 60) if i % 4 == 0 else rng.randint(6, 20))}. The answer is {i}."
        rows.append({"source": ("olympiads", "synthetic_math", "cn_k12", "aops_forum", "orca_math")[i % 5],
                     "problem": problem, "solution": solution,
                     "messages": [{"role": "user", "content": problem}, {"role": "assistant", "content": solution}]})
    rows[9], rows[17], rows[23] = copy.deepcopy(rows[2]), copy.deepcopy(rows[2]), copy.deepcopy(rows[12])
    rows[5].update(solution=None, messages=None)  # null
    rows[14].update(problem="", messages=[])  # empty
    rows[30]["problem"] = rows[30]["messages"][0]["content"] = " \n"  # a blank field; its turns still hold the solution
    return rows


def infinity_rows() -> List[dict]:
    """BAAI/Infinity-Instruct: id, conversations ({from, value}, human / gpt), label, langdetect, source."""
    rng = random.Random(2)
    rows = []
    for i in range(30):
        turns = [{"from": ("human", "gpt")[k % 2],
                  "value": f"{words(rng, rng.randint(45, 60) if k % 2 and i % 5 == 0 else rng.randint(4, 16))} "
                           f"({i}.{k})"}
                 for k in range(rng.choice([2, 2, 4]))]
        rows.append({"id": str(rng.randrange(10**7)), "conversations": turns,
                     "label": {"ability_en": ["mathematical reasoning"], "ability_zh": ["数学推理"],
                               "cate_ability_en": ["problem solving"], "cate_ability_zh": ["问题求解"]},
                     "langdetect": "en", "source": ("Subjective", "code_exercises", "Orca-math-word-problems")[i % 3]})
    rows[7], rows[21] = copy.deepcopy(rows[3]), copy.deepcopy(rows[10])
    rows[12]["conversations"] = None
    rows[18]["conversations"] = []
    return rows


def rstar_rows() -> List[dict]:
    """microsoft/rStar-Coder synthetic_sft: question, seed_question, seed_source, response, code."""
    rng = random.Random(3)
    rows = []
    for i in range(30):
        code = f"def solve(n):\n    return n * {i} + {rng.randint(0, 9)}\n"
        reasoning = words(rng, rng.randint(45, 60) if i % 6 == 0 else rng.randint(5, 18))
        rows.append({"question": f"Task {i}: given n, {words(rng, rng.randint(5, 12))}.",
                     "seed_question": f"Seed {i % 7}: {words(rng, 6)}",
                     "seed_source": ("codeforces", "atcoder", "codechef")[i % 3],
                     "response": f"{reasoning}\n```python\n{code}```", "code": code})
    rows[11], rows[25] = copy.deepcopy(rows[4]), copy.deepcopy(rows[4])
    rows[8]["response"] = None
    rows[19]["response"] = ""
    rows[27]["code"] = None
    return rows


ROWS = {"numina": numina_rows, "infinity": infinity_rows, "rstar": rstar_rows,
        "nosolution": lambda: [{**r, "solution": None} for r in numina_rows()[:6]]}


def write_rows(rows: List[dict], stem: Path, row_group_size: Optional[int] = None) -> Dict[str, Path]:
    pq.write_table(pa.Table.from_pylist(rows), stem.with_suffix(".parquet"), row_group_size=row_group_size)
    stem.with_suffix(".jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return {"parquet": stem.with_suffix(".parquet"), "json": stem.with_suffix(".jsonl")}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Dict[str, Dict[str, Path]]:
    root = tmp_path_factory.mktemp("sources")
    return {name: write_rows(make(), root / name) for name, make in ROWS.items()}


@pytest.fixture(scope="module")
def tok(tiny_assets):
    d = tiny_assets / "qwen3"
    return qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))


@pytest.fixture(autouse=True)
def no_parquet_stream_sleep(monkeypatch):
    """datasets sleeps SLEEP_TIME_ON_THREADS_SHUTDOWN (5 s) after each full pass over a streamed
    parquet source (a workaround for apache/arrow#45214 at interpreter exit); in process, a pass
    here need not wait."""
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)


# ---------------------------------------------------------------------------- the documented rule


def blank(value) -> bool:
    return value is None or not value.strip()


ROLES = {"human": "user", "gpt": "assistant"}
# case -> (fixture, the entry's rendering keys, the row rendered as the docstring says: a text,
# (role, text) turns for the chat template, or None for a null or empty row)
CASES: Dict[str, tuple] = {
    "numina-template": ("numina", {"template": "{problem}\n\n{solution}"},
                        lambda r: None if blank(r["problem"]) or blank(r["solution"]) else
                        r["problem"] + "\n\n" + r["solution"]),
    "numina-messages-text": ("numina", {"conversation_column": "messages", "conversation_style": "openai"},
                             lambda r: "\n\n".join(m["content"] for m in r["messages"]) if r["messages"] else None),
    "numina-messages-chat": ("numina", {"conversation_column": "messages", "conversation_style": "openai",
                                        "chat_template": True},
                             lambda r: [(m["role"], m["content"]) for m in r["messages"]] if r["messages"] else None),
    "infinity-text": ("infinity", {"conversation_column": "conversations", "conversation_style": "sharegpt"},
                      lambda r: "\n\n".join(t["value"] for t in r["conversations"]) if r["conversations"] else None),
    "infinity-chat": ("infinity", {"conversation_column": "conversations", "conversation_style": "sharegpt",
                                   "chat_template": True},
                      lambda r: [(ROLES[t["from"]], t["value"]) for t in r["conversations"]] if r["conversations"]
                      else None),
    "rstar-column": ("rstar", {"column": "response"}, lambda r: None if blank(r["response"]) else r["response"]),
    "rstar-template": ("rstar", {"template": "{question}\n\n{response}"},
                       lambda r: None if blank(r["question"]) or blank(r["response"]) else
                       r["question"] + "\n\n" + r["response"]),
}


def rendered(case: str, rows: Optional[List[dict]] = None) -> list:
    fixture, _, render = CASES[case]
    return [render(r) for r in (ROWS[fixture]() if rows is None else rows)]


def ids(tok, sample) -> List[int]:
    """A text with the tokenizer's BOS/EOS (a blank text: no token), or turns through its chat template."""
    if isinstance(sample, str):
        return tok.encode(sample, add_bos=True, add_eos=True) if sample.strip() else []
    return tok.tokenize_messages([Message(role=role, content=text) for role, text in sample])[0]


def pieces(row_ids: List[int], max_seq_len: int = SEQ, long_samples: str = "split") -> List[List[int]]:
    if long_samples == "truncate":
        return [row_ids[:max_seq_len]]
    return [row_ids[i : i + max_seq_len] for i in range(0, len(row_ids), max_seq_len)] or [[]]


def expected_store(tok, samples: list, max_seq_len: int = SEQ, long_samples: str = "split") -> List[List[int]]:
    return [p for s in samples for p in pieces(ids(tok, s), max_seq_len, long_samples)]


def documented_selection(samples: list, seed: int, validation_size, problems: Optional[list] = None) -> tuple:
    """(validation rows, training rows, null or empty rows, duplicates), by the module docstring:
    ``problems`` is each row's problem text (None, or no list: the row is its own problem)."""
    problems = problems or [None] * len(samples)
    kept, seen = [], set()
    for s, p in zip(samples, problems):
        if s is not None and json.dumps(s) not in seen:
            seen.add(json.dumps(s))
            kept.append((s, " ".join(p.split()).casefold() if p and p.strip() else json.dumps(s)))
    order = [kept[i] for i in np.random.default_rng(seed).permutation(len(kept))]
    distinct = list(dict.fromkeys(p for _, p in order))  # problems in the order of their first row
    n = 0 if validation_size is None else validation_size if isinstance(validation_size, int) else math.ceil(
        validation_size * len(distinct))  # Dataset.train_test_split's test_size
    held = set(distinct[:n])
    skipped = sum(s is None for s in samples)
    return ([s for s, p in order if p in held], [s for s, p in order if p not in held], skipped,
            len(samples) - skipped - len(kept))


def selection_note(path, kind: str, rows: int, skipped: int, duplicates: int, kept: int, problems: int,
                   validation_rows: int, held_out: int, problem_key: str = "problem_key null: each distinct row is "
                   "its own problem") -> str:
    return (f"corpora.t: {kind} {path} (split train): {rows} rows, {skipped} null or empty skipped, {duplicates} exact "
            f"duplicates removed; {kept} rows of {problems} problems ({problem_key}): {kept - problems} rows share "
            f"their problem with an earlier row; {validation_rows} rows of {held_out} problems held out for validation")


# ---------------------------------------------------------------------------- running it


def source_entry(data: Path, store_dir: Path, **keys) -> Dict[str, Any]:
    source = "parquet" if data.suffix == ".parquet" else "json"
    entry = {"source": source, "name": None, "split": "train", "data_files": str(data), "revision": None,
             "streaming": False, "column": None, "template": None, "conversation_column": None,
             "conversation_style": "openai", "chat_template": False, "unknown_roles": "drop", "seed": 0,
             "max_tokens": None, "max_samples": None, "validation_size": None, "validation_store_dir": None,
             "problem_key": None, "long_samples": "split", "store_dir": str(store_dir)}
    if keys.get("validation_size") is not None and "validation_store_dir" not in keys:
        keys["validation_store_dir"] = str(store_dir) + "_val"
    return {**entry, **keys}


def case_entry(files, case: str, kind: str, store_dir: Path, **keys) -> Dict[str, Any]:
    fixture, rendering, _ = CASES[case]
    return source_entry(files[fixture][kind], store_dir, **{**rendering, **keys})


def write(entry: Dict[str, Any], tok, max_seq_len: int = SEQ, samples_per_shard: int = 4, name: str = "t") -> List[str]:
    """plan_corpus and write_token_store of every store of an entry, as the recipe does in one
    process: the notes of the plan and the lines of each store, in order."""
    plans = plan_corpus(name, entry)
    lines = [note for plan in plans for note in plan.notes]
    for plan in plans:
        lines += write_token_store(plan, tok, store_key(TOKENIZER, plan.description, max_seq_len), max_seq_len,
                                   samples_per_shard)
    return lines


def stored(store_dir) -> List[List[int]]:
    store = SampleStore(str(store_dir), "tokens")
    return [store[i].tolist() for i in range(len(store))]


def tree(root: Path) -> Dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def nothing_written(*store_dirs: Path) -> None:
    """Nothing left in these directories, not even the scratch of the rows tokenized before a
    budget error: they do not exist."""
    for d in store_dirs:
        assert not d.exists(), (d, sorted(p.name for p in d.iterdir()))


# ---------------------------------------------------------------------------- 1, 2: kinds, renderings, order


@pytest.mark.parametrize("case, kind", [
    ("numina-template", "parquet"), ("numina-template", "json"), ("numina-messages-text", "parquet"),
    ("numina-messages-chat", "json"), ("infinity-text", "json"), ("infinity-chat", "parquet"),
    ("rstar-column", "parquet"), ("rstar-template", "json"),
])
def test_every_kind_and_rendering_stores_the_documented_selection(files, tok, tmp_path, case, kind):
    seed, held_out = 5, 3
    entry = case_entry(files, case, kind, tmp_path / "train", seed=seed, validation_size=held_out)
    lines = write(entry, tok)
    samples = rendered(case)
    validation, train, skipped, duplicates = documented_selection(samples, seed, held_out)
    assert skipped and duplicates and any(len(ids(tok, s)) > SEQ for s in train), "the fixture misses a case"
    kept = len(samples) - skipped - duplicates
    assert lines[0] == selection_note(files[CASES[case][0]][kind], kind, len(samples), skipped, duplicates, kept, kept,
                                      held_out, held_out)
    for store_dir, rows, role in [(tmp_path / "train_val", validation, "validation"),
                                  (tmp_path / "train", train, "train")]:
        expected = expected_store(tok, rows)
        assert stored(store_dir) == expected, role
        manifest = SampleStore(str(store_dir), "tokens").manifest
        assert manifest["num_tokens"] == sum(map(len, expected))
        assert (manifest["source"]["role"], manifest["source"]["seed"]) == (role, seed)
    if entry["chat_template"]:  # each row's ids are tokenize_messages of its turns, not their plain text
        row = ROWS[CASES[case][0]]()[0]
        turns = row["messages"] if "messages" in row else row["conversations"]
        chat = tok.tokenize_messages([Message(role=t.get("role") or ROLES[t["from"]],
                                              content=t.get("content") or t["value"]) for t in turns])[0]
        text = tok.encode("\n\n".join(t.get("content") or t["value"] for t in turns), add_bos=True, add_eos=True)
        everything = [t for s in stored(tmp_path / "train_val") + stored(tmp_path / "train") for t in s]
        assert chat != text and contains(everything, chat) and not contains(everything, text)


def contains(haystack: List[int], needle: List[int]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def test_jsonl_path_entry_stores_every_record_in_file_order(files, tok, tmp_path):
    """A JSON-lines entry (path, text_field; long_samples left out: split): no dedup, no shuffle."""
    (plan,) = plan_corpus("code", {"path": str(files["rstar"]["json"]), "text_field": "question",
                                    "store_dir": str(tmp_path / "code")})
    write_token_store(plan, tok, store_key(TOKENIZER, plan.description, 16), 16, 4)
    questions = [r["question"] for r in rstar_rows()]
    assert len(set(questions)) < len(questions), "the fixture has duplicates"
    assert stored(tmp_path / "code") == expected_store(tok, questions, 16)
    assert plan.notes == [f"corpora.code: {files['rstar']['json']}: 30 samples, 30 non-blank"]


def test_a_store_another_run_writes_is_refused_and_a_rerun_removes_what_a_stopped_writer_left(files, tok, tmp_path):
    """Two tokenize runs into one store: the second removed or replaced the first's shards half
    written (Errno 39) and left a .shard-*.tmp-* folder in the finished store."""
    (plan,) = plan_corpus("code", {"path": str(files["rstar"]["json"]), "text_field": "question",
                                    "store_dir": str(tmp_path / "code")})
    key = store_key(TOKENIZER, plan.description, 16)
    with take_dir_lock(tmp_path / "code", "corpora.code.store_dir"):  # a live run writing it
        with pytest.raises(OutputDirError) as refused:
            write_token_store(plan, tok, key, 16, 4)
    assert str(refused.value).startswith(f"corpora.code.store_dir={tmp_path / 'code'} is in use by another run: PID ")
    assert str(refused.value).endswith("or write elsewhere with another corpora.code.store_dir")
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == [LOCK_NAME]  # nothing written
    write_token_store(plan, tok, key, 16, 4)
    (tmp_path / "code" / ".shard-00000.tmp-x1").mkdir()  # left by a run stopped beside the one that finished
    lines = write_token_store(plan, tok, key, 16, 4)
    assert lines == [f"removed {tmp_path / 'code' / '.shard-00000.tmp-x1'}, a shard left half written by a run that "
                     f"was stopped", f"corpora.code: {tmp_path / 'code'} is complete already (the same source, "
                     "selection and tokenizer)"]
    assert stored(tmp_path / "code") == expected_store(tok, [r["question"] for r in rstar_rows()], 16)


# ---------------------------------------------------------------------------- 3: budgets, seeds


def documented_budget(row_tokens: List[int], max_tokens: int) -> tuple:
    """(which rows max_tokens takes, how many it skipped, why it stopped), by the module
    docstring: a row that fits what is left is taken, one that does not is skipped; the end is
    the budget met exactly, 100 rows in a row that did not fit, or the last row."""
    taken, total, misfits, skipped, why = [], 0, 0, 0, "the rows ran out"
    for n in row_tokens:
        if total == max_tokens or misfits == selection.MISFITS_TO_STOP:
            why = "met exactly" if total == max_tokens else f"100 rows in a row did not fit the {max_tokens - total} tokens left"
            taken.append(False)
        elif total + n > max_tokens:
            misfits, skipped = misfits + 1, skipped + 1
            taken.append(False)
        else:
            total, misfits = total + n, 0
            taken.append(True)
    return taken, skipped, "met exactly" if total == max_tokens else why


@pytest.mark.parametrize("where", ["at a row's end", "one token before the next row's end", "every row exactly"])
def test_max_tokens_skips_a_row_that_does_not_fit_and_says_why_it_stopped(files, tok, tmp_path, where):
    seed, k = 11, 12
    _, train, _, _ = documented_selection(rendered("numina-template"), seed, None)
    row_tokens = [len(ids(tok, s)) for s in train]
    ends = np.cumsum(row_tokens)
    max_tokens = int({"at a row's end": ends[k - 1], "one token before the next row's end": ends[k] - 1,
                      "every row exactly": ends[-1]}[where])
    taken, skipped, why = documented_budget(row_tokens, max_tokens)
    rows = [s for s, t in zip(train, taken) if t]
    tokens = sum(n for n, t in zip(row_tokens, taken) if t)
    assert any(len(ids(tok, s)) > SEQ for s in rows), "a split row counts all its pieces"
    if where == "one token before the next row's end":
        assert not taken[k] and any(taken[k + 1:]), "row k does not fit; a later, shorter one is taken"
        assert tokens > ends[k - 1] and skipped, "more than the prefix before the row that did not fit"
    entry = case_entry(files, "numina-template", "parquet", tmp_path / "s", seed=seed, max_tokens=max_tokens)
    lines = write(entry, tok)
    expected = expected_store(tok, rows)
    assert stored(tmp_path / "s") == expected
    assert f"corpora.t: {len(rows)} rows, {len(expected)} samples, {tokens} tokens (max_tokens {max_tokens})" in lines
    assert (f"corpora.t: max_tokens {max_tokens}: {tokens} tokens selected ({tokens / max_tokens:.2%}), {len(rows)} "
            f"rows taken, {skipped} rows that did not fit what was left skipped; stopped: {why}") in "\n".join(lines)


def test_max_samples_takes_exactly_that_many_rows(files, tok, tmp_path):
    seed = 2
    write(case_entry(files, "infinity-chat", "json", tmp_path / "s", seed=seed, max_samples=7, validation_size=0.3),
          tok)
    validation, train, _, _ = documented_selection(rendered("infinity-chat"), seed, 0.3)
    assert len(validation) == 8 == validation_count(0.3, 26)
    assert stored(tmp_path / "s_val") == expected_store(tok, validation)
    assert stored(tmp_path / "s") == expected_store(tok, train[:7])


def test_the_same_seed_gives_the_same_bytes_and_another_seed_another_order(files, tok, tmp_path):
    for name, seed in [("a", 0), ("b", 0), ("c", 1)]:
        write(case_entry(files, "numina-template", "parquet", tmp_path / name, seed=seed, validation_size=4), tok)
    for suffix in ("", "_val"):
        a, b, c = (tree(tmp_path / f"{n}{suffix}") for n in "abc")
        assert len([f for f in a if f.endswith("tokens.npy")]) > 1, "several shards"
        assert a == b
    a, c = stored(tmp_path / "a_val") + stored(tmp_path / "a"), stored(tmp_path / "c_val") + stored(tmp_path / "c")
    assert a != c and sorted(a) == sorted(c)  # the same rows, in another order


# ---------------------------------------------------------------------------- 4: the split


@pytest.mark.parametrize("validation_size", [0.2, 7])
def test_validation_and_training_are_disjoint_and_deduplicated(files, tok, tmp_path, validation_size):
    """One sample a row (max_seq_len 4096): the stores' rows, as sets, against the fixture's texts."""
    lines = write(case_entry(files, "numina-template", "json", tmp_path / "s", validation_size=validation_size), tok,
                  max_seq_len=4096)
    validation, train = (list(map(tuple, stored(tmp_path / d))) for d in ("s_val", "s"))
    distinct = {tuple(ids(tok, s)) for s in rendered("numina-template") if s is not None}
    assert len(distinct) == 34
    assert (len(validation), len(train)) == (7, 27)
    assert len(set(validation)) == 7 and len(set(train)) == 27 and not set(validation) & set(train)
    assert set(validation) | set(train) == distinct
    assert ("3 null or empty skipped, 3 exact duplicates removed; 34 rows of 34 problems (problem_key null: each "
            "distinct row is its own problem): 0 rows share their problem with an earlier row; 7 rows of 7 problems "
            "held out for validation") in lines[0]


@pytest.mark.parametrize("fraction, rows", [(0.25, 10), (0.05, 10), (0.25, 34)])
def test_a_fraction_holds_out_as_train_test_split_does(fraction, rows):
    split = datasets.Dataset.from_dict({"a": list(range(rows))}).train_test_split(test_size=fraction, seed=0)
    assert validation_count(fraction, rows) == len(split["test"])


def repeated_problem_rows() -> List[dict]:
    """NuminaMath-shaped rows in which problems come back: a second (and third) solution of one
    problem, the same prompt retyped with other whitespace and case, and a row with no prompt."""
    rng = random.Random(7)
    rows = []
    for i in range(30):
        problem = f"Problem {i}: {words(rng, rng.randint(5, 9))}?"
        rows.append({"problem": problem, "solution": f"{words(rng, rng.randint(6, 12))}. The answer is {i}."})
    for i in range(0, 30, 2):  # 15 problems with a second solution, every third of them retyped
        retyped = "  " + rows[i]["problem"].upper().replace(" ", " \n ") if i % 3 == 0 else rows[i]["problem"]
        rows.append({"problem": retyped, "solution": f"Another way: {words(rng, 8)}. So {i}."})
    rows.append({"problem": rows[4]["problem"], "solution": f"A third way. {words(rng, 6)}."})
    rows.append({"problem": None, "solution": "A solution whose problem is lost."})
    for r in rows:
        r["messages"] = [{"role": "user", "content": r["problem"] or ""}, {"role": "assistant", "content": r["solution"]}]
    return rows


def problem_of(text: Optional[str]) -> Optional[str]:
    return " ".join(text.split()).casefold() if text and text.strip() else None


@pytest.mark.parametrize("kind, keys", [
    ("parquet", {"template": "Q: {solution}", "problem_key": "problem"}),
    ("json", {"conversation_column": "messages", "problem_key": "first_user_turn"}),
])
def test_every_row_of_a_problem_is_on_one_side(tok, tmp_path, kind, keys):
    """Two solutions of one problem (or the same prompt retyped) never put the problem in both
    stores; the log counts the rows that share a problem."""
    rows = repeated_problem_rows()
    path = write_rows(rows, tmp_path / "numina")[kind]
    seed, held_out = 3, 6
    render_row = ((lambda r: "Q: " + r["solution"]) if "template" in keys else
                  (lambda r: "\n\n".join(m["content"] for m in r["messages"])))
    samples = [render_row(r) for r in rows]
    problems = [r["problem"] for r in rows]
    validation, train, skipped, duplicates = documented_selection(samples, seed, held_out, problems)
    problem = {s: problem_of(p) or s for s, p in zip(samples, problems)}
    assert not {problem[s] for s in validation} & {problem[s] for s in train}
    assert len(validation) > held_out, "a held-out problem with two solutions: both rows held out"
    # The rule it replaces, each distinct row its own problem, puts some problem on both sides here.
    old_validation, old_train, _, _ = documented_selection(samples, seed, held_out)
    assert {problem_of(dict(zip(samples, problems))[s]) for s in old_validation} & {
        problem_of(dict(zip(samples, problems))[s]) for s in old_train}

    entry = source_entry(path, tmp_path / "s", seed=seed, validation_size=held_out, **keys)
    lines = write(entry, tok, max_seq_len=4096)
    assert stored(tmp_path / "s_val") == expected_store(tok, validation, 4096)
    assert stored(tmp_path / "s") == expected_store(tok, train, 4096)
    kept = len(samples) - skipped - duplicates
    distinct = len({problem[s] for s in samples})
    assert (kept, distinct) == (47, 31)
    assert lines[0] == selection_note(path, kind, len(rows), skipped, duplicates, kept, distinct, len(validation),
                                      held_out, f"problem_key {keys['problem_key']}, whitespace and case ignored")
    if keys["problem_key"] == "problem":
        assert "corpora.t: 1 rows have no problem (null, empty or not text): each is its own problem" in lines


def test_a_streamed_source_holds_out_every_row_of_its_first_problems(tok, tmp_path):
    rows = repeated_problem_rows()
    path = write_rows(rows, tmp_path / "numina")["json"]
    seed, held_out = 5, 4
    entry = source_entry(path, tmp_path / "s", seed=seed, validation_size=held_out, streaming=True,
                         template="{problem}\n\n{solution}", problem_key="problem")
    lines = write(entry, tok, max_seq_len=4096)
    stream = list(datasets.load_dataset("json", data_files=str(path), split="train", streaming=True)
                  .shuffle(seed=seed, buffer_size=store_plans.SHUFFLE_BUFFER))
    validation, train, held, skipped_as_held = [], [], [], 0
    for r in stream:  # the docstring's rule
        if not r["problem"] or not r["problem"].strip():
            continue
        sample, p = r["problem"] + "\n\n" + r["solution"], problem_of(r["problem"])
        if train or (p not in held and len(held) == held_out):
            if p in held:
                skipped_as_held += 1
            else:
                train.append(sample)
            continue
        held += [] if p in held else [p]
        validation += [] if sample in validation else [sample]
    assert skipped_as_held, "this seed streams a held-out problem's second row after the validation rows"
    assert stored(tmp_path / "s_val") == expected_store(tok, validation, 4096)
    assert stored(tmp_path / "s") == expected_store(tok, train, 4096)
    assert (f"corpora.t: of the rows read, 1 null or empty skipped, {skipped_as_held} skipped: their problem is held "
            "out for validation (problem_key problem, whitespace and case ignored)") in lines


# ---------------------------------------------------------------------------- 5: streaming


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_streamed_source_holds_out_its_first_distinct_rows(files, tok, tmp_path, kind):
    seed, held_out = 3, 4
    path = files["infinity"][kind]
    write(case_entry(files, "infinity-text", kind, tmp_path / "s", streaming=True, seed=seed, validation_size=held_out),
          tok)
    stream = list(datasets.load_dataset(kind, data_files=str(path), split="train", streaming=True)
                  .shuffle(seed=seed, buffer_size=store_plans.SHUFFLE_BUFFER))
    assert [r["id"] for r in stream] != [r["id"] for r in infinity_rows()], "datasets' buffered shuffle"
    validation, train = [], []
    for sample in rendered("infinity-text", stream):
        if sample is None:
            continue
        if len(validation) < held_out:
            validation += [] if sample in validation else [sample]
        elif sample not in validation:
            train.append(sample)
    assert len(set(train)) < len(train), "the training side is not deduplicated: this seed streams a duplicate there"
    assert not set(train) & set(validation)
    assert stored(tmp_path / "s_val") == expected_store(tok, validation)
    assert stored(tmp_path / "s") == expected_store(tok, train)


@pytest.mark.slow
def test_streamed_tokenizing_keeps_python_memory_bounded(tok, tmp_path):
    """A streamed source 10x larger raises the peak of what Python allocates while it is
    tokenized (tracemalloc: the project's lists and arrays, not Arrow's buffers in datasets) by
    a few int64 of bookkeeping a row (_assemble's row tokens, pieces and cut; the samples
    table), under 160 bytes a row: far less than a row's text (~450 bytes here) or its ~150
    token ids, so rows stream through blocks of samples_per_shard and nothing holds them all.
    The peak itself is mostly datasets' constant start of a stream. Parquet with row groups of
    100 rows, which datasets reads a batch at a time (JSON it reads in 10 MB chunks)."""
    rng = random.Random(0)

    def corpus(n: int) -> Dict[str, Any]:
        rows = [{"id": str(i), "conversations": [{"from": "human", "value": f"{words(rng, 30)} {i}"},
                                                  {"from": "gpt", "value": words(rng, 50)}]} for i in range(n)]
        path = write_rows(rows, tmp_path / f"rows{n}", row_group_size=100)["parquet"]
        return source_entry(path, tmp_path / f"store{n}", streaming=True, conversation_column="conversations",
                            conversation_style="sharegpt", validation_size=5)

    def peak(entry) -> tuple:
        plans = plan_corpus("t", entry)
        tracemalloc.start()
        try:
            lines = [line for plan in plans
                     for line in write_token_store(plan, tok, store_key(TOKENIZER, plan.description, 512), 512, 128)]
            return tracemalloc.get_traced_memory()[1], lines
        finally:
            tracemalloc.stop()

    small, large = corpus(800), corpus(8000)
    write({**small, "store_dir": str(tmp_path / "warm"), "validation_store_dir": str(tmp_path / "warm_val")}, tok)
    (small_peak, _), (large_peak, lines) = peak(small), peak(large)
    assert lines[0].startswith("corpora.t: 7995 rows, 7995 samples, ")
    assert any(line.startswith("corpora.t (validation): 5 rows, ") for line in lines)
    per_row = (large_peak - small_peak) / 7200
    assert per_row < 160 and large_peak < 2 * small_peak, (
        f"peak {small_peak / 2**20:.2f} MiB for 800 rows, {large_peak / 2**20:.2f} for 8000: {per_row:.0f} bytes a row")


# ---------------------------------------------------------------------------- 6: long samples


@pytest.mark.parametrize("long_samples", ["split", "truncate"])
def test_long_rows_are_split_without_a_lost_token_or_cut(files, tok, tmp_path, long_samples):
    seq = 32
    lines = write(case_entry(files, "rstar-column", "parquet", tmp_path / "s", long_samples=long_samples), tok,
                  max_seq_len=seq)
    _, train, _, _ = documented_selection(rendered("rstar-column"), 0, None)
    full = [ids(tok, s) for s in train]
    long = [r for r in full if len(r) > seq]
    assert len(long) > 3
    store = stored(tmp_path / "s")
    assert all(len(s) <= seq for s in store)
    manifest = SampleStore(str(tmp_path / "s"), "tokens").manifest
    if long_samples == "split":
        assert store == [p for r in full for p in pieces(r, seq)]
        assert [t for s in store for t in s] == [t for r in full for t in r]
        assert manifest["num_tokens"] == sum(map(len, full))
        assert (f"corpora.t: long samples (split): {len(long)} rows longer than the store's max_seq_len split into "
                f"{sum(-(-len(r) // seq) for r in long)} samples; 0 rows cut, 0 tokens dropped") in lines
    else:
        assert store == [r[:seq] for r in full]
        assert manifest["num_tokens"] == sum(min(len(r), seq) for r in full)
        assert (f"corpora.t: long samples (truncate): 0 rows longer than the store's max_seq_len split into 0 "
                f"samples; {len(long)} rows cut, {sum(len(r) - seq for r in long)} tokens dropped") in lines


# ---------------------------------------------------------------------------- 7: errors


SOURCE_ERRORS = [
    ("missing column", "numina", "parquet", {"column": "answer"},
     "corpora.t.column: no column 'answer' in parquet; its columns are ['source', 'problem', 'solution', 'messages']"),
    ("missing column, streamed JSON", "numina", "json", {"column": "answer", "streaming": True},
     "corpora.t.column: no column 'answer' in json; its columns are ['source', 'problem', 'solution', 'messages']"),
    ("template field", "rstar", "json", {"template": "{question}\n\n{answer}"},
     "corpora.t.template: no template field 'answer' in json; its columns are ['question', 'seed_question', "
     "'seed_source', 'response', 'code']"),
    ("problem_key names no column", "numina", "parquet", {"template": "{problem}\n\n{solution}", "problem_key": "question"},
     "corpora.t.problem_key: no column 'question' in parquet; its columns are ['source', 'problem', 'solution', "
     "'messages']"),
    ("no row has the field", "nosolution", "parquet", {"template": "{problem}\n\n{solution}"},
     "corpora.t: none of the 6 rows of parquet has a non-empty problem / solution"),
    ("a list is no text", "numina", "parquet", {"column": "messages"},
     "corpora.t: row 0 of {path}: column 'messages' holds list, not text"),
    ("sharegpt turns read as openai", "infinity", "parquet",
     {"conversation_column": "conversations", "conversation_style": "openai"},
     "corpora.t: row 0 of {path}: turn 0 of 'conversations' has ['from', 'value'], not 'role' and 'content' "
     "(conversation_style: openai; the other style reads 'from' and 'value')"),
    ("openai turns read as sharegpt", "numina", "json",
     {"conversation_column": "messages", "conversation_style": "sharegpt", "chat_template": True},
     "corpora.t: row 0 of {path}: turn 0 of 'messages' has ['content', 'role'], not 'from' and 'value' "
     "(conversation_style: sharegpt; the other style reads 'role' and 'content')"),
    ("sharegpt turns read as openai, streamed", "infinity", "json",
     {"conversation_column": "conversations", "conversation_style": "openai", "streaming": True},
     "corpora.t: row 0 of {path}: turn 0 of 'conversations' has ['from', 'value'], not 'role' and 'content'"),
    ("validation_size of every row", "numina", "parquet",
     {"template": "{problem}\n\n{solution}", "validation_size": 34},
     "validation_size=34 holds out 34 problems, but the source has 34 distinct problems (34 distinct non-empty rows): "
     "none would be left"),
    ("validation_size above the rows", "numina", "parquet", {"template": "{problem}", "validation_size": 1000},
     "validation_size=1000 holds out 1000 problems, but the source has 35 distinct problems"),
]


@pytest.mark.parametrize("fixture, kind, keys, message", [e[1:] for e in SOURCE_ERRORS],
                         ids=[e[0] for e in SOURCE_ERRORS])
def test_a_source_that_cannot_become_samples_is_refused_before_any_store(files, tmp_path, fixture, kind, keys, message):
    entry = source_entry(files[fixture][kind], tmp_path / "s", **keys)
    with pytest.raises(SourceError, match=re.escape(message.format(path=files[fixture][kind]))):
        plan_corpus("t", entry)
    nothing_written(tmp_path / "s", tmp_path / "s_val")


def test_a_validation_size_error_names_its_corpus(files, tmp_path):
    entry = case_entry(files, "numina-template", "parquet", tmp_path / "s", validation_size=34)
    with pytest.raises(SourceError, match=r"^corpora\.t\b"):
        plan_corpus("t", entry)


@pytest.mark.parametrize("chat_template", [False, True])
def test_a_turn_without_its_role_in_parquet_is_refused(tmp_path, chat_template):
    rows = [{"messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]},
            {"messages": [{"role": "user", "content": "three"}, {"from": "gpt", "value": "four"}]}]
    path = write_rows(rows, tmp_path / "mixed")["parquet"]
    assert pq.read_table(path).to_pylist()[1]["messages"][1] == {"role": None, "content": None, "from": "gpt",
                                                                   "value": "four"}
    entry = source_entry(path, tmp_path / "s", conversation_column="messages", chat_template=chat_template)
    with pytest.raises(SourceError, match="turn 1 of 'messages'"):
        [block() for plan in plan_corpus("t", entry) for block in plan.blocks(10)]


def function_call_rows() -> List[dict]:
    """Infinity-Instruct-shaped conversations, some with a function call and its result, roles
    sharegpt does not know."""
    rows = []
    for i in range(12):
        turns = [{"from": "human", "value": f"question {i}"}]
        if i % 3 == 0:
            turns += [{"from": "function_call", "value": f"lookup({i})"}, {"from": "observation", "value": f"{i * 7}"}]
        rows.append({"conversations": turns + [{"from": "gpt", "value": f"answer {i}"}]})
    return rows


@pytest.mark.parametrize("unknown_roles", ["drop", "keep"])
def test_unknown_roles_are_counted_and_dropped_or_kept_as_the_config_says(tok, tmp_path, unknown_roles):
    path = write_rows(function_call_rows(), tmp_path / "calls")["json"]
    entry = source_entry(path, tmp_path / "s", conversation_column="conversations", conversation_style="sharegpt",
                         unknown_roles=unknown_roles)
    lines = write(entry, tok, max_seq_len=4096)
    assert (f"corpora.t: 8 turns with a role conversation_style sharegpt does not know (function_call: 4, "
            f"observation: 4): {'left out' if unknown_roles == 'drop' else 'kept as they are'} "
            f"(unknown_roles: {unknown_roles})") in lines
    texts = {tok.decode(s) for s in stored(tmp_path / "s")}
    assert any("question 0" in t for t in texts)
    assert any("lookup(0)" in t for t in texts) == (unknown_roles == "keep")


def test_an_unknown_role_is_refused_at_its_place_in_the_file_with_unknown_roles_error(tmp_path):
    path = write_rows(function_call_rows(), tmp_path / "calls")["parquet"]
    entry = source_entry(path, tmp_path / "s", conversation_column="conversations", conversation_style="sharegpt",
                         unknown_roles="error")
    with pytest.raises(SourceError, match=re.escape(
            f"corpora.t: row 0 of {path}: turn 1 of 'conversations' has the role 'function_call', which "
            "conversation_style sharegpt does not know (system, human, user, gpt, assistant): set unknown_roles: drop")):
        plan_corpus("t", entry)
    nothing_written(tmp_path / "s")


def test_a_turn_with_a_null_text_says_its_text_is_null(tmp_path):
    rows = infinity_rows()[:5]
    rows[3]["conversations"][1]["value"] = None
    path = write_rows(rows, tmp_path / "nulls")["json"]
    entry = source_entry(path, tmp_path / "s", conversation_column="conversations", conversation_style="sharegpt")
    with pytest.raises(SourceError, match=re.escape(f"corpora.t: row 3 of {path}: turn 1 of 'conversations' (from "
                                                    "'gpt') has a null 'value' (or none)")):
        plan_corpus("t", entry)


@pytest.mark.parametrize("bad_row", [121, store_plans.CHECKED_ROWS + 100])
def test_a_bad_row_of_a_streamed_source_is_named_by_its_place_in_its_file(tok, tmp_path, bad_row):
    """Within the first CHECKED_ROWS rows it is found before any store is written; after them,
    when the stream reaches it, by its place in the file, not in the shuffled stream."""
    rows = [{"conversations": [{"from": "human", "value": f"q {i}"}, {"from": "gpt", "value": f"a {i}"}]}
            for i in range(store_plans.CHECKED_ROWS + 200)]
    rows[bad_row]["conversations"][1]["value"] = None
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows[:40]))
    second = tmp_path / "second.jsonl"
    second.write_text("".join(json.dumps(r) + "\n" for r in rows[40:]))
    entry = source_entry(first, tmp_path / "s", conversation_column="conversations", conversation_style="sharegpt",
                         streaming=True, validation_size=3) | {"data_files": [str(first), str(second)]}
    message = re.escape(f"corpora.t: row {bad_row - 40} of {second}: turn 1 of 'conversations' (from 'gpt') has a "
                        "null 'value'")
    if bad_row < store_plans.CHECKED_ROWS:
        with pytest.raises(SourceError, match=message):
            plan_corpus("t", entry)
        nothing_written(tmp_path / "s", tmp_path / "s_val")
    else:
        plans = plan_corpus("t", entry)
        with pytest.raises(SourceError, match=message):
            for plan in plans:
                write_token_store(plan, tok, store_key(TOKENIZER, plan.description, SEQ), SEQ, 64)


def damaged_files(root: Path) -> Dict[str, tuple]:
    """Files a user may name in data_files that hold no rows, or no readable ones: (builder, path, what the message says)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "empty.jsonl").write_text("")
    (root / "blank.jsonl").write_text("\n\n")
    (root / "garbage.jsonl").write_text("not json\n{\"a\":\n")
    (root / "empty.parquet").write_bytes(b"")
    (root / "garbage.parquet").write_bytes(b"garbage")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), root / "no_rows.parquet")
    return {
        "empty json": ("json", root / "empty.jsonl", f"{root / 'empty.jsonl'} is empty (0 bytes)"),
        "blank json": ("json", root / "blank.jsonl", "holds no rows"),
        "invalid json": ("json", root / "garbage.jsonl", f"cannot be read as json: Failed to load JSON from file "
                                                         f"'{root / 'garbage.jsonl'}'"),
        "empty parquet": ("parquet", root / "empty.parquet", f"{root / 'empty.parquet'} is empty (0 bytes)"),
        "invalid parquet": ("parquet", root / "garbage.parquet", f"'{root / 'garbage.parquet'}'"),
        "parquet of no rows": ("parquet", root / "no_rows.parquet", "no_rows.parquet"),
    }


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("case", ["empty json", "blank json", "invalid json", "empty parquet", "invalid parquet",
                                  "parquet of no rows"])
def test_a_datasets_file_that_is_empty_or_unreadable_is_one_source_error(tmp_path, capfd, case, streaming):
    builder, path, says = damaged_files(tmp_path / "files")[case]
    entry = source_entry(path, tmp_path / "s", column="text", streaming=streaming) | {"source": builder}
    with pytest.raises(SourceError) as error:
        plan_corpus("t", entry)
    assert str(error.value).startswith("corpora.t") and says in str(error.value), str(error.value)
    assert "\n" not in str(error.value)
    assert "Failed to" not in capfd.readouterr().err, "datasets' own log line is not printed beside the message"
    nothing_written(tmp_path / "s")


def test_an_absolute_glob_in_data_files_is_read(files, tok, tmp_path):
    pattern = str(files["rstar"]["parquet"].parent / "rsta*.parquet")
    write(case_entry(files, "rstar-column", "parquet", tmp_path / "s") | {"data_files": pattern}, tok)
    assert stored(tmp_path / "s") == expected_store(tok, documented_selection(rendered("rstar-column"), 0, None)[1])


def budget_case(files, tok, tmp_path, case: str):
    _, train, _, _ = documented_selection(rendered("numina-template"), 0, 4)
    row_tokens = [len(ids(tok, s)) for s in train]
    total = sum(row_tokens)
    return {
        "more tokens than the rows hold": ({"max_tokens": total + 1}, f"corpora.t: max_tokens={total + 1}, but the "
                                           f"selected rows hold {total} tokens ({len(train)} rows): lower max_tokens"),
        "fewer tokens than every row": ({"max_tokens": min(row_tokens) - 1},
                                        f"corpora.t: max_tokens={min(row_tokens) - 1} is fewer than every selected "
                                        f"row's tokens (the shortest has {min(row_tokens)}): the selection leaves no "
                                        "sample"),
        "more samples than rows": ({"max_samples": len(train) + 1},
                                   f"corpora.t: max_samples={len(train) + 1}, but the selection leaves "
                                   f"{len(train)} rows"),
    }[case]


@pytest.mark.parametrize("case", ["more tokens than the rows hold", "fewer tokens than every row",
                                  "more samples than rows"])
def test_a_budget_the_selection_cannot_fill_is_refused_before_the_store(files, tok, tmp_path, case):
    keys, message = budget_case(files, tok, tmp_path, case)
    entry = case_entry(files, "numina-template", "parquet", tmp_path / "s", validation_size=4, **keys)
    with pytest.raises(SourceError, match=re.escape(message)):
        write(entry, tok)
    nothing_written(tmp_path / "s", tmp_path / "s_val")


def test_a_stream_held_out_whole_leaves_no_training_sample(files, tok, tmp_path):
    entry = case_entry(files, "infinity-text", "json", tmp_path / "s", streaming=True, validation_size=26)
    with pytest.raises(SourceError, match=re.escape("corpora.t: the selection leaves no sample")):
        write(entry, tok)
    nothing_written(tmp_path / "s", tmp_path / "s_val")


@pytest.mark.parametrize("case, skipped, kept", [("numina-template", 3, 34), ("numina-messages-text", 2, 35),
                                                 ("infinity-text", 2, 26), ("rstar-column", 2, 26)])
def test_null_and_empty_rows_are_counted_and_skipped_never_rendered_as_None(files, tok, tmp_path, case, skipped, kept):
    lines = write(case_entry(files, case, "parquet", tmp_path / "s"), tok, max_seq_len=4096)
    assert f", {skipped} null or empty skipped," in lines[0]
    texts = [tok.decode(s) for s in stored(tmp_path / "s")]
    assert len(texts) == kept and all(t.strip() for t in texts)
    assert not any("None" in t for t in texts)


CONFIG_RULES = [
    ({"column": "response", "template": "{question}"},
     "set exactly one of column, template, conversation_column (how a row becomes a sample), "
     "not ['column', 'template']"),
    ({}, "set exactly one of column, template, conversation_column (how a row becomes a sample), not none"),
    ({"column": "response", "max_tokens": 100, "max_samples": 10},
     "max_tokens and max_samples are both set: choose one budget"),
    ({"column": "response", "validation_size": 10, "validation_store_dir": None},
     "validation_size and validation_store_dir go together (both set, or both null)"),
    ({"column": "response", "validation_store_dir": "/tmp/v"},
     "validation_size and validation_store_dir go together (both set, or both null)"),
    ({"column": "response", "chat_template": True},
     "corpora.t.chat_template=True renders turns: it needs conversation_column"),
    ({"column": "response", "streaming": True, "validation_size": 0.1},
     "corpora.t.validation_size=0.1: a streamed source has no known size; hold out a count of rows"),
    ({"column": "response", "data_files": None},
     "corpora.t.data_files=None: the local builder parquet reads data_files"),
    ({"template": "no field"}, "corpora.t.template='no field' names no column"),
    ({"column": "response", "problem_key": "first_user_turn"},
     "corpora.t.problem_key=first_user_turn reads the turns: it needs conversation_column, or name the prompt's column"),
]


@pytest.mark.parametrize("keys, message", CONFIG_RULES)
def test_config_rules_of_a_source_entry(keys, message):
    entry = source_entry(Path("/data/rstar.parquet"), Path("/out/s"), **keys)
    problems = schemas._source_rules(entry, "corpora.t.")
    assert len(problems) == 1 and message in problems[0] and problems[0].startswith("corpora.t"), problems


# ---------------------------------------------------------------------------- the recipe


def recipe_config(path: Path, corpora: Dict[str, dict], max_seq_len: int = SEQ, samples_per_shard: int = 4) -> str:
    OmegaConf.save(OmegaConf.create({"tokenizer": TOKENIZER, "corpora": corpora, "max_seq_len": max_seq_len,
                                     "samples_per_shard": samples_per_shard}), path)
    return str(path)


def test_recipe_reports_every_config_error_before_anything_runs(files, tune_run, tmp_path):
    out = tmp_path / "stores"
    rstar = files["rstar"]["parquet"]
    no_seed = source_entry(rstar, out / "e", column="response")
    del no_seed["seed"]
    config = recipe_config(tmp_path / "c.yaml", {
        "a": source_entry(rstar, out / "a", column="response", template="{question}"),
        "b": source_entry(rstar, out / "b", column="response", max_tokens=100, max_samples=10),
        "c": source_entry(rstar, out / "c", column="response", validation_size=10, validation_store_dir=None),
        "d": source_entry(rstar, out / "d", column="response", chat_template=True),
        "e": no_seed,
    })
    result = tune_run(RECIPE, "--config", config)
    assert result.returncode != 0
    for message in ["set exactly one of column, template, conversation_column (how a row becomes a sample), not "
                    "['column', 'template']", "max_tokens and max_samples are both set: choose one budget",
                    "validation_size and validation_store_dir go together",
                    "corpora.d.chat_template=True renders turns: it needs conversation_column",
                    "missing key: corpora.e.seed"]:
        assert message in result.stderr, message
    assert not out.exists()


def test_recipe_reports_every_unreadable_corpus_and_writes_nothing(files, tune_run, tmp_path):
    """Each in one line, and nothing else: no traceback, no line datasets logs of its own."""
    out = tmp_path / "stores"
    damaged = damaged_files(tmp_path / "damaged")
    config = recipe_config(tmp_path / "c.yaml", {
        "good": case_entry(files, "rstar-column", "parquet", out / "good"),
        "column": source_entry(files["numina"]["parquet"], out / "column", column="answer"),
        "template": source_entry(files["rstar"]["json"], out / "template", template="{question}\n\n{answer}"),
        "turns": source_entry(files["infinity"]["parquet"], out / "turns", conversation_column="conversations"),
        "held_out": case_entry(files, "numina-template", "json", out / "held_out", validation_size=34),
        "nulls": case_entry(files, "numina-template", "parquet", out / "nulls") | {
            "data_files": str(files["nosolution"]["parquet"])},
        "empty": source_entry(damaged["empty json"][1], out / "empty", column="text", streaming=True),
        "damaged": source_entry(damaged["invalid parquet"][1], out / "damaged", column="text"),
        "no_rows": source_entry(damaged["parquet of no rows"][1], out / "no_rows", column="text", streaming=True),
    })
    result = tune_run(RECIPE, "--config", config)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "Failed to" in line]  # datasets' words, in our lines only
    assert said and all(line.startswith("  corpora.") for line in said), said
    assert f"corpora.empty.data_files: {damaged['empty json'][1]} is empty (0 bytes)" in result.stderr
    assert f"corpora.damaged: parquet {damaged['invalid parquet'][1]} (split train) cannot be read as parquet" in result.stderr
    assert "corpora.no_rows: parquet" in result.stderr
    for message in ["corpora that cannot be read, nothing written:",
                    "corpora.column.column: no column 'answer' in parquet; its columns are ['source', 'problem', "
                    "'solution', 'messages']",
                    "corpora.template.template: no template field 'answer' in json; its columns are ['question', "
                    "'seed_question', 'seed_source', 'response', 'code']",
                    f"corpora.turns: row 0 of {files['infinity']['parquet']}: turn 0 of 'conversations' has ['from', "
                    "'value'], not 'role' and 'content'",
                    "validation_size=34 holds out 34 problems, but the source has 34 distinct problems",
                    "corpora.nulls: none of the 6 rows of parquet has a non-empty problem / solution"]:
        assert message in result.stderr, message
    assert not out.exists()


@pytest.fixture(scope="module")
def recipe_stores(files, tok, tune_run, tmp_path_factory):
    """The recipe, one process then two, on NuminaMath (parquet, template, held out, max_tokens,
    split), Infinity-Instruct (streamed JSON, sharegpt, max_samples) and rStar-Coder (a JSON-lines
    path entry, truncate), 4 samples a shard."""
    root = tmp_path_factory.mktemp("recipe")
    _, train, _, _ = documented_selection(rendered("numina-template"), 0, 4)
    ends = np.cumsum([len(ids(tok, s)) for s in train])
    taken, _, _ = documented_budget([len(ids(tok, s)) for s in train], int(ends[20]) - 1)

    # a JSON-lines file has a text in every record: "" for the null responses (empty samples)
    code_rows = [{"response_text": r["response"] or ""} for r in rstar_rows()]
    (root / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in code_rows))

    def corpora(out: Path) -> Dict[str, dict]:
        return {
            "target": case_entry(files, "numina-template", "parquet", out / "target", validation_size=4,
                                 max_tokens=int(ends[20]) - 1, validation_store_dir=str(out / "target_val")),
            "general": case_entry(files, "infinity-text", "json", out / "general", streaming=True, max_samples=13),
            "code": {"path": str(root / "code.jsonl"), "text_field": "response_text", "store_dir": str(out / "code"),
                     "long_samples": "truncate"},
        }

    runs = {}
    for nproc in (1, 2):
        out = root / f"{nproc}proc"
        config = recipe_config(root / f"{nproc}proc.yaml", corpora(out))
        runs[nproc] = {"out": out, "config": config, "result": tune_run(RECIPE, "--config", config, nproc=nproc),
                       "train": [s for s, t in zip(train, taken) if t], "max_tokens": int(ends[20]) - 1,
                       "code": [r["response_text"] for r in code_rows]}
        assert runs[nproc]["result"].returncode == 0, runs[nproc]["result"].stderr[-3000:]
    return runs


def test_recipe_logs_what_it_selected_split_and_cut(recipe_stores, files, tok):
    run = recipe_stores[1]
    log, out = run["result"].stderr, run["out"]
    assert (f"corpora.target: parquet {files['numina']['parquet']} (split train): 40 rows, 3 null or empty skipped, "
            "3 exact duplicates removed; 34 rows of 34 problems") in log
    train = run["train"]
    long = [len(ids(tok, s)) for s in train if len(ids(tok, s)) > SEQ]
    assert len(train) > 20, "rows after the one that did not fit are taken"
    assert long and f"corpora.target: {len(train)} rows, {len(train) + sum(-(-n // SEQ) - 1 for n in long)} samples, " \
                     f"{sum(len(ids(tok, s)) for s in train)} tokens (max_tokens {run['max_tokens']})" in log
    assert (f"corpora.target: long samples (split): {len(long)} rows longer than the store's max_seq_len split into "
            f"{sum(-(-n // SEQ) for n in long)} samples; 0 rows cut, 0 tokens dropped") in log
    assert stored(out / "target") == expected_store(tok, train)
    assert f"corpora.code: {out.parent / 'code.jsonl'}: 30 samples, 28 non-blank" in log
    code = [ids(tok, t) for t in run["code"]]
    cut = [len(c) - SEQ for c in code if len(c) > SEQ]
    assert cut and (f"corpora.code: long samples (truncate): 0 rows longer than the store's max_seq_len split into 0 "
                    f"samples; {len(cut)} rows cut, {sum(cut)} tokens dropped") in log
    assert stored(out / "code") == [c[:SEQ] for c in code]
    assert "corpora.general: 13 rows" in log and "streamed: read in order with a shuffle buffer" in log
    for store in ("target", "target_val", "general", "code"):
        assert f"token store complete at {out / store}" in log


def test_two_processes_write_byte_identical_stores(recipe_stores):
    one, two = recipe_stores[1]["out"], recipe_stores[2]["out"]
    for store in ("target", "target_val", "general", "code"):
        files_one, files_two = tree(one / store), tree(two / store)
        assert sum(f.endswith("tokens.npy") for f in files_one) > 1, "several shards"
        assert "samples.npy" in files_one and "manifest.json" in files_one
        assert files_one == files_two, store


def test_a_rerun_finds_the_stores_complete_and_another_seed_is_refused(recipe_stores, tune_run):
    run = recipe_stores[1]
    before = tree(run["out"])
    again = tune_run(RECIPE, "--config", run["config"])
    assert again.returncode == 0, again.stderr[-3000:]
    for store in ("target", "target_val", "general", "code"):
        assert f"{run['out'] / store} is complete already" in again.stderr, store
    other = tune_run(RECIPE, "--config", run["config"], "corpora.target.seed=1")
    assert other.returncode != 0
    assert f"{run['out'] / 'target'} already holds another token store" in other.stderr
    assert "source.seed: store has 0, now 1" in other.stderr
    assert tree(run["out"]) == before


def test_a_rerun_writes_a_deleted_or_cut_file_of_a_complete_store_again(files, tok, tmp_path):
    """What the token store's error says to do: the same config again. Before, the rerun found the
    store complete and wrote nothing, and the store stayed broken."""
    entry = {"path": str(files["rstar"]["json"]), "text_field": "question", "store_dir": str(tmp_path / "code")}
    write(entry, tok, name="code")
    before = tree(tmp_path / "code")
    (tmp_path / "code" / "shard-00001" / "tokens.npy").unlink()
    cut = tmp_path / "code" / "shard-00003" / "samples.npy"
    cut.write_bytes(cut.read_bytes()[:-1])
    lines = write(entry, tok, name="code")
    assert lines[-1] == f"corpora.code: token store complete at {tmp_path / 'code'}", lines
    assert tree(tmp_path / "code") == before


def test_a_killed_run_resumed_with_another_samples_per_shard_loses_no_row(tok, tmp_path):
    """Parts are blocks of samples_per_shard rows: a run killed after its first block and rerun
    with another samples_per_shard must not take that block for one of the new size."""
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": f"record number {i}"}) + "\n" for i in range(20)))
    entry = {"path": str(path), "text_field": "text", "store_dir": str(tmp_path / "s")}

    def run(samples_per_shard: int, kill_after: Optional[int] = None) -> None:
        (plan,) = plan_corpus("c", entry)
        blocks = plan.blocks

        def killed(n: int):
            for k, block in enumerate(blocks(n)):
                if k == kill_after:
                    raise KeyboardInterrupt
                yield block

        plan.blocks = killed
        write_token_store(plan, tok, store_key(TOKENIZER, plan.description, SEQ), SEQ, samples_per_shard)

    with pytest.raises(KeyboardInterrupt):
        run(4, kill_after=1)
    run(8)
    assert stored(tmp_path / "s") == expected_store(tok, [f"record number {i}" for i in range(20)])
