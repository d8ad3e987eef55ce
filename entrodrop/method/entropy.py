"""Contextual token entropy under a base model, without a [batch, seq, vocab] tensor.

H(x_t) = -sum_v p(v | x_<t) log p(v | x_<t) is the entropy of the distribution the model
predicts *for* token t, read off the hidden state at position t - 1. The first token of a
sample has no context and no entropy: it is NaN, and NaN is never gated for dropout.

Samples reach the model in one of two layouts, with the same entropies (to rounding):

- batched by length (``sample_entropies``): right-padded, one sample a row, plain causal
  attention; batches of similar lengths waste little, but every batch has its own shape;
- packed (``packed_sample_entropies``): whole samples laid end to end in rows of a fixed
  length with a block-causal mask and per-document positions, as training packs them
  (``entrodrop.data.packing``), so every batch has one shape and almost no padding.

The cache the precompute writes (recipes/precompute_entropy.py) is data: its checks live with
the other data code (``entrodrop.data.entropy_cache``).
"""

from typing import Callable, List, Optional, Sequence

import torch
from torchtune.modules import TransformerDecoder

from entrodrop.data.packing import IGNORE_INDEX, TARGET, block_causal_mask, pack_rows, pack_samples
from entrodrop.models.head import fp32_logits, layerwise_hidden_states, output_weight


def entropy_from_hidden(
    hidden: torch.Tensor, weight: torch.Tensor, chunk_size: int, vocab_chunk_size: int
) -> torch.Tensor:
    """Entropy of ``softmax(hidden @ weight.T)`` for each row, without a ``[rows, vocab]`` tensor.

    Rows go ``chunk_size`` at a time and, within a chunk, the vocabulary ``vocab_chunk_size``
    columns at a time, so the largest temporary is ``[chunk_size, vocab_chunk_size]`` fp32
    whatever the vocabulary. The entropy is taken in logsumexp form with a running maximum
    (as an online softmax does): over the columns seen so far, with m their largest logit,

        s = sum_v exp(z_v - m),  t = sum_v exp(z_v - m) z_v,  H = m + log s - t / s,

    and when a new column block raises m to m', s and t are both scaled by exp(m - m').
    Small column blocks stay in cache, which on CPU makes this faster than materializing
    the chunk's full logits (benchmarks/bench_entropy.py).

    Args:
        hidden (torch.Tensor): ``[n, dim]`` final hidden states.
        weight (torch.Tensor): ``[vocab, dim]`` output projection.
        chunk_size (int): rows per chunk.
        vocab_chunk_size (int): vocabulary columns per block.

    Returns:
        torch.Tensor: ``[n]`` fp32 entropies in nats.

    Example:
        >>> w = torch.zeros(5, 3)  # every logit equal: uniform over 5 tokens
        >>> entropy_from_hidden(torch.randn(2, 3), w, chunk_size=1, vocab_chunk_size=2)
        tensor([1.6094, 1.6094])
    """
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk_size):
        h = hidden[start : start + chunk_size]
        m = torch.full((h.shape[0],), float("-inf"), device=h.device)
        s = torch.zeros(h.shape[0], device=h.device)
        t = torch.zeros(h.shape[0], device=h.device)
        for w in weight.split(vocab_chunk_size):
            z = fp32_logits(h, w)
            m_new = torch.maximum(m, z.amax(dim=-1))
            rescale = torch.exp(m - m_new)  # 0 for the first block, where m = -inf
            e = (z - m_new.unsqueeze(-1)).exp_()
            s = s * rescale + e.sum(dim=-1)
            t = t * rescale + e.mul_(z).sum(dim=-1)
            m = m_new
        out[start : start + chunk_size] = m + s.log() - t / s
    return out


@torch.no_grad()
def sample_entropies(
    model: TransformerDecoder,
    samples: List[torch.Tensor],
    chunk_size: int,
    vocab_chunk_size: int,
) -> List[torch.Tensor]:
    """Entropy of every token of each sample: ``[L_i]`` fp32, NaN at position 0.

    The samples are right-padded into one batch; only real positions reach the output
    projection.

    Args:
        model (TransformerDecoder): the base model, in eval mode.
        samples (List[torch.Tensor]): 1-D token ids, each of length >= 1.
        chunk_size (int): tokens per output-projection chunk.
        vocab_chunk_size (int): vocabulary columns per block.
    """
    device = output_weight(model).device
    lengths = torch.tensor([len(s) for s in samples])
    # Pad with token 0: causal attention keeps padding out of every real position.
    tokens = torch.nn.utils.rnn.pad_sequence([s.long() for s in samples], batch_first=True, padding_value=0)
    hidden = layerwise_hidden_states(model, tokens.to(device))
    # Position t - 1 predicts token t: keep positions 0 .. L_i - 2 of each sample.
    predicts = torch.arange(tokens.shape[1]) < (lengths - 1).unsqueeze(1)
    flat = entropy_from_hidden(hidden[predicts.to(device)], output_weight(model), chunk_size, vocab_chunk_size).cpu()
    first = torch.full((1,), float("nan"))
    return [torch.cat([first, h]) for h in flat.split((lengths - 1).tolist())]


@torch.no_grad()
def packed_sample_entropies(
    model: TransformerDecoder,
    rows: List[List[torch.Tensor]],
    pack_len: int,
    chunk_size: int,
    vocab_chunk_size: int,
) -> List[List[torch.Tensor]]:
    """``sample_entropies`` of samples packed whole into rows of ``pack_len`` tokens.

    Row r holds the samples ``rows[r]`` end to end, then padding; the batch is
    ``[len(rows), pack_len]`` however many samples it holds (a row may be empty). Each
    sample attends only to itself (``block_causal_mask``: a dense bool mask on CPU, a flex
    attention ``BlockMask`` on GPUs) and has its own positions from 0, so its entropies are
    those it has alone. Only positions that predict a token of their own sample reach the
    output projection.

    Args:
        model (TransformerDecoder): the base model, in eval mode.
        rows (List[List[torch.Tensor]]): 1-D token ids, the samples of each row; each
            sample of length >= 1, each row's lengths summing to at most ``pack_len``.
        pack_len (int): tokens per row.
        chunk_size (int): tokens per output-projection chunk.
        vocab_chunk_size (int): vocabulary columns per block.

    Returns:
        List[List[torch.Tensor]]: ``[L]`` fp32 entropies of each sample, NaN at position 0,
        in the layout of ``rows``.
    """
    device = output_weight(model).device
    flat = [s.numpy() for row in rows for s in row]
    numbers = iter(range(len(flat)))
    layout = [[(TARGET, next(numbers)) for _ in row] for row in rows]  # pack_rows' (domain, id) per sample
    batch = pack_rows(layout, pack_len, lambda _, i: (flat[i], None))
    document_ids = batch["document_ids"].to(device)
    # pack_rows numbers padding positions from 0 after a row's last sample; they count to
    # pack_len - 1 in an empty row, past the rotary cache of a model whose max_seq_len is
    # shorter. Padding is read by nothing, so position 0 serves.
    input_pos = batch["input_pos"].masked_fill(batch["document_ids"] < 0, 0).to(device)
    hidden = layerwise_hidden_states(model, batch["tokens"].to(device), block_causal_mask(document_ids), input_pos)
    # A position predicts the next token of its own sample exactly where it has a label.
    predicts = (batch["labels"] != IGNORE_INDEX).to(device)
    entropies = entropy_from_hidden(hidden[predicts], output_weight(model), chunk_size, vocab_chunk_size).cpu()
    first = torch.full((1,), float("nan"))
    per_sample = iter([torch.cat([first, h]) for h in entropies.split([len(s) - 1 for s in flat])])
    return [[next(per_sample) for _ in row] for row in rows]


def shard_entropies(
    model: TransformerDecoder,
    samples: Sequence[Sequence[int]],
    batch_size: int,
    chunk_size: int,
    vocab_chunk_size: int,
    pack_len: Optional[int],
    on_batch: Optional[Callable[[int], None]] = None,
) -> List[torch.Tensor]:
    """The entropies of a list of samples, in their order, ``batch_size`` samples or rows at a time.

    ``pack_len=None`` batches ``batch_size`` samples by length (``sample_entropies``: less
    padding); an integer packs the samples into rows of ``pack_len`` tokens (``pack_samples``,
    ``packed_sample_entropies``) and runs ``batch_size`` rows at a time, the last batch
    filled with empty rows so that every batch is ``[batch_size, pack_len]``. Either way the
    batches depend on ``samples`` alone, so a shard comes out the same whichever process
    computes it. Empty samples give empty tensors. ``on_batch`` is called with each batch's
    token count (for a progress bar).

    Raises:
        ValueError: with ``pack_len``, a sample longer than ``pack_len``.
    """
    result = [torch.zeros(0) for _ in samples]
    if pack_len is None:
        order = sorted((i for i in range(len(samples)) if len(samples[i])), key=lambda i: len(samples[i]))
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            entropies = sample_entropies(model, [torch.tensor(samples[i]) for i in batch], chunk_size, vocab_chunk_size)
            for i, h in zip(batch, entropies):
                result[i] = h
            if on_batch is not None:
                on_batch(sum(len(samples[i]) for i in batch))
        return result
    rows = pack_samples([len(s) for s in samples], pack_len)
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        # The shard's last batch is filled with empty rows: one shape for every batch, so a
        # compiled model and flex attention see no new shape.
        padded = [[torch.tensor(samples[i]) for i in row] for row in batch] + [[]] * (batch_size - len(batch))
        entropies = packed_sample_entropies(model, padded, pack_len, chunk_size, vocab_chunk_size)
        for row, row_entropies in zip(batch, entropies):
            for i, h in zip(row, row_entropies):
                result[i] = h
        if on_batch is not None:
            on_batch(sum(len(samples[i]) for row in batch for i in row))
    return result
