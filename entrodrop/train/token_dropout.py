"""EntroDrop over a training run: the one object a recipe asks about the method.

It owns everything of the method that lives across steps: e_bar (the base model's mean
embedding), the method's plan (``entrodrop.method.dropout.TokenDropoutPlan``), the ``midpoint: auto``
watch (``entrodrop.train.midpoint``), the live loss signal of ``signal: loss``
(``entrodrop.method.loss_signal``) and the embedding hook the method enters the model by. A
recipe's step shows the method in three calls::

    stats, counts = token_dropout.plan(batch, step, rows)      # this step's mask (and NEFTune noise)
    for part in micro_batches:
        with token_dropout.for_micro_batch(part):             # e_bar at the dropped positions
            forward and backward
    token_dropout.record_losses(labels, token_losses)         # signal: loss learns this step's losses

and its evaluations in one, ``record = token_dropout.observe(evaluator(...))``. Like
torchtitan's stateful components, it is saved and resumed by its ``state_dict``, whose entries
sit at the top of the recipe state (``e_bar``, ``val_losses``, ``j0``, ``loss_signal``), not under
a key of its own: that is the layout every saved checkpoint has, so each resumes exactly.
"""

import contextlib
import logging
from functools import partial
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn
from torchtune import utils

from entrodrop.data.sample_store import SampleStore
from entrodrop.method.dropout import (
    AUTO_NOT_FIXED,
    EmbeddingHook,
    TokenDropoutPlan,
    mean_embedding,
    perturb_embeddings,
    plan_perturbation,
)
from entrodrop.method.loss_signal import LossSignal, loss_with_token_losses
from entrodrop.train.midpoint import MidpointWatch, midpoint_state

log = utils.get_logger("INFO")


class TokenDropoutState:
    """EntroDrop's state over a run (see the module docs), around the method's plan
    (``TokenDropoutPlan``); built by ``from_config``, then ``attach``-ed to the model once it is
    built.

    Args:
        dropout (TokenDropoutPlan): the ``token_dropout`` settings, masks drawn from the run's seed.
        neftune_alpha (float): NEFTune's alpha (the paper's baseline; 0: off).
        midpoint (Optional[MidpointWatch]): the ``midpoint: auto`` watch; None for a number.
        loss_fn: the training loss (``loss`` in the YAML).
        signal_from_loss (bool): ``signal: loss``: the gate ranks by the training loss, starting
            from the target entropy cache (given to ``attach``).
        device (torch.device): where the model trains.
        distributed (bool): whether the batch's rows are shared over processes (``record_losses``
            then gathers every rank's losses, so all ranks keep the same signal).
    """

    def __init__(self, dropout: TokenDropoutPlan, neftune_alpha: float, midpoint: Optional[MidpointWatch], loss_fn,
                 signal_from_loss: bool, device: torch.device, distributed: bool = False) -> None:
        self.dropout, self._neftune_alpha, self._midpoint = dropout, neftune_alpha, midpoint
        self._loss_fn, self._device, self._distributed = loss_fn, device, distributed
        # signal: loss reads each token's loss from the same pass; a loss that cannot give it
        # (liger's fused kernel) fails here, before any data or model loads.
        self._loss_and_tokens = loss_with_token_losses(loss_fn) if signal_from_loss else None
        self._e_bar: Optional[torch.Tensor] = None
        self._hook: Optional[EmbeddingHook] = None
        self._entropy: Optional[SampleStore] = None
        self._signal: Optional[LossSignal] = None
        self._planned: Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]] = (None,) * 3

    @classmethod
    def from_config(cls, cfg, loss_fn, seed: int, device: torch.device, distributed: bool = False) -> "TokenDropoutState":
        """From a training config: ``token_dropout`` and ``neftune_alpha``;
        masks drawn from ``seed``."""
        td = cfg.token_dropout
        return cls(TokenDropoutPlan.from_config(td, seed), cfg.neftune_alpha, MidpointWatch.from_config(td), loss_fn,
                   td.signal == "loss", device, distributed)

    def attach(self, model: nn.Module, embedding_weight: Optional[torch.Tensor],
               target_entropy: Optional[SampleStore] = None) -> None:
        """Enter ``model`` by a hook on its token embedding, with e_bar the mean of
        ``embedding_weight``, the base model's; None for a resumed run, whose ``load_state_dict``
        brings the e_bar saved with it (never recomputed from trained weights). With ``signal:
        loss``, the live signal starts from ``target_entropy``, the target entropy cache, open and
        checked (``entrodrop.data.training_stores``)."""
        if embedding_weight is not None:
            self._e_bar = mean_embedding(embedding_weight).to(self._device)
        self._hook = EmbeddingHook(model.tok_embeddings)
        if self._loss_and_tokens is not None:
            self._entropy = target_entropy
            self._signal = LossSignal(self._entropy, self._device)

    def loss_and_token_losses(self, output, labels: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The loss of ``output`` against ``labels`` and, with ``signal: loss``, each token's loss
        from the same pass (``[b, s]``, detached; None otherwise)."""
        if self._loss_and_tokens is None:
            return self._loss_fn(output, labels), None
        return self._loss_and_tokens(output, labels)

    def plan(self, batch: dict, step: int, rows: range) -> Tuple[Dict[str, float], torch.Tensor]:
        """Plan step ``step`` for ``rows`` of its global batch (a loader batch): with ``signal:
        loss`` each target token ranked by its last training loss, then the drop mask and NEFTune's
        noise, kept for ``for_micro_batch``. Returns ``{"gamma_max", "gamma"}`` and a ``[2]``
        tensor on the device: dropped target tokens, target tokens."""
        index = None
        if self._signal:
            index = self._signal.index(batch["sample"], batch["input_pos"])
            batch = {**batch, "entropy": self._signal.lookup(index)}
        drop, noise, stats, counts = plan_perturbation(self.dropout, self._neftune_alpha, batch, step, rows,
                                                       self._e_bar.numel(), self._device)
        self._planned = (drop, noise, index)
        return stats, counts

    @contextlib.contextmanager
    def for_micro_batch(self, part: slice) -> Iterator[None]:
        """Inside, the model's embedding puts e_bar at the planned dropped positions of rows
        ``part`` (and adds their noise); outside, the model runs unperturbed. Keep the backward
        inside: a recomputed forward (activation checkpointing) must see what the first did."""
        drop, noise, _ = self._planned
        self._hook.set(partial(perturb_embeddings, e_bar=self._e_bar, drop=None if drop is None else drop[part],
                               noise=None if noise is None else noise[part]))
        try:
            yield
        finally:
            self._hook.set(None)

    def record_losses(self, labels: torch.Tensor, token_losses: List[Optional[torch.Tensor]]) -> None:
        """With ``signal: loss``, write the step's per-token losses (one ``[rows, s]`` tensor a
        micro-batch, in order) into the live signal; nothing otherwise."""
        if self._signal:
            drop, _, index = self._planned
            self._signal.record(index, labels.to(self._device, non_blocking=True), torch.cat(token_losses), drop,
                                self._loss_fn.ignore_index, distributed=self._distributed)

    def observe(self, record: Dict[str, Any]) -> Dict[str, Any]:
        """An evaluation ``record``, with what the method takes from it and adds to it:
        ``midpoint: auto`` fixes j0 once the validation loss stops improving (``auto_midpoint``:
        j0 or None), and ``signal: loss`` how far its gate has moved from the entropy gate
        (``signal``)."""
        if self._midpoint:
            record["auto_midpoint"] = self._midpoint.observe(record)
            self.dropout = self._midpoint.apply(self.dropout)
        if self._signal:
            record["signal"] = self._signal.agreement(self._entropy, self.dropout.gate_percentile,
                                                      self.dropout.targeting)
        return record

    def warn_if_not_fixed(self) -> None:
        """The last line of a ``midpoint: auto`` run that never fixed j0 (it trained as its baseline)."""
        if self._midpoint and self._midpoint.j0 is None:
            utils.log_rank_zero(log, AUTO_NOT_FIXED, level=logging.WARNING)

    def state_dict(self) -> Dict[str, Any]:
        """The recipe-state entries: ``e_bar``, ``val_losses`` and ``j0`` (empty for a number),
        and ``loss_signal`` (None for ``signal: entropy``)."""
        return {"e_bar": self._e_bar.cpu(), **midpoint_state(self._midpoint),
                "loss_signal": self._signal.state_dict() if self._signal else None}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume from a recipe state (other keys are not read): its e_bar, j0 and signal."""
        self._e_bar = state["e_bar"].to(self._device)
        if self._midpoint:
            self._midpoint.load_state_dict(state)
            self.dropout = self._midpoint.apply(self.dropout)
        if self._signal:
            self._signal.load_state_dict(state["loss_signal"])
