"""What ``recipes/evaluate.py`` needs beyond the training evaluation (``entrodrop.eval.evaluator``):
lm-eval's own ``hf`` backend configured as the torchtune adapter generates, each task's size
logged before scoring, and decisions that every rank must share."""

import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torchtune import utils

from entrodrop.data.entropy_cache import model_vocab_size
from entrodrop.data.sample_store import SampleStore
from entrodrop.data.store_identity import check_evaluation_stores
from entrodrop.errors import IncompleteCheckpointError, ScoringPathError
from entrodrop.eval.records import already_scored, read_evaluations
from entrodrop.models.checkpointing import (
    PROGRESS_FNAME,
    RECIPE_STATE_FNAME,
    STORES_KEY,
    checkpoint_problem,
    latest_checkpoint,
)

log = utils.get_logger("INFO")


def decided_on_rank_zero(decide: Callable[[], Any], distributed: bool) -> Any:
    """``decide()``, computed on rank 0 alone and broadcast to every rank when ``distributed``.

    For what the ranks must agree on but would read from files that change meanwhile (the
    checkpoints a training run is still saving): computed on every rank it could differ, and the
    ranks would run mismatched collectives and hang. An error on rank 0 is raised on every rank,
    so none waits for an answer that never comes.
    """
    if not distributed:
        return decide()
    answer: List[Any] = [None]
    if dist.get_rank() == 0:
        try:
            answer[0] = (True, decide())
        except Exception as error:  # raised below, on every rank
            answer[0] = (False, error)
    dist.broadcast_object_list(answer, src=0)
    ok, value = answer[0]
    if not ok:
        raise value
    return value


def leaf_tasks(task_dict: Dict) -> Iterator[Tuple[str, Any]]:
    """``(name, task)`` of every task in lm-eval's nested task dict (groups hold tasks or groups)."""
    for key, value in task_dict.items():
        if isinstance(value, dict):
            yield from leaf_tasks(value)
        else:
            yield getattr(value, "task_name", None) or str(key), value


def task_size(name: str, instances: list, max_gen_toks: int) -> str:
    """One log line of a task's size: its requests by type, and for ``generate_until`` the most new
    tokens they may generate (a request's own ``max_gen_toks``, else the default ``max_gen_toks``)."""
    kinds: Dict[str, int] = {}
    new_tokens = 0
    for instance in instances:
        kinds[instance.request_type] = kinds.get(instance.request_type, 0) + 1
        if instance.request_type == "generate_until":
            new_tokens += int(instance.args[1].get("max_gen_toks", max_gen_toks))
    documents = len({instance.doc_id for instance in instances})
    line = (f"lm-eval task {name}: {len(instances):,} requests ("
            + ", ".join(f"{kind} {count:,}" for kind, count in kinds.items()) + f") on {documents:,} documents")
    return line + (f", at most {new_tokens:,} new tokens" if new_tokens else "")


def log_task_sizes(tasks: List[str], task_manager, limit: Optional[int], max_gen_toks: int) -> None:
    """Log each task's size (``task_size``) before any is scored, whatever the backend, so a long
    evaluation shows what it will cost up front. lm-eval builds the same requests again to score
    them; building them twice costs seconds, scoring them minutes to hours."""
    from lm_eval.tasks import get_task_dict

    for name, task in leaf_tasks(get_task_dict(tasks, task_manager)):
        task.build_all_requests(limit=limit)
        log.info(task_size(name, task.instances, max_gen_toks))


def hf_lm(checkpoint: Path, device: str, dtype: str, lm_eval_cfg: DictConfig):
    """lm-eval's ``HFLM`` on ``checkpoint``, generating as the torchtune adapter does: at most the
    config's ``max_gen_toks`` where a task sets none (HFLM's own default is a fixed 256, a property
    with no constructor argument) and ``generation_batch_size`` rows a batch (HFLM takes one batch
    size for every request type: scoring keeps ``batch_size``), with the chat template's
    ``enable_thinking`` when the config sets it."""
    from lm_eval.models.huggingface import HFLM

    class ConfiguredHFLM(HFLM):
        """``HFLM`` with the config's default ``max_gen_toks`` and generation batch size."""

        def __init__(self, default_gen_toks: int, generation_batch_size: int, **kwargs) -> None:
            super().__init__(**kwargs)
            self._default_gen_toks, self._generation_batch_size = default_gen_toks, generation_batch_size

        @property
        def max_gen_toks(self) -> int:
            return self._default_gen_toks

        def generate_until(self, requests, disable_tqdm: bool = False):
            scoring, self.batch_size_per_gpu = self.batch_size_per_gpu, self._generation_batch_size
            try:
                return super().generate_until(requests, disable_tqdm=disable_tqdm)
            finally:
                self.batch_size_per_gpu = scoring

    ev = lm_eval_cfg
    return ConfiguredHFLM(ev.max_gen_toks, ev.generation_batch_size or ev.batch_size, pretrained=str(checkpoint),
                          device=device, dtype=dtype, batch_size=ev.batch_size, max_length=ev.max_seq_len,
                          enable_thinking=ev.enable_thinking)



def scorable_checkpoints(path: str) -> List[Path]:
    """The checkpoints an offline evaluation scores: ``path`` itself when it is a Hugging Face
    directory (it holds config.json), else its ``step_<N>`` directories, oldest first, whether
    whole or pruned to their weights. Saves are atomic, so an incomplete ``step_<N>`` was made
    by hand (a partial copy): every one is named in one error, before anything is scored.

    Raises:
        ScoringPathError: ``path`` does not exist, is a file, or holds neither config.json nor ``step_<N>``.
        IncompleteCheckpointError: some ``step_<N>`` lacks config.json or a weight file.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise ScoringPathError(f"checkpoints={path} is a file: give a run's checkpoint directory (its step_<N> "
                               "folders) or one Hugging Face checkpoint directory (the folder holding config.json)")
    if not root.is_dir():
        raise ScoringPathError(f"checkpoints={path} does not exist")
    if (root / "config.json").is_file():
        found = [root]
    else:
        found = sorted((p for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit()),
                       key=lambda p: int(p.name[5:]))
        if not found:
            raise ScoringPathError(f"checkpoints={path} holds neither a Hugging Face checkpoint (config.json) "
                                   "nor step_<N> checkpoints of a run")
    broken = [f"{p}: {why}" for p in found for why in [checkpoint_problem(p)] if why]
    if broken:
        raise IncompleteCheckpointError(
            f"checkpoints={path}: {len(broken)} incomplete checkpoint{'s' * (len(broken) > 1)}, so nothing was "
            "scored:\n  " + "\n  ".join(broken) + "\nMove them out of the way (or point checkpoints at one "
            "complete checkpoint directory) and run again")
    return found


def trained_stores(checkpoints: str) -> Tuple[Optional[Dict[str, Any]], Optional[Path]]:
    """The identities of the stores the run that saved ``checkpoints`` trained with (its newest
    checkpoint's training state keeps them: ``"stores"``), and that checkpoint; ``(None, None)``
    for a checkpoint that is not a run's, whose state is pruned, or from before they were kept.
    A state that cannot be read is named where it is read (a resume), not here."""
    path = Path(checkpoints)
    newest = path if (path / RECIPE_STATE_FNAME).is_file() else latest_checkpoint(checkpoints) if path.is_dir() else None
    if newest is None:
        return None, None
    try:
        state = torch.load(newest / RECIPE_STATE_FNAME, weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001  (a damaged state: no identities to compare)
        return None, None
    stores = state.get(STORES_KEY) if isinstance(state, dict) else None
    return (stores, newest) if stores else (None, None)


def check_validation_stores(checkpoints: str, tokens: str, entropy: Optional[str], tokenizer_cfg: Dict[str, Any],
                            scored: Path) -> None:
    """Before an offline evaluation loads a model, what training checks of its validation stores:
    the held-out store is of this tokenizer and none the run trained on, its entropy cache is of
    the run's base model (``check_evaluation_stores``, against ``trained_stores``), and every value
    of the cache is an entropy over the vocabulary of the checkpoint ``scored`` (a value out of range
    would put tokens in the wrong bucket)."""
    trained, newest = trained_stores(checkpoints)
    check_evaluation_stores(trained, tokens, entropy, tokenizer_cfg, str(newest))
    if entropy:
        SampleStore(entropy, "entropy").check_entropies(model_vocab_size(str(scored)))


def checkpoint_progress(checkpoint: Path) -> Dict[str, Any]:
    """``{"step": N, "target_epoch": x}`` where a run saved ``checkpoint`` (its progress.json);
    the step from its name alone for older checkpoints, and Nones outside a run."""
    saved = checkpoint / PROGRESS_FNAME
    if saved.is_file():
        return json.loads(saved.read_text())
    name = checkpoint.name
    return {"step": int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None, "target_epoch": None}


def checkpoints_to_score(path: str, eval_dir: str, tasks: List[str], limit: Optional[int], validation: bool,
                         backend: str, max_gen_toks: Optional[int],
                         scoring: Optional[Dict] = None) -> Tuple[List[Path], List[Path]]:
    """``(found, to score)``: ``scorable_checkpoints(path)``, and those of them without a record of
    this evaluation in ``eval_dir/evals.jsonl`` (``already_scored``), oldest first.

    What it reads changes while a run trains (a new ``step_<N>``, a new record), so processes that
    share an evaluation call it once (rank 0) and pass the answer on: each calling it would let
    them disagree on what to score, and run mismatched collectives.
    """
    found = scorable_checkpoints(path)
    records = read_evaluations(eval_dir)
    todo = [c for c in found
            if not already_scored(records, str(c), tasks, limit, validation, backend, max_gen_toks, scoring)]
    return found, todo
