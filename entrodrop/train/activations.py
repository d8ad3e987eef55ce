"""Activation checkpointing of a share of the decoder's layers.

A checkpointed layer keeps only its input through the forward and recomputes the rest in
backward: about a third more compute for that layer, and its activations no longer count
towards peak memory. Checkpointing every layer is the most memory one can save this way;
checkpointing only some trades the two, so a larger micro-batch (or none of the recompute)
may fit. The peak comes at the start of backward, when every layer's stored activations are
held: the share checkpointed sets it, hardly which layers they are.
"""

import math

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    apply_activation_checkpointing,
)


def num_checkpointed_layers(num_layers: int, share: float) -> int:
    """ceil(share * num_layers), share * num_layers rounded to 1e-6 first: the fewest layers that
    make at least that share.

    Example:
        >>> [num_checkpointed_layers(28, s) for s in (0.0, 0.25, 0.5, 1.0)]
        [0, 7, 14, 28]
        >>> num_checkpointed_layers(28, 0.3)  # 8.4 layers: 9
        9
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"activation_checkpointing_share={share} must be in [0, 1]: the share of layers checkpointed")
    return math.ceil(round(share * num_layers, 6))


def checkpoint_layers(model: nn.Module, share: float) -> int:
    """Wrap the bottom ``num_checkpointed_layers`` of ``model.layers`` in activation
    checkpointing (torch's non-reentrant ``checkpoint_wrapper``, as torchtune's
    ``set_activation_checkpointing`` does for all of them); returns how many.

    State-dict keys are unchanged: the wrapper hides its own prefix.
    """
    count = num_checkpointed_layers(len(model.layers), share)
    chosen = {id(layer) for layer in list(model.layers)[:count]}
    if chosen:
        apply_activation_checkpointing(model, check_fn=lambda module: id(module) in chosen)
    return count
