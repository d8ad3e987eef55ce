"""Contextual token entropy under a base model, without a [batch, seq, vocab] tensor.

H(x_t) = -sum_v p(v | x_<t) log p(v | x_<t) is the entropy of the distribution the model
predicts *for* token t, read off the hidden state at position t - 1. The first token of a
sample has no context and no entropy: it is NaN, and NaN is never gated for dropout.
"""

from typing import Callable, List

import torch
from torchtune.modules import TiedLinear, TransformerDecoder


def output_weight(model: TransformerDecoder) -> torch.Tensor:
    """The ``[vocab, dim]`` matrix of the output projection; the token embedding if tied."""
    if isinstance(model.output, TiedLinear):
        return model.output.tied_module.weight
    return model.output.weight


def final_hidden_states(model: TransformerDecoder, tokens: torch.Tensor) -> torch.Tensor:
    """``[b, s] -> [b, s, dim]``: the normed last hidden states, before the output projection.

    ``TransformerDecoder.forward`` would project every position to the full vocabulary at
    once, so we run its parts and stop before the output layer. Right padding needs no
    mask: attention is causal, so padding never reaches the positions before it.
    """
    h = model.tok_embeddings(tokens)
    for layer in model.layers:
        h = layer(h)
    return model.norm(h)


def logits_entropy(z: torch.Tensor) -> torch.Tensor:
    """``[n, vocab]`` fp32 logits -> ``[n]`` entropies in nats, in logsumexp form.

    H = m + log s - t / s with m = max_v z_v, s = sum_v exp(z_v - m) and
    t = sum_v exp(z_v - m) z_v. Eagerly it holds one more ``[n, vocab]`` tensor besides ``z``;
    under ``torch.compile`` the four reductions fuse and it holds none.

    Example:
        >>> logits_entropy(torch.zeros(2, 4))  # uniform over 4 tokens: log 4
        tensor([1.3863, 1.3863])
    """
    m = z.amax(dim=-1, keepdim=True)
    e = (z - m).exp_()
    s = e.sum(dim=-1)
    t = e.mul_(z).sum(dim=-1)
    return m.squeeze(-1) + s.log() - t / s


EntropyFn = Callable[[torch.Tensor], torch.Tensor]


def entropy_from_hidden(
    hidden: torch.Tensor, weight: torch.Tensor, chunk_size: int, entropy_fn: EntropyFn = logits_entropy
) -> torch.Tensor:
    """Entropy of ``softmax(hidden @ weight.T)`` for each row, ``chunk_size`` rows at a time.

    Each chunk's logits are cast to fp32, reduced to entropies and dropped, so nothing of
    size ``[rows, vocab]`` ever exists.

    Args:
        hidden (torch.Tensor): ``[n, dim]`` final hidden states.
        weight (torch.Tensor): ``[vocab, dim]`` output projection.
        chunk_size (int): rows per chunk.
        entropy_fn (EntropyFn): ``logits_entropy`` or a compiled copy of it.

    Returns:
        torch.Tensor: ``[n]`` fp32 entropies in nats.

    Example:
        >>> w = torch.zeros(5, 3)  # every logit equal: uniform over 5 tokens
        >>> entropy_from_hidden(torch.randn(2, 3), w, chunk_size=1)
        tensor([1.6094, 1.6094])
    """
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk_size):
        logits = (hidden[start : start + chunk_size] @ weight.T).float()
        out[start : start + chunk_size] = entropy_fn(logits)
    return out


@torch.no_grad()
def sample_entropies(
    model: TransformerDecoder,
    samples: List[torch.Tensor],
    chunk_size: int,
    entropy_fn: EntropyFn = logits_entropy,
) -> List[torch.Tensor]:
    """Entropy of every token of each sample: ``[L_i]`` fp32, NaN at position 0.

    The samples are right-padded into one batch; only real positions reach the output
    projection.

    Args:
        model (TransformerDecoder): the base model, in eval mode.
        samples (List[torch.Tensor]): 1-D token ids, each of length >= 1.
        chunk_size (int): tokens per output-projection chunk.
        entropy_fn (EntropyFn): ``logits_entropy`` or a compiled copy of it.
    """
    device = output_weight(model).device
    lengths = torch.tensor([len(s) for s in samples])
    # Pad with token 0: causal attention keeps padding out of every real position.
    tokens = torch.zeros((len(samples), int(lengths.max())), dtype=torch.long)
    for i, s in enumerate(samples):
        tokens[i, : len(s)] = s
    hidden = final_hidden_states(model, tokens.to(device))
    # Position t - 1 predicts token t: keep positions 0 .. L_i - 2 of each sample.
    predicts = torch.arange(tokens.shape[1]) < (lengths - 1).unsqueeze(1)
    flat = entropy_from_hidden(hidden[predicts.to(device)], output_weight(model), chunk_size, entropy_fn).cpu()
    result, offset = [], 0
    for length in lengths.tolist():
        first = torch.full((1,), float("nan"))
        result.append(torch.cat([first, flat[offset : offset + length - 1]]))
        offset += length - 1
    return result
