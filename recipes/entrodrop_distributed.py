"""Continual pre-training with entropy-guided token dropout (EntroDrop), FSDP2 over N processes.

    tune run --nproc_per_node 2 recipes/entrodrop_distributed.py --config configs/tiny/qwen3_entrodrop_distributed.yaml

The mixed target/general stream comes from ``entrodrop.data.loader`` (token stores + entropy
cache); each step the target tokens of the batch get their drop mask (``entrodrop.method.dropout``),
a forward hook on the token embedding puts e_bar at the dropped positions, and the usual
forward and backward run. The baselines of the paper are settings of the same recipe:
``token_dropout.targeting`` (low | high | random), ``token_dropout.schedule``
(sigmoid | static | none), ``neftune_alpha``, ``hidden_dropout`` and the optimizer's
``weight_decay``. ``token_dropout.midpoint: auto`` keeps the curriculum off until the run's own
validation loss stops improving and fixes j0 there (``entrodrop.train.midpoint``). Checkpoints are
Hugging Face directories with the training state beside the weights; ``resume: True`` continues
from the latest one exactly where it stopped.

This is a deliberate copy of recipes/entrodrop_single_device.py; what differs is the
process group, FSDP2 sharding (``entrodrop.train.parallel.shard``: CPU with gloo or CUDA with
NCCL), each rank taking its rows of every global batch, the loss normalized by the global
token count, and checkpoints gathered to rank 0. Masks are drawn per global row, so N
processes train on exactly what one process would. The project's logic lives in ``entrodrop``.
"""

import math
import sys
import time
from pathlib import Path
from typing import Optional, Tuple

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torchtune import config, training, utils
from tqdm import tqdm

from entrodrop import devices
from entrodrop.config import cli, schemas
from entrodrop.data.loader import describe_budget
from entrodrop.data.packing import block_causal_mask
from entrodrop.data.training_stores import open_training_stores, training_data
from entrodrop.errors import ConfigError, naming_log_writes
from entrodrop.eval.evaluator import Evaluator
from entrodrop.eval.records import metric_fields, record_evaluation
from entrodrop.eval.task_checks import allow_code, task_index
from entrodrop.method.dropout import add_hidden_dropout
from entrodrop.models.checkpointing import (
    LOADER_KEY,
    LR_SCHEDULER_KEY,
    RNG_KEY,
    STEP_KEY,
    STORES_KEY,
    HFCheckpointer,
    latest_checkpoint,
)
from entrodrop.models.loss import model_output_for
from entrodrop.train.activations import checkpoint_layers
from entrodrop.train.cadence import crossed_multiple, evaluation_due
from entrodrop.train.parallel import check_launched, every_node_sees, shard
from entrodrop.train.run_dir import RunDir
from entrodrop.train.token_dropout import TokenDropoutState

log = utils.get_logger("INFO")


class EntroDropRecipeDistributed:
    """Setup, the train loop, checkpoints; every value read from ``cfg`` is in the YAML.

    Start-up goes from cheap checks to costly work, so a mistake shows before the model loads:
    the config against ``entrodrop.config.schemas.TRAINING`` (every problem in one error), the
    stores, each opened once (their manifests, files and tables), the output directory (an
    earlier run is never silently mixed with this one) or the checkpoint to resume (its saved
    config and stores must match), the lm-eval tasks, what the stores hold (the caches' model,
    the entropy join, the token ids, the budget), and only then the model.
    """

    def __init__(self, cfg: DictConfig) -> None:
        check_launched("recipes/entrodrop_distributed.py")  # by torchrun (--nproc_per_node N), first: the command
        schemas.check(cfg, schemas.TRAINING, schemas.TRAINING_RULES, "EntroDrop")
        self._device = devices.get_device(cfg.device)  # refuses a device torch cannot use
        self._dtype = training.get_dtype(cfg.dtype, device=self._device)
        dist.init_process_group(devices.process_group_backend(self._device))
        self._world_size, self._rank = utils.get_world_size_and_rank()
        if cfg.global_batch_size % (self._world_size * cfg.gradient_accumulation_steps):
            raise ConfigError(f"global_batch_size={cfg.global_batch_size} is not a multiple of {self._world_size} "
                              f"processes x gradient_accumulation_steps={cfg.gradient_accumulation_steps}")
        self._seed = training.set_seed(cfg.seed)  # torch's own RNG gets seed + rank; masks use seed
        # The output folders: held, looked into, saved into, pruned (entrodrop.train.run_dir).
        self._run_dir = RunDir(cfg, schemas.may_change_on_resume(cfg), schemas.ADDED_KEYS, self._rank,
                               self._world_size, barrier=dist.barrier, shared=every_node_sees)
        self._grad_accum = cfg.gradient_accumulation_steps
        self._clip_grad_norm = cfg.clip_grad_norm
        self._log_every = cfg.log_every_n_steps
        self._eval_every = cfg.evaluation.every_n_steps
        self._eval_every_n_epochs = cfg.evaluation.every_n_epochs
        # A bad loss setting (or liger-kernel missing) fails here, before any data or model loads.
        self._loss_fn = config.instantiate(cfg.loss)
        # EntroDrop's state over the run (entrodrop.train.token_dropout); a loss that cannot give
        # each token's loss, as signal: loss needs, fails here too.
        self._token_dropout = TokenDropoutState.from_config(cfg, self._loss_fn, self._seed, self._device, distributed=True)
        self._metric_logger = None

    def setup(self, cfg: DictConfig) -> bool:
        """Everything before the first step; False when a resumed run is already complete."""
        # Each store opened once: three distinct token stores of this tokenizer; what they are goes into
        # each checkpoint, and a resume compares them.
        self._stores = open_training_stores(cfg)
        state, resume_dir = self._run_dir.open(self._stores.identities)  # held to the end; refuses an earlier run
        self._setup_tasks(cfg)
        self._setup_data(cfg)
        self._step = state[STEP_KEY] if state else 0
        if self._step >= self._num_steps:
            utils.log_rank_zero(log, f"{resume_dir} is the last step of this run ({self._num_steps} steps): the run "
                                     "is complete, nothing to do")
            return False
        self._setup_model(cfg, state, resume_dir)
        self._setup_optimizer(cfg, state)
        if state:  # after the model is built: its initialization draws from the global generators
            self._loader.load_state_dict(state[LOADER_KEY])
            self._token_dropout.load_state_dict(state)  # e_bar, j0 of midpoint: auto, the loss signal
            devices.set_rng_state(self._run_dir.saved_rng(state), self._device)
            utils.log_rank_zero(log, f"resumed from {resume_dir} at step {self._step}")
        self._setup_evaluation(cfg)
        self._metric_logger = naming_log_writes(config.instantiate(cfg.metric_logger)) if self._rank == 0 else None
        if self._metric_logger:
            self._metric_logger.log_config(cfg)
        # torch.profiler over the steps the config names (a no-op one when it is not enabled).
        self._profiler, _ = config.instantiate(cfg.profiler)
        return True

    def _setup_tasks(self, cfg: DictConfig) -> None:
        """lm-eval's task index, and every problem with the configured tasks."""
        self._task_manager = task_index(cfg.evaluation.lm_eval)

    def _setup_data(self, cfg: DictConfig) -> None:
        """The training stream, the held-out validation stores and the budget, from the stores opened
        at set-up, each checked first (``entrodrop.data.training_stores.training_data``): the entropy
        caches are this base model's and hold entropies, the entropy join, and every token id of the
        target and validation token stores hashed against the store's table, before the model loads.
        Every rank checks for itself, in parallel, one core each: simpler than one rank checking
        and broadcasting the outcome, and every rank raises the same error."""
        data = training_data(self._stores, cfg, self._seed, self._rank, self._world_size)
        self._loader, self._validation, self._target_entropy = data.loader, data.validation, data.target_entropy
        utils.log_rank_zero(log, describe_budget(data.budget, data.loader.root))
        self._num_steps = data.budget.num_steps

    def _setup_model(self, cfg: DictConfig, state: Optional[dict], resume_dir: Optional[Path]) -> None:
        """The model with the weights to resume (else the base checkpoint's), EntroDrop attached to
        its embedding, and the forward the loss reads."""
        base = config.instantiate(cfg.checkpointer)
        source = (HFCheckpointer(str(resume_dir), cfg.checkpointer.model_type, cfg.checkpointer.output_dir)
                  if resume_dir else base)
        model_sd = source.load_checkpoint()["model"]
        # Built on the meta device, wrapped as on one device, then sharded and filled (``shard``).
        with training.set_default_dtype(self._dtype), torch.device("meta"):
            model = config.instantiate(cfg.model)
        if cfg.hidden_dropout > 0:
            add_hidden_dropout(model, cfg.hidden_dropout)
        num_checkpointed = checkpoint_layers(model, cfg.activation_checkpointing_share)
        if cfg.compile:
            training.compile_model(model, verbose=self._rank == 0)
        shard(model, model_sd, self._device, self._dtype)
        utils.log_rank_zero(log, f"activation checkpointing: {num_checkpointed} of {len(model.layers)} layers")
        self._model, self._checkpointer = model, base
        # e_bar: the mean of the base model's embedding matrix; a resumed run's comes from its state.
        self._token_dropout.attach(model, None if state else model_sd["tok_embeddings.weight"], self._target_entropy)
        # What the loss reads: the final hidden states, projected by a fused loss in chunks so
        # the [tokens, vocab] logits never exist (entrodrop.models.loss), or torchtune's chunks of logits.
        self._forward = model_output_for(model, self._loss_fn)

    def _setup_optimizer(self, cfg: DictConfig, state: Optional[dict]) -> None:
        """The optimizer and its learning-rate schedule over the run's steps; a resumed run takes the
        checkpoint's state of both."""
        self._optimizer = config.instantiate(cfg.optimizer, self._model.parameters())
        self._lr_scheduler = config.instantiate(cfg.lr_scheduler, self._optimizer, num_training_steps=self._num_steps)
        if state:
            training.load_from_full_optimizer_state_dict(self._model, self._optimizer, state[training.OPT_KEY], self._device)
            self._lr_scheduler.load_state_dict(state[LR_SCHEDULER_KEY])

    def _setup_evaluation(self, cfg: DictConfig) -> None:
        """Held-out entropy-bucket validation and lm-eval task groups (``entrodrop.eval.evaluator``)."""
        ev = cfg.evaluation
        lm = None
        if self._task_manager:
            # Imports lm-eval: only when tasks are set.
            from entrodrop.eval.adapter import TorchtuneLM

            allow_code(ev.lm_eval)
            lm = TorchtuneLM.from_config(self._model, config.instantiate(cfg.tokenizer), self._device, ev.lm_eval,
                                         distributed=True)
        self._evaluator = Evaluator(self._model, self._device, self._validation, cfg.data.seq_len,
                                    ev.validation.batch_size, lm, self._task_manager, ev.lm_eval, self._rank,
                                    self._world_size)
        self._target_group = ev.lm_eval.target_group

    def _loss_sum(self, batch: dict) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Summed next-token loss of a micro-batch (labels are already shifted by the loader), and
        with signal: loss each token's loss ([b, s], detached; else None)."""
        batch = {k: v.to(self._device) for k, v in batch.items()}
        output = self._forward(batch["tokens"], mask=block_causal_mask(batch["document_ids"]),
                               input_pos=batch["input_pos"])
        num_tokens = (batch["labels"] != self._loss_fn.ignore_index).sum()
        loss, token_losses = self._token_dropout.loss_and_token_losses(output, batch["labels"])
        return loss * num_tokens, token_losses

    def _train_step(self, batch: dict) -> Tuple[float, int, dict]:
        """One optimizer step on a global batch: its drop mask, the forward and backward of each
        micro-batch with e_bar at the dropped positions, the clipped update. Returns the loss (mean
        over the global batch's tokens), the global batch's tokens, and ``{gamma_max, gamma,
        target_dropped, grad_norm}``; ``batch`` holds this rank's rows of it."""
        tensors = {k: batch[k] for k in ("tokens", "labels", "document_ids", "input_pos")}
        num_tokens = torch.tensor((batch["labels"] != self._loss_fn.ignore_index).sum().item(), device=self._device)
        dist.all_reduce(num_tokens)  # the loss is a mean over the global batch's tokens
        num_tokens = int(num_tokens)
        # EntroDrop: this step's drop mask (and NEFTune's noise), for this process's rows.
        stats, counts = self._token_dropout.plan(batch, self._step, self._loader.root.rows)
        rows = batch["tokens"].shape[0] // self._grad_accum
        loss_sum, token_losses = torch.zeros((), dtype=torch.float64, device=self._device), []
        for m in range(self._grad_accum):
            part = slice(m * rows, (m + 1) * rows)
            with self._token_dropout.for_micro_batch(part):  # e_bar at the dropped positions
                loss, losses = self._loss_sum({k: v[part] for k, v in tensors.items()})
                # FSDP2 averages gradients over ranks; scale so they are those of the global mean.
                (loss * self._world_size / num_tokens).backward()
            token_losses.append(losses)
            loss_sum += loss.detach().double()  # read once a step: a read per micro-batch would wait for each
        self._token_dropout.record_losses(tensors["labels"], token_losses)  # signal: loss learns them
        totals = torch.cat([loss_sum.view(1), counts.double()])
        dist.all_reduce(totals)
        loss_sum, dropped, targets = totals.tolist()
        loss = loss_sum / num_tokens
        if not math.isfinite(loss):
            raise RuntimeError(f"loss is {loss} at step {self._step + 1}; stopping. The last good checkpoint "
                               f"is {latest_checkpoint(self._checkpointer.output_dir)}")
        grad_norm = torch.nn.utils.clip_grad_norm_(self._model.parameters(), self._clip_grad_norm)
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._lr_scheduler.step()
        return loss, num_tokens, {**stats, "target_dropped": dropped / max(targets, 1.0), "grad_norm": grad_norm}

    def _record_evaluation(self, record: dict) -> None:
        """evals.jsonl and summary.json, the metric log (with j0 at the step that fixed it) and a log line; rank 0."""
        summary = record_evaluation(self._run_dir.eval_dir, record, self._target_group)
        fields = metric_fields(record)
        self._metric_logger.log_dict(fields, step=self._step)
        log.info(f"evaluation at step {self._step} (epoch {record['target_epoch']:.2f}): {fields}; "
                 f"best: {summary.get('best_checkpoint')}")

    def _write_checkpoint(self, model_sd: dict, optimizer_sd: dict, rng, target_epoch: float,
                          record: Optional[dict]) -> None:
        """Save this step's checkpoint, then record its evaluation ``record`` (after: evals.jsonl names
        only checkpoints that exist), then prune (last: the best checkpoint it keeps is read from
        the summary that record may have changed, so a new best never leaves the old one behind)."""
        state = {
            STEP_KEY: self._step, training.SEED_KEY: self._seed, training.OPT_KEY: optimizer_sd,
            LR_SCHEDULER_KEY: self._lr_scheduler.state_dict(), LOADER_KEY: self._loader.state_dict(), RNG_KEY: rng,
            STORES_KEY: self._stores.identities,  # what the stores are: a resume compares them
            **self._token_dropout.state_dict(),  # e_bar, val_losses, j0, loss_signal
        }
        self._run_dir.save(self._checkpointer, model_sd, state, target_epoch)
        if record:
            self._record_evaluation(record)
        self._run_dir.prune()

    def train(self) -> None:
        self._model.train()
        self._profiler.start()
        data, epoch = iter(self._loader), self._loader.root.target_epoch
        progress = tqdm(total=self._num_steps, initial=self._step, desc="train", unit="step", dynamic_ncols=True,
                        disable=self._rank != 0)
        while self._step < self._num_steps:
            start, batch = time.perf_counter(), next(data)
            loss, num_tokens, metrics = self._train_step(batch)
            self._step += 1
            seconds = time.perf_counter() - start
            progress.update()
            progress.set_postfix(loss=f"{loss:.4f}", tokens_per_s=f"{num_tokens / seconds:.0f}", refresh=False)
            if self._metric_logger and self._step % self._log_every == 0:  # tokens/s counts all ranks' tokens
                self._metric_logger.log_dict({
                    "loss": loss, "lr": training.get_lr(self._optimizer), **metrics,
                    "grad_norm": float(metrics["grad_norm"]), "target_epoch": batch["target_epoch"],
                    "step_seconds": seconds, "tokens_per_second": num_tokens / seconds,
                    # peak_memory_{active,alloc,reserved} in GiB since the last log line
                    **(training.get_memory_stats(self._device) if self._device.type == "cuda" else {}),
                }, step=self._step)
            epoch_ended = crossed_multiple(epoch, batch["target_epoch"], 1)
            evaluate = self._evaluator.enabled and evaluation_due(
                self._step, self._num_steps, epoch, batch["target_epoch"], self._eval_every, self._eval_every_n_epochs)
            epoch = batch["target_epoch"]
            # Evaluated before the save, so the checkpoint holds what the evaluation decided (the j0
            # of midpoint: auto); the save records it (an evaluation is always saved).
            record = self._token_dropout.observe(self._evaluator(self._step, epoch, str(
                self._checkpointer.output_dir / f"step_{self._step}"))) if evaluate else None
            if self._run_dir.should_save(self._step, self._num_steps, epoch_ended, evaluate):
                self.save_checkpoint(epoch, record)
            self._profiler.step()
        self._profiler.stop()
        progress.close()
        self._token_dropout.warn_if_not_fixed()  # the last line of a midpoint: auto run that is not EntroDrop

    def save_checkpoint(self, target_epoch: float, record: Optional[dict] = None) -> Path:
        """This step's checkpoint, with ``record``, the evaluation made at this step, if any."""
        # Every rank takes part in gathering the shards and the generators' states; rank 0 writes.
        rank_zero = self._rank == 0
        model_sd = training.gather_cpu_state_dict(self._model, rank_zero, device=self._device)
        optimizer_sd = training.get_full_optimizer_state_dict(self._model, self._optimizer, rank_zero,
                                                              device=self._device)
        rng = [None] * self._world_size
        dist.all_gather_object(rng, devices.rng_state(self._device))
        if rank_zero:
            self._write_checkpoint(model_sd, optimizer_sd, rng, target_epoch, record)
        dist.barrier()
        return self._checkpointer.output_dir / f"step_{self._step}"

    def cleanup(self) -> None:
        if self._metric_logger:
            self._metric_logger.close()
        # No rank tears gloo down while another still writes the last checkpoint or its record:
        # a rank that did so aborted at exit ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()


@cli.parse(how_to_go_on=RunDir.how_to_go_on)  # what Ctrl-C leaves
def recipe_main(cfg: DictConfig) -> None:
    recipe = EntroDropRecipeDistributed(cfg)
    if recipe.setup(cfg):  # False: a resumed run that is already complete
        recipe.train()
    recipe.cleanup()


if __name__ == "__main__":
    sys.exit(recipe_main())
