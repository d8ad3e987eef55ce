"""Validation loss by entropy bucket, the paper's diagnostic of multi-epoch overfitting.

Held-out target samples (a token store and their entropy cache, computed with the base
model like the training ones) are packed in order into rows, evaluated longest first. Their tokens fall in three
buckets, over all N held-out tokens that have an entropy:

    all    every predicted token
    low    the floor(N / 2) lowest-entropy tokens (the paper's "top 50% confidence")
    high   the floor(N / 4) highest-entropy tokens ("bottom 25% confidence")

Exact shares of one order of all N tokens: by entropy, equal entropies by position in the
store (sample index, then position within the sample), earlier first - the order in which the
training gate (``entrodrop.method.dropout.entropy_gate``, ``targeting: low``) takes tokens. Low is the
first floor(N / 2) of that order, high the last floor(N / 4), so the two never share a token.
A threshold (``H >= quantile``) would take every tie: the cache stores fp16, and on the tiny
models, whose entropies take two values, the "high 25%" held every token.

A token's bucket is that of the token being predicted (its label), whose entropy H(x_t) is
the base model's uncertainty about it.
"""

import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from entrodrop.data.packing import IGNORE_INDEX, TARGET, block_causal_mask, pack_rows
from entrodrop.data.sample_store import SampleStore
from entrodrop.data.training_stores import checked_validation

LOW_FRACTION, HIGH_FRACTION = 0.5, 0.25


# A token's bucket: LOW, HIGH, or 0 (neither, or no entropy).
LOW, HIGH = 1, 2


BUCKETS = ("all", "low", "high")


def entropy_buckets(entropies: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Each sample's ``uint8`` bucket per token (``LOW``, ``HIGH``; 0: neither, or no entropy)
    from every sample's entropies in store order, the exact shares of the module docs.

    Computed once over the whole held-out set, because a bucket is a share of all its tokens:
    every rank computes the same flags and then packs only its own rows.

    Example:
        >>> nan = float("nan")
        >>> [f.tolist() for f in entropy_buckets([np.array([nan, 1.0, 1.0]), np.array([nan, 3.0, 1.0, 2.0])])]
        [[0, 1, 1], [0, 2, 0, 0]]
    """
    values = np.concatenate([np.zeros(0, np.float32), *(np.asarray(h, np.float32) for h in entropies)])
    has_entropy = np.flatnonzero(~np.isnan(values))
    h = values[has_entropy]
    flags = np.zeros(len(values), np.uint8)
    # A stable sort keeps equal entropies in store order (sample, then position): earlier first.
    # floor(n * 0.5) and floor(n * 0.25) are exact, so no rounding guard as in entropy_gate.
    order = has_entropy[np.argsort(h, kind="stable")]
    flags[order[: math.floor(len(h) * LOW_FRACTION)]] = LOW
    flags[order[len(h) - math.floor(len(h) * HIGH_FRACTION):]] = HIGH
    ends = np.cumsum([len(x) for x in entropies], dtype=np.int64)
    return [flags[end - len(x) : end] for x, end in zip(entropies, ends)]


def bucket_entropies(entropies: Sequence[np.ndarray], buckets: Sequence[np.ndarray]) -> Dict[str, float]:
    """The base model's mean entropy (nats) of each bucket's tokens (``BUCKETS``; ``buckets``: the
    flags ``entropy_buckets`` gave ``entropies``): how certain the base already was of the tokens each
    validation loss scores. The paper's premise (its figure 1c) is a low bucket near zero.

    Example:
        >>> h = [np.array([np.nan, 0.0, 0.2, 3.0]), np.array([np.nan, 1.0])]
        >>> {k: round(v, 3) for k, v in bucket_entropies(h, entropy_buckets(h)).items()}
        {'all': 1.05, 'low': 0.1, 'high': 3.0}
    """
    values = np.concatenate([np.zeros(0, np.float64), *(np.asarray(h, np.float64) for h in entropies)])
    flags = np.concatenate([np.zeros(0, np.uint8), *buckets])
    masks = {"all": ~np.isnan(values), "low": flags == LOW, "high": flags == HIGH}
    return {name: float(values[m].mean()) if m.any() else math.nan for name, m in masks.items()}


def open_validation(tokens_dir: Optional[str], entropy_dir: Optional[str]) -> Optional[Tuple[SampleStore, SampleStore]]:
    """The held-out token store and its entropy cache (None when ``tokens_dir`` is null), checked
    before any model loads: the cache was computed on these samples (``check_join``) and the
    token files hold the ids they were written with (``SampleStore.check_tokens``)."""
    if not tokens_dir:
        return None
    return checked_validation(SampleStore(tokens_dir, "tokens"), SampleStore(entropy_dir, "entropy"))


def validation_batches(tokens: SampleStore, entropy: SampleStore, buckets: Sequence[np.ndarray], seq_len: int,
                       batch_size: int, rank: int = 0, world_size: int = 1) -> Iterator[Dict[str, torch.Tensor]]:
    """The held-out samples packed in order into rows; rank r gets rows r, r + N, ... of them,
    longest first, in batches. ``buckets``: each sample's bucket flags (``entropy_buckets`` of
    ``entropy``), which the batches carry as ``batch["bucket"]`` (``[b, s]`` uint8, 0 where a row
    has no sample).

    A batch is cut after its longest row's last token: the columns beyond hold padding alone,
    which a causal model's earlier positions never see, so every loss is the one the full rows
    give (up to float rounding) for less work; the longest rows go first so that the rows of a
    batch are alike in length. Every rank yields the same number of batches (a rank out of rows
    gets one empty row), so a sharded model runs the same forwards on every rank.
    """
    rows, row, free = [], [], seq_len
    for i in range(len(tokens)):
        n = int(tokens.table[i]["length"])
        if n == 0:
            continue
        if n > free:
            rows.append(row)
            row, free = [], seq_len
        row.append((TARGET, i))
        free -= n
    rows.append(row)
    used = lambda row: sum(int(tokens.table[i]["length"]) for _, i in row)  # noqa: E731
    rows.sort(key=used, reverse=True)  # stable: rows of one length stay in store order
    mine, num_batches = rows[rank::world_size], math.ceil(math.ceil(len(rows) / world_size) / batch_size)

    def fetch(domain: int, i: int):
        ids = tokens[i]
        entropy.check_sample(i, ids)
        return ids, buckets[i]

    for start in range(0, num_batches * batch_size, batch_size):
        part = mine[start : start + batch_size] or [[]]  # out of rows: one empty row, a forward like the others'
        batch = pack_rows(part, seq_len, fetch)
        # pack_rows lays out what fetch returns beside the ids as float32 "entropy", NaN outside
        # the samples: here those values are the bucket flags (0 to 3, exact in float32).
        batch["bucket"] = batch.pop("entropy").nan_to_num(0).to(torch.uint8)
        width = max(1, max(map(used, part)))  # an all-empty batch (another rank has rows) keeps one column
        yield {k: v[:, :width] for k, v in batch.items()}


@torch.no_grad()
def bucket_loss_sums(model: torch.nn.Module, batch: Dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """``[6]`` float64: (loss sum, token count) for all, low and high, on one batch, its tokens
    bucketed by ``batch["bucket"]`` (``[b, s]`` flags of the input tokens, see ``validation_batches``)."""
    batch = {k: v.to(device) for k, v in batch.items()}
    logits = model(batch["tokens"], mask=block_causal_mask(batch["document_ids"]), input_pos=batch["input_pos"])
    chunks = logits if isinstance(logits, list) else [logits]
    labels = batch["labels"].chunk(len(chunks), dim=1)
    # Chunks split the sequence: rejoin each chunk's [b, s / n] losses along it, so that they
    # line up with the [b, s] entropies and labels flattened below.
    losses = torch.cat([
        F.cross_entropy(c.float().flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX, reduction="none").view(y.shape)
        for c, y in zip(chunks, labels)
    ], dim=1).flatten()
    # The bucket of the predicted token: the input's flags one position to the right.
    label_bucket = torch.cat([batch["bucket"][:, 1:], torch.zeros_like(batch["bucket"][:, :1])], 1).flatten()
    valid = batch["labels"].flatten() != IGNORE_INDEX
    masks = [valid, valid & (label_bucket == LOW), valid & (label_bucket == HIGH)]
    return torch.stack([x for m in masks for x in (losses[m].double().sum(), m.double().sum())])


def validation_losses(model: torch.nn.Module, batches: Iterator[Dict[str, torch.Tensor]], device: torch.device,
                      distributed: bool = False) -> Dict[str, float]:
    """Mean loss per bucket over all batches (and all ranks when ``distributed``: each rank's
    rows are disjoint and its flags are shares of the whole set, so the summed counts are exact)."""
    totals = torch.zeros(6, dtype=torch.float64, device=device)
    for batch in batches:
        totals += bucket_loss_sums(model, batch, device)
    if distributed:
        dist.all_reduce(totals)
    return {name: (totals[2 * k] / totals[2 * k + 1]).item() for k, name in enumerate(BUCKETS)}
