"""The training loss from the final hidden states and the output weight, without logits.

The unfused loss projects every hidden state onto the vocabulary and keeps the whole
``[tokens, vocab]`` logits (and their gradient) for backward: 20 GB in fp32 for one micro-batch
of 8 x 4,096 tokens at Qwen3's 151,936 entries. ``linear_cross_entropy`` takes ``chunk_size``
tokens at a time instead: in forward it computes a chunk's logits, their logsumexp and the
loss, keeping only the hidden states, the weight and one fp32 logsumexp per token; in
backward it recomputes each chunk's logits to produce that chunk's share of the gradients of
the hidden states and the weight. One extra matmul buys memory that no longer grows with the
vocabulary.

The recipes get the hidden states from the model's own forward with the output projection
bypassed (``hidden_states``), so the embedding hook, activation checkpointing and FSDP2's
hooks run as they always do. ``model_output_for`` sets up whichever loss a config names:
``LinearCrossEntropy`` (this module's, or liger-kernel's triton kernel on CUDA) or torchtune's
``CEWithChunkedOutputLoss`` over chunks of logits.
"""

from functools import partial
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torchtune.data import CROSS_ENTROPY_IGNORE_IDX as IGNORE_INDEX
from torchtune.modules import TransformerDecoder

from entrodrop.errors import ConfigError, MissingPackageError
from entrodrop.models.head import hidden_states, output_weight, projection_weight

IMPLS = ("torch", "liger")
REDUCTIONS = ("mean", "sum")
# Evaluation (entrodrop.eval.evaluator, entrodrop.eval.adapter) still reads logits from the
# model's forward. With the fused loss the model returns them in this many chunks along the
# sequence, bf16 under a bf16 model, as torchtune's chunked loss configs had them: a full
# fp32 [8, 4096, 151936] validation batch would be 20 GB.
EVALUATION_OUTPUT_CHUNKS = 8


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``[c, v]`` logits of ``[c, d]`` hidden states: projected in the weight's dtype, then upcast
    to fp32 (fp64 stays), as the unfused path (``output(h).float()``) does."""
    logits = F.linear(hidden, weight)
    return logits.to(_accumulation_dtype(logits.dtype))


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for bf16, fp16 and fp32; fp64 for fp64 (gradcheck)."""
    return torch.promote_types(dtype, torch.float32)


def _target_losses(logits: torch.Tensor, logsumexp: torch.Tensor, labels: torch.Tensor,
                   ignore_index: int) -> torch.Tensor:
    """``[c]`` fp32: logsumexp - the label's logit, 0 where the label is ``ignore_index``."""
    valid = labels != ignore_index
    target = logits.gather(1, torch.where(valid, labels, 0).unsqueeze(1)).squeeze(1)
    return torch.where(valid, logsumexp - target, 0.0)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T`` against ``labels``, ``chunk_size`` rows at a
    time; and each row's own loss (0 where ignored), a by-product without a gradient."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int,
                ignore_index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        dtype = _accumulation_dtype(hidden.dtype)
        total = torch.zeros((), dtype=dtype, device=hidden.device)
        logsumexp = torch.empty(hidden.shape[0], dtype=dtype, device=hidden.device)
        losses = torch.empty(hidden.shape[0], dtype=dtype, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            logits = _chunk_logits(hidden[rows], weight)
            logsumexp[rows] = torch.logsumexp(logits, dim=-1)
            losses[rows] = _target_losses(logits, logsumexp[rows], labels[rows], ignore_index)
            total += losses[rows].sum()
        ctx.save_for_backward(hidden, weight, labels, logsumexp)
        ctx.chunk_size, ctx.ignore_index = chunk_size, ignore_index
        ctx.mark_non_differentiable(losses)
        return total, losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_total: torch.Tensor, _grad_losses: Optional[torch.Tensor] = None):
        hidden, weight, labels, logsumexp = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        # Summed over chunks in fp32 even for a bf16 weight, then cast once: the unfused path
        # rounds the weight's gradient once too.
        grad_weight = torch.zeros_like(weight, dtype=logsumexp.dtype) if need_weight else None
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            h, y = hidden[rows], labels[rows]
            valid = y != ctx.ignore_index
            # d loss / d logits = softmax - one_hot(label), zero for ignored tokens; in place.
            grad_logits = _chunk_logits(h, weight).sub_(logsumexp[rows].unsqueeze(1)).exp_()
            grad_logits.scatter_add_(1, torch.where(valid, y, 0).unsqueeze(1), -valid.unsqueeze(1).to(logsumexp.dtype))
            grad_logits.mul_((valid * grad_total).unsqueeze(1))
            grad_logits = grad_logits.to(weight.dtype)
            if need_hidden:
                grad_hidden[rows] = grad_logits @ weight
            if need_weight:
                if grad_weight.dtype == grad_logits.dtype:
                    grad_weight.addmm_(grad_logits.t(), h)
                else:
                    grad_weight += grad_logits.t() @ h
        if need_weight:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int = 4096,
                         ignore_index: int = IGNORE_INDEX, reduction: str = "sum") -> torch.Tensor:
    """Cross-entropy of ``softmax(hidden @ weight.T)`` against ``labels``, without the logits.

    Equal to ``F.cross_entropy(F.linear(hidden, weight).float().flatten(0, -2), labels.flatten(),
    ignore_index=ignore_index, reduction=reduction)``; at most a ``[chunk_size, vocab]`` fp32
    block of logits exists at a time, in forward and in backward (see the module docstring).

    Args:
        hidden (torch.Tensor): ``[..., d]`` final hidden states (after the last norm).
        weight (torch.Tensor): ``[vocab, d]`` output projection (no bias).
        labels (torch.Tensor): ``[...]`` target ids, ``ignore_index`` where there is no loss.
        chunk_size (int): tokens per chunk.
        ignore_index (int): the label of tokens without a loss. Default -100.
        reduction (str): ``sum`` over the labelled tokens, or their ``mean`` (NaN when there are
            none, as ``F.cross_entropy``). Default ``sum``.

    Returns:
        torch.Tensor: the fp32 scalar loss.

    Example:
        >>> hidden, weight = torch.randn(2, 3, 4), torch.randn(10, 4)
        >>> labels = torch.tensor([[1, 2, -100], [3, 4, 5]])
        >>> loss = linear_cross_entropy(hidden, weight, labels, chunk_size=2, reduction="mean")
        >>> reference = F.cross_entropy((hidden @ weight.T).flatten(0, 1), labels.flatten())
        >>> torch.allclose(loss, reference)
        True
    """
    return linear_cross_entropy_and_token_losses(hidden, weight, labels, chunk_size, ignore_index, reduction)[0]


def linear_cross_entropy_and_token_losses(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                          chunk_size: int = 4096, ignore_index: int = IGNORE_INDEX,
                                          reduction: str = "sum") -> Tuple[torch.Tensor, torch.Tensor]:
    """``linear_cross_entropy``, and the ``[...]`` fp32 loss of each token (0 where ignored), detached:
    the chunks compute it anyway, so it costs one write of a float per token, and no device sync."""
    if hidden.shape[:-1] != labels.shape or weight.ndim != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)} and labels "
                         f"{tuple(labels.shape)} do not fit: expected [..., d], [vocab, d] and [...]")
    _check_settings(chunk_size, "torch", reduction)
    shape = labels.shape
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    total, losses = _ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk_size, ignore_index)
    return (total if reduction == "sum" else total / (labels != ignore_index).sum()), losses.view(shape)


def _check_settings(chunk_size, impl, reduction) -> None:
    problems = []
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        problems.append(f"chunk_size={chunk_size!r} must be a positive integer (tokens per chunk)")
    if impl not in IMPLS:
        problems.append(f"impl={impl!r} must be one of {', '.join(IMPLS)}")
    if reduction not in REDUCTIONS:
        problems.append(f"reduction={reduction!r} must be one of {', '.join(REDUCTIONS)}")
    if problems:
        raise ConfigError("LinearCrossEntropy: " + "; ".join(problems))



class LinearCrossEntropy:
    """The fused linear + cross-entropy loss, as a config component (``loss:`` in the YAML).

    Call ``set_model_output(model)`` once; then ``loss(hidden, labels)`` projects the
    ``[b, s, d]`` hidden states from ``hidden_states`` onto the model's output weight in chunks
    and returns the loss: the ``mean`` over labelled tokens by default, as torchtune's losses
    return it and the recipes expect.

    Args:
        chunk_size (int): tokens per chunk (``impl: torch``); a chunk holds a
            ``[chunk_size, vocab]`` fp32 block of logits, 2.5 GB at 4,096 x 151,936.
        impl (str): ``torch`` (``linear_cross_entropy``: any device) or ``liger`` (liger-kernel's
            fused linear cross entropy, a triton kernel: CUDA only, ``pip install -e '.[gpu]'``;
            it picks its own chunks). Default ``torch``.
        ignore_index (int): the label of tokens without a loss. Default -100.
        reduction (str): ``mean`` or ``sum``. Default ``mean``.

    Raises:
        ValueError: a setting out of range, naming it.
        MissingPackageError: ``impl: liger`` without liger-kernel installed, naming the install
            command (a ``ConfigError``, and an ``ImportError``: the recipes print its message alone).
    """

    def __init__(self, chunk_size: int = 4096, impl: str = "torch", ignore_index: int = IGNORE_INDEX,
                 reduction: str = "mean") -> None:
        _check_settings(chunk_size, impl, reduction)
        self.chunk_size, self.impl, self.ignore_index, self.reduction = chunk_size, impl, ignore_index, reduction
        self._model: Optional[TransformerDecoder] = None
        self._liger = _liger_loss(ignore_index, reduction) if impl == "liger" else None

    def set_model_output(self, model: TransformerDecoder) -> None:
        """Bind the loss to ``model``'s output projection (its weight is read at each call)."""
        projection_weight(model)  # a model without a usable projection fails here, not at the first step
        self._model = model

    def with_token_losses(self, hidden: torch.Tensor, labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The loss, and each token's loss (``[b, s]`` fp32, detached, 0 where ignored); ``impl: torch`` only."""
        if self._model is None or self._liger is not None:
            raise RuntimeError("LinearCrossEntropy.with_token_losses: impl: torch, after set_model_output(model)")
        return linear_cross_entropy_and_token_losses(hidden, output_weight(self._model), labels, self.chunk_size,
                                                     self.ignore_index, self.reduction)

    def __call__(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self._model is None:
            raise RuntimeError("LinearCrossEntropy: call set_model_output(model) before computing the loss")
        weight = output_weight(self._model)
        if self._liger is None:
            return linear_cross_entropy(hidden, weight, labels, self.chunk_size, self.ignore_index, self.reduction)
        if not hidden.is_cuda:
            raise ConfigError(f"LinearCrossEntropy impl='liger' runs on CUDA only (a triton kernel), not on "
                             f"{hidden.device.type}: use impl: torch")
        return self._liger(weight, hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1))


def _liger_loss(ignore_index: int, reduction: str) -> nn.Module:
    """liger-kernel's fused linear cross entropy, imported only when a config asks for it."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError as e:
        raise MissingPackageError(f"loss.impl=liger needs liger-kernel (with triton and a CUDA GPU), which did not "
                                  f"import ({e}): pip install -e '.[gpu]', or use impl: torch") from None
    # accum_dtype fp32: the weight's gradient summed over chunks in fp32, as impl: torch does.
    return LigerFusedLinearCrossEntropyLoss(ignore_index=ignore_index, reduction=reduction, accum_dtype=torch.float32)


def model_output_for(model: TransformerDecoder, loss_fn) -> Callable[..., object]:
    """The forward whose output ``loss_fn`` reads, called like the model itself.

    - ``LinearCrossEntropy``: ``hidden_states`` (the projection is the loss's), the loss bound
      to the model's output weight; the model's own forward, which evaluation uses, returns
      logits in ``EVALUATION_OUTPUT_CHUNKS`` chunks.
    - torchtune's ``CEWithChunkedOutputLoss``: the model, returning ``num_output_chunks`` chunks of logits.
    """
    if isinstance(loss_fn, LinearCrossEntropy):
        if loss_fn.reduction != "mean":
            raise ConfigError(f"LinearCrossEntropy reduction={loss_fn.reduction!r}: the recipes take the mean over "
                             "labelled tokens, as torchtune's losses return it (leave reduction out of the config)")
        loss_fn.set_model_output(model)
        model.set_num_output_chunks(EVALUATION_OUTPUT_CHUNKS)
        return partial(hidden_states, model)
    if isinstance(getattr(loss_fn, "num_output_chunks", None), int):
        model.set_num_output_chunks(loss_fn.num_output_chunks)
        return model
    raise ConfigError(f"loss {type(loss_fn).__module__}.{type(loss_fn).__name__} is not supported by the recipes: use "
                     "entrodrop.models.loss.LinearCrossEntropy or torchtune.modules.loss.CEWithChunkedOutputLoss")
