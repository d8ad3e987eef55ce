"""Token dropout driven by the model's own training loss: ``token_dropout.signal: loss``.

The paper gates the tokens whose base-model entropy H(x_t) is lowest, computed once before
training; its Limitations section proposes the training loss as a live signal instead. Here
a target token's signal is its own next-token cross-entropy the last time the model trained
on it - the loss of predicting x_t from the tokens before it, the alignment of H(x_t). Before
a sample's first visit the signal is its cached entropy, so the first epoch gates exactly as
``signal: entropy`` does. The gate itself is unchanged (``entrodrop.method.dropout.entropy_gate``).

The store (``LossSignal``) holds one fp16 value per target token, laid out like the entropy
cache (sample after sample; a sample's first token, which nothing predicts, stays NaN), on
the training device: 2 bytes a target token, 40 MB for the paper's 0.02B tokens. Each step
writes the losses it computed (``record``), detached and without a device sync; under FSDP2
every rank trains other rows, so the updates are all-gathered first and every rank holds
the same store. It is saved with each checkpoint, so a resumed run gates as the run it
continues.

A dropped token's own input was replaced by e_bar, so the loss at its position - the
prediction of the NEXT token - was computed without seeing it. That loss measures the
perturbation, not the next token's predictability, so it is not recorded: the next token
keeps its last clean value (its entropy, before any clean visit). Every other target token's
loss is recorded as trained, context drops included: a drop elsewhere in the context is part
of what training sees.

Which losses give per-token values: ours (``entrodrop.models.loss.LinearCrossEntropy``, ``impl:
torch``: the chunks compute them anyway) and torchtune's ``CEWithChunkedOutputLoss`` (its
chunks' cross-entropy, unreduced, then summed). liger-kernel's fused kernel returns the
reduced loss only: ``signal: loss`` with ``impl: liger`` is a config error.
"""

from functools import partial
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torchtune.modules.loss import CEWithChunkedOutputLoss

from entrodrop.data.sample_store import SampleStore
from entrodrop.errors import ConfigError
from entrodrop.method.dropout import entropy_gate
from entrodrop.models.loss import LinearCrossEntropy

LossWithTokens = Callable[[object, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def _chunked_loss_and_token_losses(loss_fn: CEWithChunkedOutputLoss, logits: List[torch.Tensor],
                                   labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """torchtune's chunked loss (the mean over labelled tokens), from unreduced chunks."""
    losses = torch.cat([
        F.cross_entropy(c.float().flatten(0, 1), y.flatten(), ignore_index=loss_fn.ignore_index,
                        reduction="none").view(y.shape)
        for c, y in zip(logits, labels.chunk(loss_fn.num_output_chunks, dim=1))], dim=1)
    return losses.sum() / (labels != loss_fn.ignore_index).sum(), losses.detach()


def loss_with_token_losses(loss_fn) -> LossWithTokens:
    """``(output, labels) -> (loss, [b, s] per-token losses)`` for ``loss_fn``: the loss as it
    computes it, and each token's loss (fp32, detached, 0 where ignored) from the same pass.

    Raises:
        ConfigError: a loss that cannot give per-token values (liger's; any other class).
    """
    if isinstance(loss_fn, LinearCrossEntropy):
        if loss_fn.impl != "torch":
            raise ConfigError(f"token_dropout.signal=loss needs each token's loss, but loss.impl={loss_fn.impl!r} "
                              "(liger-kernel's fused kernel) returns the reduced loss only: use impl: torch, or "
                              "torchtune.modules.loss.CEWithChunkedOutputLoss")
        return loss_fn.with_token_losses
    if isinstance(loss_fn, CEWithChunkedOutputLoss):
        return partial(_chunked_loss_and_token_losses, loss_fn)
    raise ConfigError(f"token_dropout.signal=loss needs each token's loss, which {type(loss_fn).__name__} does not "
                      "give: use entrodrop.models.loss.LinearCrossEntropy (impl: torch) or torchtune's CEWithChunkedOutputLoss")


def flat_values(store: SampleStore) -> np.ndarray:
    """Every sample's values one after another, as fp16 (the store's layout without its shards)."""
    return np.concatenate([np.zeros(0, np.float16), *(store[i].astype(np.float16) for i in range(len(store)))])


class LossSignal:
    """The live signal store of ``signal: loss`` (see the module docs).

    Args:
        entropy (SampleStore): the target entropy cache: the first value of every token, and the layout.
        device (torch.device): where the store lives (the training device).
    """

    def __init__(self, entropy: SampleStore, device: torch.device) -> None:
        lengths = torch.from_numpy(entropy.table["length"].astype(np.int64))
        self.offsets = (torch.cumsum(lengths, 0) - lengths).to(device)
        # One spare slot at the end, where record sends the positions it does not write.
        self._store = torch.from_numpy(np.append(flat_values(entropy), np.float16("nan"))).to(device)

    @property
    def values(self) -> torch.Tensor:
        """``[target tokens]`` fp16: every target token's signal, in the entropy cache's layout."""
        return self._store[:-1]

    def index(self, sample: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """``[b, s]`` int64: each position's token in the store (-1: not a target token)."""
        sample = sample.to(self.values.device, non_blocking=True)
        place = self.offsets[sample.clamp(min=0)] + input_pos.to(self.values.device, non_blocking=True)
        return torch.where(sample >= 0, place, -1)

    def lookup(self, index: torch.Tensor) -> torch.Tensor:
        """``[b, s]`` fp32 signal of the input tokens at ``index`` (NaN where it is -1), which
        ``entropy_gate`` ranks in place of the cached entropy."""
        return torch.where(index >= 0, self.values[index.clamp(min=0)].float(), float("nan"))

    def record(self, index: torch.Tensor, labels: torch.Tensor, losses: torch.Tensor, drop: Optional[torch.Tensor],
               ignore_index: int, distributed: bool = False) -> None:
        """Write this step's losses: position q's loss predicts the token at q + 1 (``labels``),
        which gets it, if that token is a target token and q's own input was not dropped.

        ``index``, ``labels``, ``losses`` and ``drop`` are ``[b, s]`` for this process's rows;
        with ``distributed`` every rank's are gathered first, so all ranks write the same values.
        A token twice in one step (across an epoch boundary) keeps the larger of its two losses,
        whichever rank trained it: a rule that does not depend on the order of the writes."""
        target = torch.cat([index[:, 1:], torch.full_like(index[:, :1], -1)], dim=1)  # the label's place
        keep = (labels != ignore_index) & (target >= 0)
        if drop is not None:
            keep &= ~drop
        where, values = torch.where(keep, target, -1), losses.to(self.values.dtype)
        if distributed:
            where, values = (_all_gather(x) for x in (where, values))
        where = where.flatten()
        # Selecting by a mask would wait for the device to learn its size: the positions not
        # written go to the spare slot instead.
        self._store.scatter_reduce_(0, torch.where(where >= 0, where, self.values.numel()), values.flatten(),
                                    reduce="amax", include_self=False)

    def agreement(self, entropy: SampleStore, gate_percentile: float, targeting: str) -> Dict[str, float]:
        """``gate_agreement`` of the store against the entropy cache it started from (read again
        from the cache, so only the store stays in memory)."""
        initial = torch.from_numpy(flat_values(entropy))
        return gate_agreement(self.values.cpu(), initial, self.offsets.cpu(), gate_percentile, targeting)

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return {"values": self.values.cpu()}

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        if state["values"].shape != self.values.shape:
            raise ConfigError(f"the checkpoint's loss signal holds {state['values'].numel()} tokens, the target entropy "
                              f"cache {self.values.numel()}: it was trained on other target data")
        self._store[:-1] = state["values"].to(self._store.device)


def _all_gather(x: torch.Tensor) -> torch.Tensor:
    """Every rank's ``x``, concatenated along dim 0. The concatenated form: gloo takes no other
    for a 2-d input (the stacked ``[world, *x.shape]`` fails there), NCCL takes both."""
    out = x.new_empty((dist.get_world_size() * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous())
    return out


def gate_agreement(signal: torch.Tensor, entropy: torch.Tensor, offsets: torch.Tensor, gate_percentile: float,
                   targeting: str) -> Dict[str, float]:
    """How far the loss gate has moved from the entropy gate, over every target token: the share of
    the entropy gate's tokens that the signal's gate takes too (the gates are the same size in each
    sample), and the Spearman rank correlation of the two signals over the tokens that have both."""
    document = torch.bucketize(torch.arange(signal.numel(), device=offsets.device), offsets, right=True) - 1
    gates = [entropy_gate(x.float().view(1, -1), document.view(1, -1), gate_percentile, targeting)
             for x in (signal, entropy)]
    both = ~(torch.isnan(signal) | torch.isnan(entropy))
    # Imported here: scipy.stats costs 0.75 s or more at every recipe start, and only a run whose
    # agreement is measured needs it.
    from scipy.stats import spearmanr

    rho = spearmanr(signal[both].float().cpu().numpy(), entropy[both].float().cpu().numpy()).statistic
    return {"gate_agreement": float((gates[0] & gates[1]).sum() / gates[1].sum().clamp(min=1)),
            "rank_correlation": float(rho)}
