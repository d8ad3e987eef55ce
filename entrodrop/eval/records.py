"""What evaluations leave behind: one record a point in ``eval/evals.jsonl`` and the run's
``summary.json``, with the best epoch (lowest validation loss) and the best checkpoint (the
target group's average among the most complete scores), and which records may be compared.
"""

import fcntl
import json
import logging
import math
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

from entrodrop.errors import DamagedLineError, naming_full_disk
from entrodrop.method.dropout import AUTO_NOT_FIXED
from entrodrop.storage.files import temp_file

log = logging.getLogger(__name__)
T = TypeVar("T")

# The prompts of a record that does not say: lm-eval's plain text, no chat template.
PLAIN_PROMPTS = {"apply_chat_template": False, "system_instruction": None, "enable_thinking": None}


def best_epoch(evaluations: List[Dict]) -> Dict:
    """The evaluation with the lowest all-token validation loss: the paper's best epoch."""
    return min(evaluations, key=lambda e: e["val_loss"]["all"])


def task_score(result: Dict, metric: str) -> float:
    """The ``metric`` (``"name,filter"``, as lm-eval keys it) of an lm-eval task result.

    Example:
        >>> task_score({"acc,none": 0.5, "acc_norm,none": 0.75}, "acc_norm,none")
        0.75
    """
    if not isinstance(result.get(metric), (int, float)):
        have = sorted(k for k, v in result.items() if "," in k and "_stderr" not in k and isinstance(v, (int, float)))
        raise ValueError(f"the lm-eval result has no metric {metric!r}; it has {have}")
    return float(result[metric])


def group_scores(results: Dict[str, Dict], groups: Dict[str, List[str]], metrics: Dict[str, str]) -> Dict[str, float]:
    """The mean task score of each group (the paper's domain averages), each task by its ``metrics`` entry."""
    return {group: sum(task_score(results[t], metrics[t]) for t in tasks) / len(tasks)
            for group, tasks in groups.items() if tasks}


def group_metrics(groups: Dict[str, List[str]], metrics: Dict[str, str]) -> Dict[str, Dict[str, str]]:
    """What each group average is made of, as records keep it: ``{group: {task: metric}}``."""
    return {group: {t: metrics[t] for t in tasks} for group, tasks in groups.items() if tasks}


def read_lines(path: Path, parse: Callable[[str], T], unterminated_is_cut: bool = False) -> List[T]:
    """``parse`` of each line of ``path``, a file a run appends to a line at a time, each line ending
    in a newline (``evals.jsonl``, torchtune's step log). A last line without its newline that
    ``parse`` refuses (raises ``ValueError``) is a write that did not finish (a full disk, a killed
    process): it is skipped, and a warning names it. With ``unterminated_is_cut``, so is one that
    ``parse`` takes: a step log's value cut short is still a number, another one (a JSON record
    cut short never parses).

    Raises:
        DamagedLineError: a line that ``parse`` refuses and that is not such a cut last line, named
            by file and line. Writes end at the end of the file, so only the last line can be cut
            short; a line before it that cannot be read was changed after it was written, and
            skipping it would leave a record out without a word.
    """
    lines = path.read_bytes().split(b"\n")
    unterminated = lines[-1] != b""
    if not unterminated:
        lines.pop()  # the "" after the final newline
    parsed = []
    for number, data in enumerate(lines, 1):
        line = data.decode(errors="replace")  # as the messages show it
        if not line.strip():
            continue
        cut = number == len(lines) and unterminated
        try:
            if cut and unterminated_is_cut:
                raise ValueError("no newline")
            parsed.append(parse(data.decode()))  # bytes that are no UTF-8: a ValueError, as a line parse refuses
        except ValueError as error:
            if cut:
                log.warning(f"{path}, line {number}: cut short (a write that did not finish: a full disk, a killed "
                            f"process), skipped: {line[:60]!r}")
                continue
            raise DamagedLineError(f"{path}, line {number} cannot be read ({error}), and it is not the last line, "
                                   "the only one a write that did not finish leaves cut short: the line was damaged "
                                   "after it was written (or a record was appended onto a cut one). Repair or delete "
                                   "that line, then run again") from None
    return parsed


def read_evaluations(eval_dir) -> List[Dict]:
    """The records of ``eval_dir/evals.jsonl``, oldest first (none when it does not exist); a cut
    last record skipped (``read_lines``)."""
    path = Path(eval_dir) / "evals.jsonl"
    return read_lines(path, json.loads) if path.exists() else []


def append_record(path: Path, record: Dict) -> None:
    """Append ``record`` to ``path`` as one line, the line before it ended first.

    A last record whose write did not finish (a full disk, a kill) holds nothing readable; left
    there, the next record would be appended onto it (both unreadable), or, on a line of its own,
    leave it in the middle of the file, where readers take it for damage (``read_lines``). So it is
    cut off, as the temporary files of an unfinished save are removed, and a warning names it; a
    last record whole but for its newline (a file edited by hand) gets one. The file is locked
    meanwhile: an offline evaluation may record into a run's folder while the run does, and the
    end of a record the other is writing is no cut one."""
    with path.open("a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released as the file closes
        f.seek(0)
        data = f.read()
        start = data.rfind(b"\n") + 1
        if data[start:]:
            try:
                json.loads(data[start:])
                f.write(b"\n")
            except ValueError:
                line = data.count(b"\n") + 1
                log.warning(f"{path}, line {line}: a record cut short by a write that did not finish, removed "
                            f"before the next is appended: {data[start:start + 60]!r}")
                f.truncate(start)
        f.write((json.dumps(record) + "\n").encode())


def scored_alike(record: Dict, group: str):
    """How ``record`` scored ``group``: its tasks with their metrics, and the documents per task
    (``limit``). Two averages are compared only when this is equal. A record written before
    metrics were recorded read each task's first metric: its tasks count as scored by ``?``."""
    made_of = record.get("metrics", {}).get(group) or {t: "?" for t in record.get("tasks", {})}
    return tuple(sorted(made_of.items())), record.get("limit")


def most_complete(records: List[Dict], target_group: str) -> List[Dict]:
    """The records whose ``target_group`` average may be compared: those measured on the most
    documents per task (every document, ``limit`` null, outranks a subset, a larger limit a
    smaller one) and, among those, scored alike (``scored_alike``) with the newest of them.
    A run's cheap in-training scores (other tasks, a ``limit``ed subset) and its offline scores
    of the full suite land in the same file; averages of other tasks or metrics never compete."""
    scored = [r for r in records if target_group in r.get("groups", {})]
    size = lambda r: math.inf if r.get("limit") is None else r["limit"]  # noqa: E731
    largest = [r for r in scored if size(r) == max(map(size, scored))] if scored else []
    return [r for r in largest if scored_alike(r, target_group) == scored_alike(largest[-1], target_group)]


def scored_by(record: Dict) -> str:
    """The lm-eval backend that scored ``record``'s tasks. Training and the offline evaluations
    before the field was recorded ran the torchtune adapter: a record without it counts as that."""
    return record.get("backend", "torchtune")


def already_scored(records: List[Dict], checkpoint: str, tasks: List[str], limit: Optional[int],
                   validation: bool, backend: str = "torchtune", max_gen_toks: Optional[int] = None,
                   scoring: Optional[Dict] = None) -> bool:
    """Whether a record of ``checkpoint`` (by directory name, so a moved run still matches) holds
    every task of ``tasks`` with the same ``limit``, scored by the same ``backend`` (``scored_by``:
    hf or vllm score otherwise than the adapter, so a request for them is not a repeat), and the
    validation loss when ``validation``. A record that names its default ``max_gen_toks`` must name
    ``max_gen_toks`` (when given): generations of another length are another evaluation. So must
    ``scoring`` (when given: ``{"metrics": {task: metric}, "prompt_format": ...}``, as
    ``Evaluator`` records them): other prompts or metrics give other scores."""
    name = Path(checkpoint).name

    def alike(r: Dict) -> bool:
        if not tasks or scoring is None:
            return True
        used = {t: m for made_of in r.get("metrics", {}).values() for t, m in made_of.items()}
        return (all(used.get(t) == scoring["metrics"][t] for t in tasks)
                and r.get("prompt_format", PLAIN_PROMPTS) == scoring["prompt_format"])

    return any(Path(r["checkpoint"]).name == name and set(tasks) <= set(r.get("tasks", {}))
               and r.get("limit") == limit and (not validation or "val_loss" in r)
               and (not tasks or scored_by(r) == backend)
               and (max_gen_toks is None or r.get("max_gen_toks", max_gen_toks) == max_gen_toks)
               and alike(r) for r in records)


def task_scoring(lm_eval_cfg) -> Dict:
    """How ``evaluation.lm_eval`` scores its tasks, as records keep it (``already_scored``)."""
    return {"metrics": {t: lm_eval_cfg.metrics.get(t) for tasks in lm_eval_cfg.tasks.values() for t in tasks},
            "prompt_format": {"apply_chat_template": bool(lm_eval_cfg.apply_chat_template),
                              "system_instruction": lm_eval_cfg.system_instruction,
                              "enable_thinking": lm_eval_cfg.enable_thinking}}


def metric_fields(record: Dict) -> Dict[str, float]:
    """An evaluation record as flat fields for the metric logger: ``val_loss_<bucket>``,
    ``<group>_average``, ``signal_<measure>`` (``token_dropout.signal: loss``), and at the
    evaluation that fixed j0 of ``midpoint: auto`` (only there) ``midpoint_epoch`` and
    ``midpoint_step``.

    Example:
        >>> j0 = {"target_epoch": 1.5, "step": 6, "fixed_at_step": 12}
        >>> metric_fields({"step": 12, "val_loss": {"all": 2.5}, "groups": {"code": 0.25}, "auto_midpoint": j0})
        {'val_loss_all': 2.5, 'code_average': 0.25, 'midpoint_epoch': 1.5, 'midpoint_step': 6}
    """
    flat = {f"val_loss_{k}": v for k, v in record.get("val_loss", {}).items()}
    flat.update({f"{g}_average": v for g, v in record.get("groups", {}).items()})
    flat.update({f"signal_{k}": v for k, v in record.get("signal", {}).items()})
    j0 = record.get("auto_midpoint")
    if j0 and j0["fixed_at_step"] == record["step"]:
        flat.update(midpoint_epoch=j0["target_epoch"], midpoint_step=j0["step"])
    return flat


def record_evaluation(eval_dir, record: Dict, target_group: str) -> Dict:
    """Append one evaluation to ``evals.jsonl`` and rewrite ``summary.json``: the best checkpoint
    by ``target_group`` average among the most complete scores (``most_complete``; by validation
    loss when no task ran), the best epoch and the minimum validation loss so far, and the j0
    that ``midpoint: auto`` fixed (``auto_midpoint``: target epoch, step, and the step that fixed it)."""
    eval_dir = Path(eval_dir)
    eval_dir.mkdir(parents=True, exist_ok=True)
    with naming_full_disk(eval_dir / "evals.jsonl"):
        append_record(eval_dir / "evals.jsonl", record)
    records = read_evaluations(eval_dir)
    summary: Dict = {"evaluations": len(records)}
    with_loss = [r for r in records if "val_loss" in r]
    scored = most_complete(records, target_group)
    if with_loss:
        lowest = best_epoch(with_loss)
        summary.update(best_epoch=lowest["target_epoch"], best_epoch_step=lowest["step"],
                       min_val_loss=lowest["val_loss"]["all"])
    fixed = [r["auto_midpoint"] for r in records if r.get("auto_midpoint")]
    if fixed:  # midpoint: auto, once it has fixed j0 (every later record carries it)
        summary["auto_midpoint"] = fixed[-1]
    elif any("auto_midpoint" in r for r in records):  # midpoint: auto, not fixed (yet): a baseline so far
        summary.update(auto_midpoint=None, auto_midpoint_note=AUTO_NOT_FIXED)
    if scored or with_loss:  # the paper's selection: the target group's average, else the loss
        best = max(scored, key=lambda r: r["groups"][target_group]) if scored else lowest
        by, score = ((f"{target_group} average", best["groups"][target_group]) if scored
                     else ("validation loss", best["val_loss"]["all"]))
        summary["best_checkpoint"] = {"by": by, "score": score, "step": best["step"],
                                      "target_epoch": best["target_epoch"], "path": best["checkpoint"]}
        if scored:  # what the average is made of: the tasks, their metrics and the documents each
            summary["best_checkpoint"].update(limit=best.get("limit"), metrics=best.get("metrics", {}).get(target_group))
    # Replaced whole, never left half-written; through a name of its own, as other processes (an
    # offline evaluation beside the run) may record into the same eval_dir at the same time.
    # A write that fails (a full disk) names summary.json and leaves no temporary file behind.
    fd, partial = temp_file(eval_dir, ".summary.json.tmp-")
    try:
        with naming_full_disk(eval_dir / "summary.json"), os.fdopen(fd, "w") as f:
            f.write(json.dumps(summary, indent=2))
        os.replace(partial, eval_dir / "summary.json")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return summary
