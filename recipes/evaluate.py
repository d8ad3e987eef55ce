"""Offline evaluation: score a run's checkpoints on the full suite, in one process or several.

    tune run recipes/evaluate.py --config configs/tiny/qwen3_evaluate.yaml output_dir=outputs/tiny_qwen3_entrodrop
    tune run --nproc_per_node 8 recipes/evaluate.py --config configs/qwen3/0.6B_evaluate.yaml output_dir=<run>

During training a run evaluates cheap signals (validation loss by entropy bucket, a few
likelihood tasks) and saves a checkpoint at every target-epoch end; this recipe scores those
checkpoints on everything else. ``checkpoints`` is a run's checkpoint directory (every
``step_<N>`` in it, oldest first) or one Hugging Face checkpoint directory. Each result is
appended to ``eval_dir/evals.jsonl`` and ``summary.json`` as the training recipes write them,
so ``scripts/report.py`` and the best-checkpoint choice read them unchanged; each record also
names the ``backend`` and the default ``max_gen_toks`` that scored it. A checkpoint already
scored there with the same tasks, ``limit`` and backend is skipped: a killed evaluation runs
again to continue where it stopped. With N processes rank 0 alone decides what to score and
tells the others, so a run that saves a checkpoint meanwhile cannot split them.

``backend`` runs the lm-eval tasks: ``torchtune`` (the project's adapter; with N processes
each rank holds the model and takes every N-th batch of requests), or lm-eval's own ``hf`` and
``vllm`` models on the saved directory, in one process. The validation loss always runs on
the torchtune model: it packs held-out documents with a block-causal mask. Every backend
generates at most ``max_gen_toks`` tokens where a task sets none, in batches of
``generation_batch_size`` (hf; vllm batches itself). Before scoring, the log has each task's size:
its requests, and for a generating task the most tokens it may generate.
"""

import os
import sys
from importlib.util import find_spec
from pathlib import Path

import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torchtune import config, training, utils

from entrodrop import devices
from entrodrop.config import cli, schemas
from entrodrop.errors import CheckpointError, raise_problems
from entrodrop.eval.checkpoint_scoring import (
    check_validation_stores,
    checkpoint_progress,
    checkpoints_to_score,
    decided_on_rank_zero,
    hf_lm,
    log_task_sizes,
)
from entrodrop.eval.evaluator import Evaluator
from entrodrop.eval.records import record_evaluation, task_scoring
from entrodrop.eval.task_checks import allow_code, task_index
from entrodrop.eval.validation import open_validation
from entrodrop.models.checkpointing import HFCheckpointer, damaged_weights
from entrodrop.models.hf_config import model_config_problems

log = utils.get_logger("INFO")

LM_EVAL_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class EvaluateRecipe:
    """Checks, then one evaluation per checkpoint not yet scored; every value read is in the YAML.

    Start-up goes from cheap checks to costly work: the config against
    ``entrodrop.config.schemas.EVALUATE``, the checkpoints (all complete), the lm-eval tasks, the
    validation stores, and only then the model.
    """

    def __init__(self, cfg: DictConfig) -> None:
        schemas.check(cfg, schemas.EVALUATE, schemas.EVALUATE_RULES, "evaluate")
        self._device = devices.get_device(cfg.device)  # refuses a device torch cannot use
        self._dtype = training.get_dtype(cfg.dtype, device=self._device)
        self._distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if self._distributed:
            dist.init_process_group(devices.process_group_backend(self._device))
        self._world_size, self._rank = utils.get_world_size_and_rank()
        training.set_seed(cfg.seed)
        self._backend, self._eval_dir, self._dtype_name = cfg.backend, Path(cfg.eval_dir), cfg.dtype
        needs = {"hf": (["transformers", "accelerate"], "pip install -e '.[hf]'"),
                 "vllm": (["vllm"], "pip install vllm (on a machine with a CUDA GPU)")}.get(self._backend)
        missing = [m for m in needs[0] if find_spec(m) is None] if needs else []
        if missing:
            raise ModuleNotFoundError(f"backend={self._backend} needs {' and '.join(missing)}, not installed: "
                                      f"{needs[1]}, or use backend=torchtune")

    def setup(self, cfg: DictConfig) -> None:
        ev = cfg.evaluation
        self._task_groups = {group: list(tasks) for group, tasks in ev.lm_eval.tasks.items()}
        self._tasks = [t for ts in self._task_groups.values() for t in ts]
        self._todo = self._pending(cfg)
        task_manager = task_index(ev.lm_eval)
        if ev.validation.target_tokens and self._todo:  # as training checks them, before any model loads
            check_validation_stores(cfg.checkpoints, ev.validation.target_tokens, ev.validation.target_entropy,
                                    OmegaConf.to_container(cfg.tokenizer, resolve=True), self._todo[0])
        validation = open_validation(ev.validation.target_tokens, ev.validation.target_entropy)
        if not self._todo:
            return
        if task_manager and self._rank == 0:
            log_task_sizes(self._tasks, task_manager, ev.lm_eval.limit, ev.lm_eval.max_gen_toks)
        allow_code(ev.lm_eval)
        self._model_type = cfg.model_type
        self._model = None
        if validation or (self._backend == "torchtune" and task_manager):
            # Each checkpoint's config.json against the model, before the model is built.
            raise_problems(model_config_problems(cfg.model, [str(c / "config.json") for c in self._todo]), "evaluate")
            with training.set_default_dtype(self._dtype), self._device:
                self._model = config.instantiate(cfg.model)
            self._model.eval()
        lm = None
        if self._backend == "torchtune" and task_manager:
            # Imports lm-eval: only when tasks are set.
            from entrodrop.eval.adapter import TorchtuneLM

            lm = TorchtuneLM.from_config(self._model, config.instantiate(cfg.tokenizer), self._device, ev.lm_eval,
                                         distributed=self._distributed)
        self._evaluator = Evaluator(self._model, self._device, validation, ev.validation.seq_len,
                                    ev.validation.batch_size, lm, task_manager, ev.lm_eval, self._rank, self._world_size)
        self._lm_eval, self._target_group = ev.lm_eval, ev.lm_eval.target_group
        self._has_tasks = task_manager is not None

    def _pending(self, cfg: DictConfig) -> list:
        """The checkpoints without a record of this evaluation in ``eval_dir`` (all complete), as
        rank 0 found them (``decided_on_rank_zero``)."""
        ev = cfg.evaluation
        found, todo = decided_on_rank_zero(lambda: checkpoints_to_score(
            cfg.checkpoints, self._eval_dir, self._tasks, ev.lm_eval.limit, ev.validation.target_tokens is not None,
            self._backend, ev.lm_eval.max_gen_toks, task_scoring(ev.lm_eval)), self._distributed)
        utils.log_rank_zero(log, f"{cfg.checkpoints}: {len(found)} checkpoint{'s' * (len(found) != 1)}, "
                                 f"{len(found) - len(todo)} already scored in {self._eval_dir}, {len(todo)} to score")
        return todo

    def _backend_lm(self, checkpoint: Path):
        """lm-eval's own model on ``checkpoint`` (backend hf or vllm)."""
        ev, dtype = self._lm_eval, LM_EVAL_DTYPES[self._dtype_name]
        if self._backend == "hf":
            return hf_lm(checkpoint, str(self._device), dtype, ev)
        # Imports vllm: only when it is chosen.
        from lm_eval.models.vllm_causallms import VLLM

        return VLLM(pretrained=str(checkpoint), dtype=dtype, max_model_len=ev.max_seq_len,
                    max_gen_toks=ev.max_gen_toks, batch_size="auto")

    def _load(self, checkpoint: Path) -> None:
        """``checkpoint``'s weights into the torchtune model (its config.json matched the model in ``setup``)."""
        checkpointer = HFCheckpointer(str(checkpoint), self._model_type, output_dir=str(self._eval_dir))
        self._model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)

    def evaluate(self) -> None:
        """Score each checkpoint; a damaged one is named and skipped (unrecorded, so a rerun scores it)
        and the others still scored, then one error lists the skipped. Rank 0's check decides for all."""
        skipped = []
        for k, checkpoint in enumerate(self._todo):
            progress = checkpoint_progress(checkpoint)
            utils.log_rank_zero(log, f"[{k + 1}/{len(self._todo)}] {checkpoint} (step {progress['step']}, "
                                     f"target epoch {progress['target_epoch']})")
            damaged = decided_on_rank_zero(lambda: damaged_weights(checkpoint), self._distributed)
            if damaged:
                if self._rank == 0:
                    log.error(f"{damaged}\nSkipped: {checkpoint} is not scored, the other checkpoints still are")
                skipped.append(str(checkpoint))
                continue
            if self._model is not None:
                self._load(checkpoint)
            if self._backend != "torchtune" and self._has_tasks:
                self._evaluator.lm = self._backend_lm(checkpoint)
            record = self._evaluator(progress["step"], progress["target_epoch"], str(checkpoint))
            if self._has_tasks:  # what scored the tasks: already_scored tells evaluations apart by it
                record.update(backend=self._backend, max_gen_toks=self._lm_eval.max_gen_toks)
            if self._backend != "torchtune":
                self._evaluator.lm = None  # frees the backend's copy before the next checkpoint loads
            if self._rank == 0:
                summary = record_evaluation(self._eval_dir, record, self._target_group)
                log.info(f"{checkpoint.name}: val_loss {record.get('val_loss')}, groups {record.get('groups')}; "
                         f"best: {summary.get('best_checkpoint')}")
        if skipped:
            raise CheckpointError(f"{len(skipped)} damaged checkpoint{'s' * (len(skipped) > 1)} skipped, not scored "
                                  f"(see the errors above): {', '.join(skipped)}. The others are recorded in "
                                  f"{self._eval_dir}/evals.jsonl; run again once they are fixed to score them")

    def cleanup(self) -> None:
        if self._distributed:
            dist.barrier()
            dist.destroy_process_group()


@cli.parse
def recipe_main(cfg: DictConfig) -> None:
    recipe = EvaluateRecipe(cfg)
    recipe.setup(cfg)
    recipe.evaluate()
    recipe.cleanup()


if __name__ == "__main__":
    sys.exit(recipe_main())
