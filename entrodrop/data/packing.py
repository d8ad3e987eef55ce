"""Rows of whole samples laid end to end: the token kinds, ``pack_rows`` and the block-causal
mask, shared by training (``entrodrop.data.loader``), the entropy precompute and validation, and
``pack_samples``, the precompute's choice of which samples share a row.

Training chooses its rows itself (``MixedPackedStream``): it takes samples in the order the seed
drew them and carries the one that does not fit to the next row, since that order is the data
order the run trains on. The precompute has a whole shard at once and no order to keep, so
``pack_samples`` fits the shard best (fewer rows, less padding); the two choices differ, and
both hand their rows to ``pack_rows``.

A packed row holds whole samples end to end, each with its own positions and a mask that keeps
attention inside its sample; labels are each token's successor within its sample
(``IGNORE_INDEX`` at a sample's last token and on padding). ``domain`` marks each slot
``TARGET``, ``GENERAL`` or ``PADDING``; only target slots carry an entropy.
"""

import bisect
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

# The label torchtune's losses ignore (torchtune.data.CROSS_ENTROPY_IGNORE_IDX, and PyTorch's
# cross_entropy's default), written here so that reading data imports no torchtune.
IGNORE_INDEX = -100


TARGET, GENERAL, PADDING = 1, 0, -1


def block_causal_mask(document_ids: torch.Tensor):
    """``[b, s]`` document ids -> torchtune's packed-sequence mask: position i may attend to j
    iff j <= i in the same document (padding is one more document). A ``[b, s, s]`` bool tensor
    on the ids' device; for ids on a GPU that runs flex attention, torchtune's ``BlockMask``,
    which never materializes it. The ids' device decides, not the machine: torchtune builds its
    ``BlockMask`` on CUDA, which a model on the CPU of a machine with a GPU cannot read.

    A row's documents are runs of one id (as ``pack_rows`` lays them out), so "the same
    document" is "the same id": the dense mask is one comparison, where torchtune's builds a
    ``tril`` per document and joins them with ``block_diag`` (about 8% of a tiny model's CPU step
    in a profile of the training recipe).

    Example:
        >>> block_causal_mask(torch.tensor([[0, 0, 1]]))[0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [0, 0, 1]], dtype=torch.int32)
    """
    if document_ids.is_cuda:
        from torchtune.modules.attention_utils import _SUPPORTS_FLEX_ATTENTION, packed_block_causal_mask

        if _SUPPORTS_FLEX_ATTENTION:
            return packed_block_causal_mask([torch.unique_consecutive(row, return_counts=True)[1]
                                             for row in document_ids])
    s = document_ids.shape[-1]
    causal = torch.ones(s, s, dtype=torch.bool, device=document_ids.device).tril()
    return (document_ids.unsqueeze(2) == document_ids.unsqueeze(1)) & causal


def pack_rows(rows: List[List[Tuple[int, int]]], seq_len: int,
              fetch: Callable[[int, int], Tuple[np.ndarray, Optional[np.ndarray]]]) -> Dict[str, torch.Tensor]:
    """Tensors of packed rows (see the module docs); ``rows[r]`` lists the (domain, sample id)
    in row r and ``fetch`` returns a sample's token ids and entropies (None: not target)."""
    b = len(rows)
    tokens = np.zeros((b, seq_len), np.int64)
    labels = np.full((b, seq_len), IGNORE_INDEX, np.int64)
    entropy = np.full((b, seq_len), np.nan, np.float32)
    domain = np.full((b, seq_len), PADDING, np.int8)
    document_ids = np.full((b, seq_len), -1, np.int32)
    sample = np.full((b, seq_len), -1, np.int64)
    input_pos = np.tile(np.arange(seq_len), (b, 1))
    for r, row in enumerate(rows):
        start = 0
        for doc, (dom, i) in enumerate(row):
            ids, ent = fetch(dom, i)
            end = start + len(ids)
            tokens[r, start:end] = ids
            labels[r, start : end - 1] = ids[1:]
            domain[r, start:end] = dom
            document_ids[r, start:end] = doc
            input_pos[r, start:end] = np.arange(len(ids))
            if dom == TARGET:
                sample[r, start:end] = i
            if ent is not None:
                entropy[r, start:end] = ent
            start = end
        input_pos[r, start:] = np.arange(seq_len - start)
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "entropy": torch.from_numpy(entropy),
        "domain": torch.from_numpy(domain),
        "document_ids": torch.from_numpy(document_ids),
        "input_pos": torch.from_numpy(input_pos),
        "sample": torch.from_numpy(sample),
    }


def pack_samples(lengths: Sequence[int], pack_len: int) -> List[List[int]]:
    """Rows of sample indices whose lengths sum to at most ``pack_len``, by best fit decreasing.

    Samples are taken longest first (ties in index order), each into the row with the least
    room that still holds it, else into a new row; a row lists its samples longest first.
    The rows depend on ``lengths`` alone. Empty samples go in no row.

    Raises:
        ValueError: a sample longer than ``pack_len``, named with both lengths.

    Example:
        >>> pack_samples([3, 5, 0, 2, 4], pack_len=7)
        [[1, 3], [4, 0]]
    """
    too_long = [i for i, n in enumerate(lengths) if n > pack_len]
    if too_long:
        i = too_long[0]
        raise ValueError(f"sample {i} has {lengths[i]} tokens, more than the pack length {pack_len} "
                         f"({len(too_long)} sample(s) longer): packed rows hold whole samples")
    rows: List[List[int]] = []
    room: List[tuple] = []  # (free tokens, row) of the rows not full, in increasing order
    for i in sorted((i for i, n in enumerate(lengths) if n), key=lambda i: (-lengths[i], i)):
        k = bisect.bisect_left(room, (lengths[i], -1))  # the first row with room >= lengths[i]
        if k == len(room):
            rows.append([])
            free, r = pack_len, len(rows) - 1
        else:
            free, r = room.pop(k)
        rows[r].append(i)
        if free > lengths[i]:
            bisect.insort(room, (free - lengths[i], r))
    return rows
