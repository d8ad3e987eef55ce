"""One evaluation point of a run: the entropy-bucket validation loss
(``entrodrop.eval.validation``) and the lm-eval task groups, with nothing perturbed."""

import contextlib
import os
import sys
from typing import Dict, List, Optional
from unittest import mock

import torch

from entrodrop.data.loader import check_join
from entrodrop.eval.records import group_metrics, group_scores, task_scoring
from entrodrop.eval.validation import (
    bucket_entropies,
    entropy_buckets,
    validation_batches,
    validation_losses,
)


def evaluate_tasks(lm, tasks: List[str], task_manager, **kwargs) -> Optional[Dict]:
    """lm-eval's ``simple_evaluate`` for a model already built, without its last step,
    ``add_env_info``: torch's ``collect_env`` runs ``pip list``, about 0.9 s of each evaluation on
    a CPU, and lm-eval has no flag to skip it. Everything else (seeds, n-shot, task configs,
    versions, the results on rank 0 only) is ``simple_evaluate``'s own.

    Args:
        lm: an lm-eval model.
        tasks (List[str]): task and group names.
        task_manager: lm-eval's ``TaskManager``.
        **kwargs: the rest of ``simple_evaluate``'s arguments (``limit``, ``log_samples``,
            ``confirm_run_unsafe_code``, ``apply_chat_template``, ``verbosity``...).

    Returns:
        Optional[Dict]: lm-eval's results on rank 0, else None.
    """
    import lm_eval.evaluator

    with mock.patch.object(lm_eval.evaluator, "add_env_info", lambda results: None):
        return lm_eval.evaluator.simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager, **kwargs)


class Evaluator:
    """One evaluation point of a run: entropy-bucket validation and lm-eval task groups, with
    nothing perturbed. The model runs in eval mode and goes back to the mode it was in; the
    caller turns its perturbations off (``TokenDropoutState`` does outside a micro-batch); the
    training RNG is restored after, so evaluating does not change the run.

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
            entropies = [entropy[i] for i in range(len(entropy))]
            buckets = entropy_buckets(entropies)
            self._validation = (tokens, entropy, buckets)
            # what the base model's entropy was in each bucket: the same at every evaluation
            self._base_entropy = bucket_entropies(entropies, buckets)
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
        # No model: recipes/evaluate.py's hf and vllm backends score through lm-eval's own.
        training = self._model is not None and self._model.training
        if self._model is not None:
            self._model.eval()
        with torch.random.fork_rng(devices=[self._device] if self._device.type == "cuda" else []):
            if self._validation:
                tokens, entropy, buckets = self._validation
                batches = validation_batches(tokens, entropy, buckets, self._seq_len, self._batch_size, self._rank,
                                             self._world_size)
                record["val_loss"] = validation_losses(self._model, batches, self._device, self._world_size > 1)
                record["base_entropy"] = self._base_entropy
            if self.lm:
                tasks = [t for ts in self._task_groups.values() for t in ts]
                # lm-eval sees one process on every rank (see TorchtuneLM), so each would print its
                # warnings and progress bars: only rank 0 does. Errors still show on every rank.
                quiet = open(os.devnull, "w") if self._rank else contextlib.nullcontext()
                with quiet, contextlib.redirect_stderr(quiet if self._rank else sys.stderr):
                    out = evaluate_tasks(
                        self.lm, tasks, self._task_manager, limit=self._cfg.limit,
                        confirm_run_unsafe_code=self._cfg.allow_code_execution, log_samples=False,
                        apply_chat_template=self._cfg.apply_chat_template, system_instruction=self._cfg.system_instruction,
                        verbosity="ERROR" if self._rank else "WARNING")
                if out is not None:  # the results on local rank 0 only, as lm-eval's simple_evaluate
                    record["tasks"] = {t: out["results"][t] for t in tasks}
                    record["groups"] = group_scores(out["results"], self._task_groups, self._metrics)
                    record["metrics"] = group_metrics(self._task_groups, self._metrics)
                    record["prompt_format"] = task_scoring(self._cfg)["prompt_format"]
        if self._model is not None:
            self._model.train(training)
        return record
