"""Validation loss by entropy bucket, the paper's diagnostic of multi-epoch overfitting.

Held-out target samples (a token store and their entropy cache, computed with the base
model like the training ones) are packed in order into rows. Their tokens fall in three
buckets, over all N held-out tokens that have an entropy:

    all    every predicted token
    low    the floor(N / 2) lowest-entropy tokens (the paper's "top 50% confidence")
    high   the floor(N / 4) highest-entropy tokens ("bottom 25% confidence")

Exact shares of one order of all N tokens: by entropy, equal entropies by position in the
store (sample index, then position within the sample), earlier first - the order in which the
training gate (``entrodrop.method.entropy_gate``, ``targeting: low``) takes tokens. Low is the
first floor(N / 2) of that order, high the last floor(N / 4), so the two never share a token.
A threshold (``H >= quantile``) would take every tie: the cache stores fp16, and on the tiny
models, whose entropies take two values, the "high 25%" held every token.

A token's bucket is that of the token being predicted (its label), whose entropy H(x_t) is
the base model's uncertainty about it.
"""

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from entrodrop.config_check import raise_problems
from entrodrop.loader import IGNORE_INDEX, TARGET, block_causal_mask, check_join, pack_rows
from entrodrop.method import AUTO_NOT_FIXED
from entrodrop.sample_store import SampleStore
from entrodrop.task_checks import check_metrics, check_packages, members

LOW_FRACTION, HIGH_FRACTION = 0.5, 0.25
# A token's bucket: LOW, HIGH, or 0 (neither, or no entropy).
LOW, HIGH = 1, 2
TASKS_DIR = Path(__file__).resolve().parent / "tasks"
# The sandboxed tasks in TASKS_DIR, for lm-eval's code tasks.
SANDBOXED = "humaneval_sandbox, mbpp_sandbox, livecodebench_v1 (or humaneval_pass1 offline)"
# The prompts of a record that does not say: lm-eval's plain text, no chat template.
PLAIN_PROMPTS = {"apply_chat_template": False, "system_instruction": None, "enable_thinking": None}
BUCKETS = ("all", "low", "high")


def entropy_buckets(entropies: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Each sample's ``uint8`` bucket per token (``LOW``, ``HIGH``; 0: neither, or no entropy)
    from every sample's entropies in store order, the exact shares of the module docs.

    Computed once over the whole held-out set, because a bucket is a share of all its tokens:
    every rank computes the same flags and then packs only its own rows.

    Example:
        >>> nan = float("nan")
        >>> [f.tolist() for f in entropy_buckets([np.array([nan, 1.0, 1.0]), np.array([nan, 3.0, 1.0, 2.0])])]
        [[0, 1, 1], [0, 2, 0, 0]]
    """
    values = np.concatenate([np.zeros(0, np.float32), *(np.asarray(h, np.float32) for h in entropies)])
    has_entropy = np.flatnonzero(~np.isnan(values))
    h = values[has_entropy]
    flags = np.zeros(len(values), np.uint8)
    # A stable sort keeps equal entropies in store order (sample, then position): earlier first.
    # floor(n * 0.5) and floor(n * 0.25) are exact, so no rounding guard as in entropy_gate.
    order = has_entropy[np.argsort(h, kind="stable")]
    flags[order[: math.floor(len(h) * LOW_FRACTION)]] = LOW
    flags[order[len(h) - math.floor(len(h) * HIGH_FRACTION):]] = HIGH
    ends = np.cumsum([len(x) for x in entropies], dtype=np.int64)
    return [flags[end - len(x) : end] for x, end in zip(entropies, ends)]


def open_validation(tokens_dir: Optional[str], entropy_dir: Optional[str]) -> Optional[Tuple[SampleStore, SampleStore]]:
    """The held-out token store and its entropy cache (None when ``tokens_dir`` is null), checked
    before any model loads: the cache was computed on these samples (``check_join``) and the
    token files hold the ids they were written with (``SampleStore.check_tokens``)."""
    if not tokens_dir:
        return None
    tokens, entropy = SampleStore(tokens_dir, "tokens"), SampleStore(entropy_dir, "entropy")
    check_join(tokens, entropy)
    tokens.check_tokens()
    return tokens, entropy


def validation_batches(tokens: SampleStore, entropy: SampleStore, buckets: Sequence[np.ndarray], seq_len: int,
                       batch_size: int, rank: int = 0, world_size: int = 1) -> Iterator[Dict[str, torch.Tensor]]:
    """The held-out samples packed in order into rows; rank r gets rows r, r + N, ... in batches.
    ``buckets``: each sample's bucket flags (``entropy_buckets`` of ``entropy``), which the
    batches carry as ``batch["bucket"]`` (``[b, s]`` uint8, 0 where a row has no sample).

    Every rank yields the same number of batches (padded with empty rows), so a sharded model
    runs the same forwards on every rank.
    """
    rows, row, free = [], [], seq_len
    for i in range(len(tokens)):
        n = int(tokens.table[i]["length"])
        if n == 0:
            continue
        if n > free:
            rows.append(row)
            row, free = [], seq_len
        row.append((TARGET, i))
        free -= n
    rows.append(row)
    per_rank = math.ceil(len(rows) / world_size / batch_size) * batch_size
    mine = rows[rank::world_size]
    mine += [[] for _ in range(per_rank - len(mine))]

    def fetch(domain: int, i: int):
        ids = tokens[i]
        entropy.check_sample(i, ids)
        return ids, buckets[i]

    for start in range(0, per_rank, batch_size):
        batch = pack_rows(mine[start : start + batch_size], seq_len, fetch)
        # pack_rows lays out what fetch returns beside the ids as float32 "entropy", NaN outside
        # the samples: here those values are the bucket flags (0 to 3, exact in float32).
        batch["bucket"] = batch.pop("entropy").nan_to_num(0).to(torch.uint8)
        yield batch


@torch.no_grad()
def bucket_loss_sums(model: torch.nn.Module, batch: Dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """``[6]`` float64: (loss sum, token count) for all, low and high, on one batch, its tokens
    bucketed by ``batch["bucket"]`` (``[b, s]`` flags of the input tokens, see ``validation_batches``)."""
    batch = {k: v.to(device) for k, v in batch.items()}
    logits = model(batch["tokens"], mask=block_causal_mask(batch["document_ids"]), input_pos=batch["input_pos"])
    chunks = logits if isinstance(logits, list) else [logits]
    labels = batch["labels"].chunk(len(chunks), dim=1)
    # Chunks split the sequence: rejoin each chunk's [b, s / n] losses along it, so that they
    # line up with the [b, s] entropies and labels flattened below.
    losses = torch.cat([
        F.cross_entropy(c.float().flatten(0, 1), l.flatten(), ignore_index=IGNORE_INDEX, reduction="none").view(l.shape)
        for c, l in zip(chunks, labels)
    ], dim=1).flatten()
    # The bucket of the predicted token: the input's flags one position to the right.
    label_bucket = torch.cat([batch["bucket"][:, 1:], torch.zeros_like(batch["bucket"][:, :1])], 1).flatten()
    valid = batch["labels"].flatten() != IGNORE_INDEX
    masks = [valid, valid & (label_bucket == LOW), valid & (label_bucket == HIGH)]
    return torch.stack([x for m in masks for x in (losses[m].double().sum(), m.double().sum())])


def validation_losses(model: torch.nn.Module, batches: Iterator[Dict[str, torch.Tensor]], device: torch.device,
                      distributed: bool = False) -> Dict[str, float]:
    """Mean loss per bucket over all batches (and all ranks when ``distributed``: each rank's
    rows are disjoint and its flags are shares of the whole set, so the summed counts are exact)."""
    totals = torch.zeros(6, dtype=torch.float64, device=device)
    for batch in batches:
        totals += bucket_loss_sums(model, batch, device)
    if distributed:
        dist.all_reduce(totals)
    return {name: (totals[2 * k] / totals[2 * k + 1]).item() for k, name in enumerate(BUCKETS)}


def crossed_multiple(before: float, after: float, every: int) -> bool:
    """Whether a multiple of ``every`` lies in (before, after]: ``floor(x / every)`` went up.

    Example:
        >>> crossed_multiple(1.9, 2.1, 2), crossed_multiple(2.1, 3.9, 2), crossed_multiple(3.9, 4.0, 2)
        (True, False, True)
    """
    return math.floor(after / every) > math.floor(before / every)


def evaluation_due(step: int, num_steps: int, epoch_before: float, epoch_after: float,
                   every_n_steps: Optional[int], every_n_epochs: Optional[int]) -> bool:
    """Whether the run evaluates after ``step`` (counted from 1), the step that took the logged
    target epoch from ``epoch_before`` to ``epoch_after``: every ``every_n_steps`` steps, when
    the target epoch crosses a multiple of ``every_n_epochs`` (null: neither), and always at the
    last step, so every run ends with a score.

    Example:
        >>> [s for s in range(1, 11) if evaluation_due(s, 10, (s - 1) / 2, s / 2, None, 2)]  # 2 steps an epoch
        [4, 8, 10]
    """
    return (step == num_steps
            or (every_n_steps is not None and step % every_n_steps == 0)
            or (every_n_epochs is not None and crossed_multiple(epoch_before, epoch_after, every_n_epochs)))


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


def read_evaluations(eval_dir) -> List[Dict]:
    """The records of ``eval_dir/evals.jsonl``, oldest first (none when it does not exist)."""
    path = Path(eval_dir) / "evals.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


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


def record_evaluation(eval_dir, record: Dict, target_group: str) -> Dict:
    """Append one evaluation to ``evals.jsonl`` and rewrite ``summary.json``: the best checkpoint
    by ``target_group`` average among the most complete scores (``most_complete``; by validation
    loss when no task ran), the best epoch and the minimum validation loss so far, and the j0
    that ``midpoint: auto`` fixed (``auto_midpoint``: target epoch, step, and the step that fixed it)."""
    eval_dir = Path(eval_dir)
    eval_dir.mkdir(parents=True, exist_ok=True)
    with (eval_dir / "evals.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
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
    partial = eval_dir / "summary.json.partial"  # replaced whole, never left half-written
    partial.write_text(json.dumps(summary, indent=2))
    partial.replace(eval_dir / "summary.json")
    return summary


def runs_model_code(task_manager, spec, depth: int = 8) -> bool:
    """Whether lm-eval task or group ``spec`` (a name, or a group's inline member) runs a task
    marked ``unsafe_code``. lm-eval's index holds each YAML with its includes merged."""
    if isinstance(spec, str):
        entry = task_manager.task_index.get(spec)
        config = (entry.cfg if entry else None) or {}
    else:
        config = spec
    if config.get("unsafe_code"):
        return True
    if depth == 0 or not isinstance(config, dict):
        return False
    if "group" not in config:
        # A task. A group's inline member may name the registered task it adjusts.
        named = spec.get("task") if isinstance(spec, dict) else None
        return isinstance(named, str) and runs_model_code(task_manager, named, depth - 1)
    members = config.get("task", [])
    return any(runs_model_code(task_manager, m, depth - 1) for m in (members if isinstance(members, list) else [members]))


def sandboxed(config: Dict) -> bool:
    """Whether a task (an lm-eval config, includes merged) runs no code or scores in the sandbox:
    its results come from ``entrodrop/tasks/code_tasks.py``, whose filters run the programs."""
    return (not config.get("unsafe_code") or "group" in config
            or str(config.get("process_results", "")).startswith(str(TASKS_DIR / "code_tasks.")))


def check_tasks(task_groups: Dict[str, List[str]], target_group: str, task_manager,
                allow_code_execution: bool, metrics: Dict[str, str]) -> List[str]:
    """Every problem with the configured lm-eval tasks, as ``"key=value: why"`` lines, so a run
    fails at start-up rather than at its first evaluation: unknown names, tags, the target group,
    code execution, each task's metric (``check_metrics``) and the packages its scoring imports
    (``check_packages``)."""
    if not any(task_groups.values()):
        return []
    known = set(task_manager.all_tasks)
    problems = [f"evaluation.lm_eval.tasks.{group}: {name!r} is not an lm-eval task (nor in the include_path)"
                for group, names in task_groups.items() for name in names if name not in known]
    # A tag's tasks report under their own names, so its group average would find nothing.
    problems += [f"evaluation.lm_eval.tasks.{group}: {name!r} is an lm-eval tag; list its tasks instead"
                 for group, names in task_groups.items() for name in names
                 if name in known and task_manager.task_index[name].kind.name == "TAG"]
    if target_group not in task_groups:
        problems.append(f"evaluation.lm_eval.target_group={target_group!r} is not one of the groups {list(task_groups)}")
    unsafe = [name for names in task_groups.values() for name in names
              if name in known and runs_model_code(task_manager, name)]
    if unsafe and not allow_code_execution:
        problems.append(f"evaluation.lm_eval.allow_code_execution=False, but {unsafe} execute model-written code: "
                        "set it to True or remove them")
    # Code runs only in the project's sandbox (entrodrop.code_runner), which its own tasks use.
    outside = [name for name in unsafe if not all(sandboxed(e.cfg or {}) for e in members(task_manager, name))]
    if outside:
        problems.append(f"evaluation.lm_eval.tasks: {outside} run model-written code outside the sandbox (lm-eval's "
                        f"own runner forks the process that holds the model, unguarded): use {SANDBOXED} instead")
    fine = {group: [t for t in tasks if t in known and task_manager.task_index[t].kind.name != "TAG"]
            for group, tasks in task_groups.items()}
    problems += check_metrics(fine, metrics, task_manager)
    return problems + check_packages(task_manager, [t for tasks in fine.values() for t in tasks])


def task_index(lm_eval_cfg):
    """lm-eval's ``TaskManager`` once every configured task checks out (``check_tasks``; one
    ``ConfigError`` lists the problems), or None when no task is set: indexing lm-eval's tasks
    takes ~10 s, which a run without tasks does not pay. ``lm_eval_cfg``: the config's
    ``evaluation.lm_eval``."""
    ev = lm_eval_cfg
    task_groups = {group: list(tasks) for group, tasks in ev.tasks.items()}
    if not any(task_groups.values()):
        return None
    from lm_eval.tasks import TaskManager

    task_manager = TaskManager(include_path=ev.include_path)
    raise_problems(check_tasks(task_groups, ev.target_group, task_manager, ev.allow_code_execution, dict(ev.metrics)),
                   "lm-eval task")
    return task_manager


def allow_code(lm_eval_cfg) -> None:
    """What lm-eval's code tasks and the sandboxed ones read from the environment: whether code
    may run (``allow_code_execution``) and how many programs at once (``code_workers``)."""
    if lm_eval_cfg.allow_code_execution:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    os.environ["ENTRODROP_CODE_WORKERS"] = str(lm_eval_cfg.code_workers)


class Evaluator:
    """One evaluation point of a run: entropy-bucket validation and lm-eval task groups, with
    nothing perturbed. The caller puts the model in eval mode and turns its perturbations off;
    the training RNG is restored after, so evaluating does not change the run.

    Args:
        model: the model being trained (plain or FSDP2-sharded).
        device: where it runs.
        validation (Optional[Tuple[SampleStore, SampleStore]]): held-out target token store and
            its entropy cache, or None.
        seq_len (int): row length for validation.
        batch_size (int): validation rows per forward.
        lm: an lm-eval model (a ``TorchtuneLM`` around ``model``), or None for no tasks. It is
            the attribute ``lm``: an offline evaluation with another backend sets it per checkpoint.
        task_manager: lm-eval's ``TaskManager`` (with the local task directory).
        lm_eval_cfg: the config's ``evaluation.lm_eval``: ``tasks`` by group, the ``target_group``
            whose average picks the best checkpoint, each task's metric (``metrics``), ``limit``
            documents per task (None: all), ``allow_code_execution`` (lm-eval's
            ``confirm_run_unsafe_code``), ``apply_chat_template``, ``system_instruction`` (and
            ``enable_thinking``, which the lm applies).
        rank (int), world_size (int): this process among those sharing the model.
    """

    def __init__(self, model, device, validation, seq_len: int, batch_size: int, lm, task_manager, lm_eval_cfg,
                 rank: int = 0, world_size: int = 1):
        self._model, self._device, self.lm = model, device, lm
        self._validation = None
        if validation is not None:
            tokens, entropy = validation
            check_join(tokens, entropy)
            self._validation = (tokens, entropy, entropy_buckets([entropy[i] for i in range(len(entropy))]))
        self._seq_len, self._batch_size = seq_len, batch_size
        self._task_manager, self._cfg = task_manager, lm_eval_cfg
        self._task_groups = {group: list(tasks) for group, tasks in lm_eval_cfg.tasks.items()}
        self._metrics = dict(lm_eval_cfg.metrics)
        self._rank, self._world_size = rank, world_size

    @property
    def enabled(self) -> bool:
        return bool(self._validation or self.lm)

    def __call__(self, step: int, target_epoch: float, checkpoint: str) -> Dict:
        """The evaluation record (tasks and groups on rank 0 only, as lm-eval returns them)."""
        record = {"step": step, "target_epoch": target_epoch, "checkpoint": checkpoint}
        if self.lm:
            record["limit"] = self._cfg.limit
        with torch.random.fork_rng(devices=[self._device] if self._device.type == "cuda" else []):
            if self._validation:
                tokens, entropy, buckets = self._validation
                batches = validation_batches(tokens, entropy, buckets, self._seq_len, self._batch_size, self._rank,
                                             self._world_size)
                record["val_loss"] = validation_losses(self._model, batches, self._device, self._world_size > 1)
            if self.lm:
                import lm_eval

                tasks = [t for ts in self._task_groups.values() for t in ts]
                # lm-eval sees one process on every rank (see TorchtuneLM), so each would print its
                # warnings and progress bars: only rank 0 does. Errors still show on every rank.
                quiet = open(os.devnull, "w") if self._rank else contextlib.nullcontext()
                with quiet, contextlib.redirect_stderr(quiet if self._rank else sys.stderr):
                    out = lm_eval.simple_evaluate(
                        model=self.lm, tasks=tasks, task_manager=self._task_manager, limit=self._cfg.limit,
                        confirm_run_unsafe_code=self._cfg.allow_code_execution, log_samples=False,
                        apply_chat_template=self._cfg.apply_chat_template, system_instruction=self._cfg.system_instruction,
                        verbosity="ERROR" if self._rank else "WARNING")
                if out is not None:  # lm-eval returns the results on local rank 0 only
                    record["tasks"] = {t: out["results"][t] for t in tasks}
                    record["groups"] = group_scores(out["results"], self._task_groups, self._metrics)
                    record["metrics"] = group_metrics(self._task_groups, self._metrics)
                    record["prompt_format"] = task_scoring(self._cfg)["prompt_format"]
        return record
