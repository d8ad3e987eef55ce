"""EntroDrop and the baselines it is compared with, as small functions of explicit inputs.

Section 3 of the paper, for a target-domain sample X = [x_1 .. x_T] at training step j:

- Eq. 5, the gate: g_t = 1 iff H(x_t) <= Percentile_k(H(X)), k = ``gate_percentile``
  (``entropy_gate``), made exact: the floor(k n) lowest-entropy tokens of each document, ties
  by position; tokens without an entropy (a document's first token, general-domain tokens,
  padding) are never gated.
- Eq. 7, the curriculum: gamma_max(j) = gamma_max / (1 + exp(-sharpness * (j - midpoint)))
  (``gamma_max_at``), and gamma_j ~ U(0, gamma_max(j)) (``draw_gamma``). The paper takes j0 from
  a baseline run's validation curve; ``midpoint: auto`` finds it in the same run
  (``auto_midpoint``), with gamma_max(j) = 0 exactly until then.
- Eq. 6, the mask: P(m_t = 0) = gamma_j * g_t (``drop_mask``).
- Eq. 4, the input: x~_t = m_t x_t + (1 - m_t) e_bar, e_bar the mean of the BASE model's token
  embedding matrix (Appendix A.3; ``mean_embedding``, ``perturb_embeddings``). Labels never change.

Randomness is a pure function of (seed, step, global row) (``row_generator``), so a resumed run
draws the same masks and several processes draw, for their rows, what one process would.
"""

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from entrodrop.data.packing import TARGET

TARGETING = ("low", "high", "random")
SCHEDULES = ("sigmoid", "static", "none")
# What the gate ranks: the cached base-model entropy (the paper), or the live training loss
# (entrodrop.method.loss_signal, the paper's future work).
SIGNALS = ("entropy", "loss")
AUTO = "auto"  # token_dropout.midpoint: auto (see auto_midpoint)
# What a midpoint: auto run that ended before auto_midpoint fired did (its last log line, summary.json).
AUTO_NOT_FIXED = ("midpoint: auto never fixed j0: the validation loss never went auto_patience evaluations in a row "
                  "without improving, so gamma_max(j) stayed 0 and the run trained as the baseline, with no token "
                  "dropout. Train longer, or set a number for token_dropout.midpoint")


def row_generator(seed: int, step: int, row: int, device: torch.device = torch.device("cpu"),
                  stream: str = "") -> torch.Generator:
    """The generator of one row of one step's global batch (``row=-1``: the step's own draws).

    ``stream`` names an independent sequence for the same row (NEFTune's noise); the drop
    mask uses the unnamed one."""
    digest = hashlib.blake2b(f"{seed}/{step}/{row}{'/' + stream if stream else ''}".encode(), digest_size=8).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest, "little") >> 1)


def gamma_max_at(step: int, gamma_max: float, schedule: str, sharpness: float, midpoint: float) -> float:
    """gamma_max(j) of Eq. 7 (``sigmoid``), gamma_max throughout (``static``), or 0 (``none``).

    Example:
        >>> gamma_max_at(100, 0.1, "sigmoid", sharpness=0.05, midpoint=100)
        0.05
    """
    if schedule == "none":
        return 0.0
    if schedule == "static":
        return gamma_max
    z = sharpness * (step - midpoint)
    return gamma_max / (1.0 + math.exp(-z)) if z > -700 else 0.0  # exp(700) is near float's limit


def midpoint_step(midpoint: Optional[float], midpoint_unit: str, step: int, target_epoch: float) -> float:
    """j0 of Eq. 7 in steps, for the batch of ``step`` (0-based) that brings the stream to
    ``target_epoch`` (the figure the logs show).

    In ``epochs``, j0 is where the stream reaches epoch ``midpoint`` at the pace it has had so
    far, (step + 1) / target_epoch steps an epoch: the real tokens of packed rows, not a
    pre-run estimate from token slots. So gamma_max(j) is half its value exactly at the batch
    whose target_epoch crosses the midpoint. ``None`` is a midpoint not fixed yet
    (``midpoint: auto``): infinitely far, where the sigmoid is 0 exactly.

    Example:
        >>> midpoint_step(2.0, "epochs", step=19, target_epoch=2.0)
        19.0
        >>> midpoint_step(30, "steps", step=19, target_epoch=2.0)
        30
        >>> gamma_max_at(19, 0.1, "sigmoid", 0.2, midpoint_step(None, "epochs", step=19, target_epoch=2.0))
        0.0
    """
    if midpoint is None:
        return math.inf
    if midpoint_unit == "steps":
        return midpoint
    if target_epoch <= 0:
        return math.inf
    return midpoint * (step + 1) / target_epoch - 1


def auto_midpoint(evaluations: Sequence[Tuple[float, int, float]], patience: int,
                  min_improvement: float) -> Optional[Tuple[float, int]]:
    """Where ``midpoint: auto`` puts j0: (target epoch, step) of the evaluation with the lowest
    validation loss, once the loss has stopped improving; None while it still improves.

    The paper sets j0 where a baseline's validation loss turns up. Before j0 an EntroDrop run
    with ``midpoint: auto`` trains exactly as the baseline does (gamma_max(j) = 0), so the run
    can watch its own loss instead. An evaluation improves when its loss is below
    ``(1 - min_improvement)`` times the loss of the last evaluation that improved (the first one
    does); after ``patience`` evaluations in a row that do not, j0 is fixed at the lowest loss
    seen so far (ties: the earliest). A loss that is not finite (NaN, inf) never improves and is
    never the lowest, so it can't become j0. The evaluations are read in order and the first
    firing is returned, so adding later evaluations never moves j0: a pure function of the
    history, as a resumed run and a second run with the same seed need.

    Args:
        evaluations: (target_epoch, step, all-token validation loss) of each evaluation, oldest first.
        patience (int): evaluations without improvement before j0 is fixed, >= 1.
        min_improvement (float): the relative drop that counts as an improvement, in [0, 1).

    Returns:
        Optional[Tuple[float, int]]: (target_epoch, step) of j0, or None.

    Example:
        >>> losses = [3.0, 2.5, 2.2, 2.25, 2.3, 2.4]
        >>> auto_midpoint([(e + 1.0, 10 * (e + 1), x) for e, x in enumerate(losses)], 2, 0.0)
        (3.0, 30)
        >>> auto_midpoint([(e + 1.0, 10 * (e + 1), x) for e, x in enumerate(losses[:4])], 2, 0.0) is None
        True
    """
    reference, since = math.inf, 0
    lowest = None
    for epoch, step, loss in evaluations:
        if math.isfinite(loss) and (lowest is None or loss < lowest[2]):
            lowest = (epoch, step, loss)
        if math.isfinite(loss) and loss < reference * (1.0 - min_improvement):
            reference, since = loss, 0
        else:
            since += 1
            if since >= patience and lowest is not None:
                return lowest[0], lowest[1]
    return None


def draw_gamma(gamma_max_j: float, generator: torch.Generator) -> float:
    """gamma_j ~ U(0, gamma_max(j))."""
    return gamma_max_j * torch.rand((), generator=generator, device=generator.device).item()


def entropy_gate(entropy: torch.Tensor, document_ids: torch.Tensor, gate_percentile: float, targeting: str) -> torch.Tensor:
    """``[b, s]`` bool: which tokens may be dropped (Eq. 5), per document of each packed row.

    A document's n tokens that have an entropy are ranked - ``low``: lowest entropy first,
    ``high``: highest entropy first; equal entropies in either case by position, earlier first
    - and exactly the first floor(gate_percentile * n) of them are gated. ``random``: every token
    that has an entropy (vanilla token dropout on the target domain). NaN entropy is never gated.

    An exact count rather than Eq. 5's ``H <= Percentile_k`` as written: the cache stores fp16,
    so many tokens tie at the percentile and ``<=`` takes every tie (a random model's entropies
    are nearly all equal, and nearly every token was gated). The ranking depends only on the
    row's own entropies and positions, so it is the same on every rank and in every run.
    k * n is rounded to 1e-6 before the floor, so that 0.29 * 100 gates 29 tokens, not 28.

    Example:
        >>> h = torch.tensor([[float("nan"), 1.0, 5.0, 2.0, 9.0]])
        >>> entropy_gate(h, torch.zeros(1, 5, dtype=torch.long), 0.5, "low").int()
        tensor([[0, 1, 0, 1, 0]], dtype=torch.int32)
        >>> entropy_gate(torch.ones(1, 5), torch.zeros(1, 5, dtype=torch.long), 0.5, "high").int()
        tensor([[1, 1, 0, 0, 0]], dtype=torch.int32)
    """
    has_entropy = ~torch.isnan(entropy)
    if targeting == "random":
        return has_entropy
    b, s = entropy.shape
    # One segment per (row, document); tokens without an entropy share one last, ignored segment.
    stride = int(document_ids.max()) + 1 if document_ids.numel() else 1
    rows = torch.arange(b, device=entropy.device).unsqueeze(1)
    segment = torch.where(has_entropy, rows * stride + document_ids, b * stride).flatten()
    h = entropy.flatten().nan_to_num(nan=0.0)  # NaN tokens are in the ignored segment
    key = h if targeting == "low" else -h
    # Two stable sorts: by key, then by segment, so each segment's tokens come in key order and
    # equal keys in position order. rank: a token's place within its own segment.
    by_key = torch.sort(key, stable=True).indices
    order = by_key[torch.sort(segment[by_key], stable=True).indices]
    count = torch.bincount(segment, minlength=b * stride + 1)
    first = torch.cumsum(count, 0) - count
    in_order = segment[order]
    rank = torch.arange(order.numel(), device=entropy.device) - first[in_order]
    quota = torch.floor(count.double() * gate_percentile + 1e-6).long()
    gate = torch.empty_like(has_entropy.flatten())
    gate[order] = rank < quota[in_order]
    return (gate & has_entropy.flatten()).view(b, s)


def drop_mask(gate: torch.Tensor, gamma: float, generators: List[torch.Generator]) -> torch.Tensor:
    """``[b, s]`` bool, Eq. 6: each gated token dropped independently with probability gamma,
    row r drawn from ``generators[r]``."""
    draws = torch.stack([torch.rand(gate.shape[1], generator=g, device=g.device) for g in generators])
    return gate & (draws < gamma)


@torch.no_grad()
def mean_embedding(weight: torch.Tensor) -> torch.Tensor:
    """e_bar: the mean of a ``[vocab, dim]`` embedding matrix, accumulated in fp32."""
    return weight.float().mean(dim=0)


def perturb_embeddings(x: torch.Tensor, drop: Optional[torch.Tensor], e_bar: torch.Tensor,
                       noise: Optional[torch.Tensor]) -> torch.Tensor:
    """Eq. 4 where ``drop`` is set (the embedding becomes e_bar exactly), plus NEFTune noise."""
    if drop is not None:
        x = torch.where(drop.unsqueeze(-1), e_bar.to(x.dtype), x)
    if noise is not None:
        x = x + noise.to(x.dtype)
    return x


def neftune_noise(valid: torch.Tensor, dim: int, alpha: float, generators: List[torch.Generator]) -> torch.Tensor:
    """NEFTune: U(-1, 1) * alpha / sqrt(L * d) on each real token, L = the row's real tokens."""
    rows = []
    for r, g in enumerate(generators):
        scale = alpha / math.sqrt(max(int(valid[r].sum()), 1) * dim)
        u = torch.rand(valid.shape[1], dim, generator=g, device=g.device) * 2 - 1
        rows.append(u * scale * valid[r].to(u.device).unsqueeze(-1))
    return torch.stack(rows)


@dataclass(frozen=True)
class TokenDropoutPlan:
    """The method's plan for a run: its token-dropout settings, fixed from the config (all but a
    ``midpoint: auto`` not fixed yet); ``plan`` draws one step's mask from them. What changes as
    the run goes is ``entrodrop.train.token_dropout.TokenDropoutState``'s.

    ``midpoint`` is in ``midpoint_unit`` (``steps``, or ``epochs`` of the target corpus as the
    stream realizes them: see ``midpoint_step``); None while ``midpoint: auto`` has not fixed
    it, and gamma_max(j) is 0 exactly until then.
    """

    targeting: str
    gate_percentile: float
    schedule: str
    gamma_max: float
    sharpness: float
    midpoint: Optional[float]
    midpoint_unit: str
    seed: int

    @classmethod
    def from_config(cls, token_dropout, seed: int) -> "TokenDropoutPlan":
        """The settings of a ``token_dropout`` config section, masks drawn from ``seed``. With
        ``midpoint: auto`` the midpoint starts as None (not fixed yet): ``entrodrop.train.midpoint``
        fixes it during the run. ``signal`` and the auto keys are read by those who use them.

        Example:
            >>> from omegaconf import OmegaConf
            >>> td = OmegaConf.create({"targeting": "low", "gate_percentile": 0.5, "schedule": "sigmoid",
            ...                        "gamma_max": 0.1, "sharpness": 0.2, "midpoint": "auto", "midpoint_unit": "epochs"})
            >>> TokenDropoutPlan.from_config(td, seed=0).midpoint is None
            True
        """
        return cls(token_dropout.targeting, token_dropout.gate_percentile, token_dropout.schedule,
                   token_dropout.gamma_max, token_dropout.sharpness,
                   None if token_dropout.midpoint == AUTO else token_dropout.midpoint, token_dropout.midpoint_unit,
                   seed)

    def plan(self, entropy: torch.Tensor, document_ids: torch.Tensor, step: int, target_epoch: float,
             rows: range) -> Tuple[Optional[torch.Tensor], float, float]:
        """(drop mask or None, gamma_max(j), gamma_j) for ``rows`` of the step's global batch,
        the batch that brings the stream to ``target_epoch``. The gate and the mask are computed
        on ``entropy``'s device, with that device's generators (a CUDA run draws other masks
        than a CPU run of the same seed, the same on any number of GPUs); gamma_j is drawn on
        the CPU, so the schedule's draws are the same everywhere."""
        midpoint = midpoint_step(self.midpoint, self.midpoint_unit, step, target_epoch)
        gamma_max_j = gamma_max_at(step, self.gamma_max, self.schedule, self.sharpness, midpoint)
        gamma = draw_gamma(gamma_max_j, row_generator(self.seed, step, -1))
        if gamma == 0.0:
            return None, gamma_max_j, gamma
        gate = entropy_gate(entropy, document_ids, self.gate_percentile, self.targeting)
        generators = [row_generator(self.seed, step, r, entropy.device) for r in rows]
        return drop_mask(gate, gamma, generators), gamma_max_j, gamma


def plan_perturbation(dropout: TokenDropoutPlan, neftune_alpha: float, batch: dict, step: int, rows: range,
                      dim: int, device: torch.device):
    """One step's input perturbation for ``rows`` of the global batch (a loader batch), planned
    on ``device``, the device the batch trains on: the mask is ready where the forward reads
    it, and nothing here waits for the device.

    Returns:
        (drop mask or None, NEFTune noise or None, {"gamma_max", "gamma"}, ``[2]`` int64 tensor
        on ``device``: dropped target tokens, target tokens) - the counts are summed over ranks
        before they are logged.
    """
    entropy, document_ids = (batch[k].to(device, non_blocking=True) for k in ("entropy", "document_ids"))
    drop, gamma_max_j, gamma = dropout.plan(entropy, document_ids, step, batch["target_epoch"], rows)
    noise = None
    if neftune_alpha > 0:
        generators = [row_generator(dropout.seed, step, r, device, stream="neftune") for r in rows]
        noise = neftune_noise(batch["domain"] >= 0, dim, neftune_alpha, generators)
    target = batch["domain"].to(device, non_blocking=True) == TARGET
    dropped = (drop & target).sum() if drop is not None else torch.zeros((), dtype=torch.long, device=device)
    return drop, noise, {"gamma_max": gamma_max_j, "gamma": gamma}, torch.stack([dropped, target.sum()])


class EmbeddingHook:
    """A forward hook on the token embedding that applies a per-step function to its output.

    A hook, rather than a wrapper module, keeps the state-dict keys, the tied output
    projection, FSDP2's sharding of the embedding and activation checkpointing untouched.
    ``set(fn)`` before a forward; ``set(None)`` for an unperturbed one (evaluation).
    """

    def __init__(self, embedding: nn.Module) -> None:
        self._fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
        self._handle = embedding.register_forward_hook(lambda module, args, out: out if self._fn is None else self._fn(out))

    def set(self, fn: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> None:
        self._fn = fn


def add_hidden_dropout(model: nn.Module, p: float) -> None:
    """Dropout at rate ``p`` on the output of every attention and MLP block, before the residual
    add (hidden dropout as in Megatron-LM); active only in training mode."""
    for layer in model.layers:
        for block in (layer.attn, layer.mlp):
            block.register_forward_hook(lambda module, args, out: F.dropout(out, p, module.training))

