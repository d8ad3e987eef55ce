"""Continual pre-training with entropy-guided token dropout (EntroDrop), on one device.

    tune run recipes/entrodrop_single_device.py --config configs/tiny/qwen3_entrodrop_single_device.yaml

The mixed target/general stream comes from ``entrodrop.data.loader`` (token stores + entropy
cache); each step the target tokens of the batch get their drop mask (``entrodrop.method.dropout``),
a forward hook on the token embedding puts e_bar at the dropped positions, and the usual
forward and backward run. The baselines of the paper are settings of the same recipe:
``token_dropout.targeting`` (low | high | random), ``token_dropout.schedule``
(sigmoid | static | none), ``neftune_alpha``, ``hidden_dropout`` and the optimizer's
``weight_decay``. ``token_dropout.midpoint: auto`` keeps the curriculum off until the run's own
validation loss stops improving and fixes j0 there. Checkpoints are Hugging Face directories with
the training state beside the weights; ``resume: True`` continues from the latest one exactly
where it stopped.

The distributed recipe (recipes/entrodrop_distributed.py) is a deliberate copy with FSDP2.
"""

import math
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Optional, Tuple

import torch
from omegaconf import DictConfig
from torchtune import config, training, utils
from tqdm import tqdm

from entrodrop.checkpointing import HFCheckpointer, latest_checkpoint
from entrodrop.config import cli, schemas
from entrodrop.data.loader import build_loader, describe_budget, plan_budget
from entrodrop.data.packing import block_causal_mask
from entrodrop.data.sample_store import SampleStore
from entrodrop.eval.evaluator import Evaluator
from entrodrop.eval.records import record_evaluation
from entrodrop.eval.task_checks import allow_code, task_index
from entrodrop.eval.validation import open_validation
from entrodrop.loss import model_output_for
from entrodrop.method.dropout import (
    AUTO,
    AUTO_NOT_FIXED,
    EmbeddingHook,
    TokenDropout,
    add_hidden_dropout,
    auto_midpoint,
    mean_embedding,
    perturb_embeddings,
    plan_perturbation,
)
from entrodrop.method.loss_signal import LossSignal, loss_with_token_losses
from entrodrop.models.hf_config import check_matches_checkpoint
from entrodrop.train.activations import checkpoint_layers
from entrodrop.train.cadence import crossed_multiple, evaluation_due
from entrodrop.train.run_dir import (
    best_checkpoint,
    earlier_run,
    move_aside,
    plain,
    prune_checkpoints,
    refuse_earlier_run,
    remove_killed_saves,
    resumable,
    resume_state,
    rng_state,
    set_rng_state,
)

log = utils.get_logger("INFO")


class EntroDropRecipeSingleDevice:
    """Setup, the train loop, checkpoints; every value read from ``cfg`` is in the YAML.

    Start-up goes from cheap checks to costly work, so a mistake shows before the model loads:
    the config against ``entrodrop.config.schemas.TRAINING`` (every problem in one error), the output
    directory (an earlier run is never silently mixed with this one) or the checkpoint to
    resume (its saved config must match), the lm-eval tasks, the data (store integrity, the
    entropy join, the budget), and only then the model.
    """

    def __init__(self, cfg: DictConfig) -> None:
        schemas.check(cfg, schemas.TRAINING, schemas.TRAINING_RULES, "EntroDrop")
        self._device = utils.get_device(cfg.device)
        self._dtype = training.get_dtype(cfg.dtype, device=self._device)
        self._seed = training.set_seed(cfg.seed)
        self._output_dir = Path(cfg.output_dir)
        self._grad_accum = cfg.gradient_accumulation_steps
        self._clip_grad_norm = cfg.clip_grad_norm
        self._save_every = cfg.save_every_n_steps
        self._keep_last_n = cfg.keep_last_n_checkpoints
        self._keep_pruned_weights = cfg.keep_pruned_weights
        self._log_every = cfg.log_every_n_steps
        self._neftune_alpha = cfg.neftune_alpha
        self._eval_every = cfg.evaluation.every_n_steps
        self._eval_every_n_epochs = cfg.evaluation.every_n_epochs
        self._config = plain(cfg)  # saved with each checkpoint; a resumed run must match it
        # A bad loss setting (or liger-kernel missing) fails here, before any data or model loads.
        self._loss_fn = config.instantiate(cfg.loss)
        # signal: loss reads each token's loss from the same pass (entrodrop.method.loss_signal); None: the loss alone.
        self._loss_and_tokens = loss_with_token_losses(self._loss_fn) if cfg.token_dropout.signal == "loss" else None
        self._metric_logger = None

    def setup(self, cfg: DictConfig) -> bool:
        """Everything before the first step; False when a resumed run is already complete."""
        state, resume_dir = self._setup_output_dir(cfg)
        self._setup_tasks(cfg)
        self._setup_data(cfg)
        self._step = state["step"] if state else 0
        if self._step >= self._num_steps:
            log.info(f"{resume_dir} is the last step of this run ({self._num_steps} steps): the run is complete, "
                     "nothing to do")
            return False

        base = config.instantiate(cfg.checkpointer)
        source = HFCheckpointer(str(resume_dir), cfg.checkpointer.model_type, cfg.checkpointer.output_dir) if resume_dir else base
        model_sd = source.load_checkpoint()["model"]
        # e_bar is the mean of the BASE model's embedding matrix: computed once, then carried in
        # the recipe state, never recomputed from trained weights.
        self._e_bar = (state["e_bar"] if state else mean_embedding(model_sd["tok_embeddings.weight"])).to(self._device)
        self._model = self._setup_model(cfg, model_sd, base.config, f"{cfg.checkpointer.checkpoint_dir}/config.json")
        self._checkpointer = base
        self._embedding_hook = EmbeddingHook(self._model.tok_embeddings)
        # What the loss reads: the final hidden states, projected by a fused loss in chunks so
        # the [tokens, vocab] logits never exist (entrodrop.loss), or torchtune's chunks of logits.
        self._forward = model_output_for(self._model, self._loss_fn)

        td = cfg.token_dropout
        # midpoint: auto starts unfixed (None: gamma_max(j) = 0 exactly) until an evaluation fixes
        # j0 (_watch_midpoint); a resumed run takes the checkpoint's j0 and validation losses.
        self._auto_rule = (td.auto_patience, td.auto_min_improvement) if td.midpoint == AUTO else None
        self._val_losses, self._j0 = (state["val_losses"], state["j0"]) if state and self._auto_rule else ([], None)
        self._dropout = TokenDropout(td.targeting, td.gate_percentile, td.schedule, td.gamma_max, td.sharpness,
                                     None if self._auto_rule else td.midpoint, td.midpoint_unit, self._seed)
        if self._j0:
            self._fix_midpoint(self._j0)
        # signal: loss - the live signal store, the cached entropies until each token's first visit.
        self._entropy = SampleStore(cfg.data.target_entropy, "entropy") if self._loss_and_tokens else None
        self._signal = LossSignal(self._entropy, self._device) if self._entropy else None
        if self._signal and state:
            self._signal.load_state_dict(state["loss_signal"])
        self._optimizer = config.instantiate(cfg.optimizer, self._model.parameters())
        self._lr_scheduler = config.instantiate(cfg.lr_scheduler, self._optimizer, num_training_steps=self._num_steps)
        if state:
            self._optimizer.load_state_dict(state["optimizer"])
            self._lr_scheduler.load_state_dict(state["lr_scheduler"])
            self._loader.load_state_dict(state["loader"])
            set_rng_state(state["rng"], self._device)
            log.info(f"resumed from {resume_dir} at step {self._step}")
        self._setup_evaluation(cfg)
        self._metric_logger = config.instantiate(cfg.metric_logger)
        self._metric_logger.log_config(cfg)
        return True

    def _setup_output_dir(self, cfg: DictConfig):
        """(recipe state, its checkpoint) to resume from, or (None, None) for a fresh run into
        directories that hold no earlier run (or whose earlier run was moved aside). What a killed
        save left (``remove_killed_saves``) is removed before a resume reads the directory; a
        refused run touches nothing."""
        checkpoints = cfg.checkpointer.output_dir
        log_dir = cfg.metric_logger.get("log_dir")  # loggers without a local directory have none
        if not cfg.resume:
            found = earlier_run(checkpoints, log_dir or "", self._output_dir / "eval")
            if not cfg.overwrite:
                refuse_earlier_run(cfg.output_dir, found, resumable(checkpoints))
            if found:
                moved = move_aside(cfg.output_dir, [checkpoints, log_dir] if log_dir else [checkpoints])
                log.info(f"overwrite=True: the earlier run was moved to {', '.join(map(str, moved))}")
            for line in remove_killed_saves(checkpoints):  # left with no earlier run (nothing was moved)
                log.info(line)
            return None, None
        removed = remove_killed_saves(checkpoints)
        for line in removed:
            log.info(line)
        found = earlier_run(checkpoints, log_dir or "", self._output_dir / "eval") + removed
        num_steps = cfg.total_tokens // (cfg.global_batch_size * cfg.data.seq_len)
        return resume_state(checkpoints, self._config, num_steps, schemas.may_change_on_resume(cfg), found,
                            schemas.ADDED_KEYS)

    def _setup_tasks(self, cfg: DictConfig) -> None:
        """lm-eval's task index, and every problem with the configured tasks."""
        ev = cfg.evaluation.lm_eval
        self._task_manager = task_index(ev)

    def _setup_data(self, cfg: DictConfig) -> None:
        """The training stream (the stores' integrity and the entropy join are checked as it is
        built), the held-out validation stores, and the budget. Every token id of the target and
        validation token stores is hashed against the store's table here, before the model loads."""
        self._loader = build_loader(cfg.data.target_tokens, cfg.data.target_entropy, cfg.data.general_tokens,
                                    cfg.data.seq_len, cfg.global_batch_size, cfg.data.target_ratio, self._seed)
        v = cfg.evaluation.validation
        self._validation = open_validation(v.target_tokens, v.target_entropy)
        stream = self._loader.root
        budget = plan_budget(cfg.total_tokens, cfg.global_batch_size, cfg.data.seq_len, cfg.data.target_ratio,
                             stream.target_tokens, stream.general_tokens)
        log.info(describe_budget(budget, stream))
        self._num_steps = budget.num_steps

    def _setup_model(self, cfg: DictConfig, model_sd: dict, hf_config: dict, config_path: str) -> torch.nn.Module:
        with training.set_default_dtype(self._dtype), self._device:
            model = config.instantiate(cfg.model)
        check_matches_checkpoint(model, hf_config, config_path)
        model.load_state_dict(model_sd, strict=True)
        if cfg.hidden_dropout > 0:
            add_hidden_dropout(model, cfg.hidden_dropout)
        num_checkpointed = checkpoint_layers(model, cfg.activation_checkpointing_share)
        if cfg.compile:
            training.compile_model(model)
        log.info(f"activation checkpointing: {num_checkpointed} of {len(model.layers)} layers")
        return model

    def _loss_sum(self, batch: dict) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Summed next-token loss of a micro-batch (labels are already shifted by the loader), and
        with signal: loss each token's loss ([b, s], detached; else None)."""
        batch = {k: v.to(self._device) for k, v in batch.items()}
        output = self._forward(batch["tokens"], mask=block_causal_mask(batch["document_ids"]), input_pos=batch["input_pos"])
        num_tokens = (batch["labels"] != self._loss_fn.ignore_index).sum()
        if self._loss_and_tokens is None:
            return self._loss_fn(output, batch["labels"]) * num_tokens, None
        loss, token_losses = self._loss_and_tokens(output, batch["labels"])
        return loss * num_tokens, token_losses

    def train(self) -> None:
        self._model.train()
        data = iter(self._loader)
        epoch = self._loader.root.target_epoch
        progress = tqdm(total=self._num_steps, initial=self._step, desc="train", unit="step", dynamic_ncols=True)
        while self._step < self._num_steps:
            start, batch = time.perf_counter(), next(data)
            tensors = {k: batch[k] for k in ("tokens", "labels", "document_ids", "input_pos")}
            num_tokens = int((batch["labels"] != self._loss_fn.ignore_index).sum())
            if self._signal:  # signal: loss ranks each target token by its last training loss
                index = self._signal.index(batch["sample"], batch["input_pos"])
                batch = {**batch, "entropy": self._signal.lookup(index)}
            drop, noise, stats, counts = plan_perturbation(
                self._dropout, self._neftune_alpha, batch, self._step, self._loader.root.rows,
                self._e_bar.numel(), self._device)
            rows = batch["tokens"].shape[0] // self._grad_accum
            loss_sum, token_losses = torch.zeros((), dtype=torch.float64, device=self._device), []
            for m in range(self._grad_accum):
                part = slice(m * rows, (m + 1) * rows)
                # EntroDrop enters here: the embedding hook puts e_bar at the dropped positions.
                self._embedding_hook.set(partial(perturb_embeddings, e_bar=self._e_bar,
                                                 drop=None if drop is None else drop[part],
                                                 noise=None if noise is None else noise[part]))
                loss, losses = self._loss_sum({k: v[part] for k, v in tensors.items()})
                token_losses.append(losses)
                (loss / num_tokens).backward()
                loss_sum += loss.detach().double()  # read once a step: a read per micro-batch would wait for each
            self._embedding_hook.set(None)
            if self._signal:
                self._signal.record(index, tensors["labels"].to(self._device, non_blocking=True), torch.cat(token_losses),
                                    drop, self._loss_fn.ignore_index)
            loss_sum, dropped, targets = torch.cat([loss_sum.view(1), counts.double()]).tolist()
            loss = loss_sum / num_tokens
            if not math.isfinite(loss):
                raise RuntimeError(f"loss is {loss} at step {self._step + 1}; stopping. The last good checkpoint "
                                   f"is {latest_checkpoint(self._checkpointer.output_dir)}")
            grad_norm = torch.nn.utils.clip_grad_norm_(self._model.parameters(), self._clip_grad_norm)
            self._optimizer.step()
            self._optimizer.zero_grad(set_to_none=True)
            self._lr_scheduler.step()
            self._step += 1
            seconds = time.perf_counter() - start
            progress.update()
            progress.set_postfix(loss=f"{loss:.4f}", tokens_per_s=f"{num_tokens / seconds:.0f}", refresh=False)
            if self._step % self._log_every == 0:
                self._metric_logger.log_dict({
                    "loss": loss, "lr": training.get_lr(self._optimizer), **stats,
                    "target_dropped": dropped / max(targets, 1.0),
                    "grad_norm": float(grad_norm), "target_epoch": batch["target_epoch"],
                    "step_seconds": seconds, "tokens_per_second": num_tokens / seconds,
                    # peak_memory_{active,alloc,reserved} in GiB since the last log line
                    **(training.get_memory_stats(self._device) if self._device.type == "cuda" else {}),
                }, step=self._step)
            # Every target-epoch end is saved, whatever the evaluation cadence: recipes/evaluate.py
            # scores the saved checkpoints offline.
            epoch_ended = crossed_multiple(epoch, batch["target_epoch"], 1)
            evaluate = self._evaluator.enabled and evaluation_due(
                self._step, self._num_steps, epoch, batch["target_epoch"], self._eval_every, self._eval_every_n_epochs)
            epoch = batch["target_epoch"]
            # Evaluated before the save, so the checkpoint holds what the evaluation decided (the j0
            # of midpoint: auto); the save records it (an evaluation is always saved).
            record = self._evaluate(epoch) if evaluate else None
            if self._step % self._save_every == 0 or epoch_ended or evaluate or self._step == self._num_steps:
                self.save_checkpoint(epoch, record)
        progress.close()
        if self._auto_rule and self._j0 is None:
            log.warning(AUTO_NOT_FIXED)  # the last line: this run is not EntroDrop

    def _setup_evaluation(self, cfg: DictConfig) -> None:
        """Held-out entropy-bucket validation and lm-eval task groups (``entrodrop.eval.evaluator``)."""
        ev = cfg.evaluation
        lm = None
        if self._task_manager:
            from entrodrop.eval.adapter import (
                TorchtuneLM,  # imports lm-eval: only when tasks are set
            )

            allow_code(ev.lm_eval)
            lm = TorchtuneLM(self._model, config.instantiate(cfg.tokenizer), self._device, ev.lm_eval.max_seq_len,
                             ev.lm_eval.batch_size, ev.lm_eval.max_gen_toks, distributed=False,
                             generation_batch_size=ev.lm_eval.generation_batch_size,
                             compile_decode=ev.lm_eval.compile_decode, enable_thinking=ev.lm_eval.enable_thinking)
        self._evaluator = Evaluator(self._model, self._device, self._validation, cfg.data.seq_len, ev.validation.batch_size,
                                    lm, self._task_manager, ev.lm_eval, 0, 1)
        self._target_group = ev.lm_eval.target_group

    def _evaluate(self, target_epoch: float) -> dict:
        """Evaluate with nothing perturbed, then back to training; the record of the checkpoint
        saved next. With midpoint: auto it carries j0 (None until fixed)."""
        self._model.eval()
        self._embedding_hook.set(None)
        record = self._evaluator(self._step, target_epoch, str(self._checkpointer.output_dir / f"step_{self._step}"))
        self._model.train()
        if self._auto_rule:
            record["auto_midpoint"] = self._watch_midpoint(record)
        if self._signal:  # how far the loss gate has moved from the entropy gate
            record["signal"] = self._signal.agreement(self._entropy, self._dropout.gate_percentile, self._dropout.targeting)
        return record

    def _watch_midpoint(self, record: dict) -> Optional[dict]:
        """midpoint: auto. Adds this evaluation's all-token validation loss; once the loss has
        stopped improving (``auto_midpoint``), j0 is fixed at its lowest evaluation for the rest
        of the run, and the sigmoid of Eq. 7 runs from there. Returns j0, or None."""
        if self._j0 is None:
            self._val_losses.append((record["target_epoch"], record["step"], record["val_loss"]["all"]))
            found = auto_midpoint(self._val_losses, *self._auto_rule)
            if found:
                self._fix_midpoint({"target_epoch": found[0], "step": found[1], "fixed_at_step": self._step})
                log.info(f"midpoint: auto fixed j0 at target epoch {found[0]:.2f} (step {found[1]}), the lowest validation "
                         f"loss so far, after {self._auto_rule[0]} evaluations in a row without a relative improvement "
                         f"above {self._auto_rule[1]:g}; the curriculum runs from step {self._step + 1}")
        return self._j0

    def _fix_midpoint(self, j0: dict) -> None:
        """Train from here with j0 (in midpoint_unit) of midpoint: auto."""
        self._j0 = j0
        self._dropout = replace(self._dropout, midpoint=j0["target_epoch"] if self._dropout.midpoint_unit == "epochs"
                                else j0["step"])

    def _record_evaluation(self, record: dict) -> None:
        """evals.jsonl and summary.json, the metric log (with j0 at the step that fixed it) and a log line."""
        summary = record_evaluation(self._output_dir / "eval", record, self._target_group)
        flat = {f"val_loss_{k}": v for k, v in record.get("val_loss", {}).items()}
        flat.update({f"{g}_average": v for g, v in record.get("groups", {}).items()})
        flat.update({f"signal_{k}": v for k, v in record.get("signal", {}).items()})
        j0 = record.get("auto_midpoint")
        if j0 and j0["fixed_at_step"] == self._step:
            flat.update(midpoint_epoch=j0["target_epoch"], midpoint_step=j0["step"])
        self._metric_logger.log_dict(flat, step=self._step)
        log.info(f"evaluation at step {self._step} (epoch {record['target_epoch']:.2f}): {flat}; "
                 f"best: {summary.get('best_checkpoint')}")

    def save_checkpoint(self, target_epoch: float, record: Optional[dict] = None) -> Path:
        """Save this step's checkpoint, then record its evaluation ``record`` (after: evals.jsonl names
        only checkpoints that exist), then prune (last: the best checkpoint it keeps is read from
        the summary that record may have changed, so a new best never leaves the old one behind)."""
        state = {
            "step": self._step, "seed": self._seed, "e_bar": self._e_bar.cpu(),
            "optimizer": self._optimizer.state_dict(), "lr_scheduler": self._lr_scheduler.state_dict(),
            "loader": self._loader.state_dict(), "rng": rng_state(self._device), "config": self._config,
            "val_losses": self._val_losses, "j0": self._j0,  # midpoint: auto
            "loss_signal": self._signal.state_dict() if self._signal else None,
        }
        path = self._checkpointer.save_checkpoint({"model": self._model.state_dict()}, f"step_{self._step}", state,
                                                   {"step": self._step, "target_epoch": target_epoch})
        log.info(f"checkpoint: {path}")
        if record:
            self._record_evaluation(record)
        # The newest checkpoints stay, and the best by the summary that now includes this step's record.
        for old in prune_checkpoints(self._checkpointer.output_dir, self._keep_last_n,
                                     keep=best_checkpoint(self._output_dir / "eval"),
                                     keep_weights=self._keep_pruned_weights):
            log.info(f"keep_last_n_checkpoints={self._keep_last_n}: pruned {old}"
                     + (" to its weights" if self._keep_pruned_weights else ""))
        return path

    def cleanup(self) -> None:
        if self._metric_logger:
            self._metric_logger.close()


@cli.parse
def recipe_main(cfg: DictConfig) -> None:
    recipe = EntroDropRecipeSingleDevice(cfg)
    if recipe.setup(cfg):  # False: a resumed run that is already complete
        recipe.train()
    recipe.cleanup()


if __name__ == "__main__":
    sys.exit(recipe_main())
