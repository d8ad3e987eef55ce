"""The language-model head: the output projection's weight, the decoder's hidden states without
the projection, and logits accumulated in fp32. The entropy precompute and the fused loss both
read the model through these, so they see the same hidden states.
"""

from typing import Optional

import torch
from torch import nn
from torchtune.modules import TiedLinear, TransformerDecoder
from torchtune.modules.attention_utils import _MaskType


def output_weight(model: TransformerDecoder) -> torch.Tensor:
    """The ``[vocab, d]`` weight of the decoder's output projection: its own, or the token
    embedding's when tied. Read at each call: FSDP2 swaps the parameter objects."""
    weight = projection_weight(model)
    if hasattr(weight, "full_tensor"):  # a DTensor: FSDP2 has resharded it after the forward
        raise RuntimeError("the output weight is sharded after the forward: the fused loss reads it after the model "
                           "returns, so shard the root module with reshard_after_forward=False "
                           "(model.set_reshard_after_forward(False, recurse=False) after fully_shard)")
    return weight


def projection_weight(model: TransformerDecoder) -> torch.Tensor:
    """The output projection's ``[vocab, d]`` weight as the model holds it (under FSDP2 a sharded
    DTensor; ``output_weight`` is the check for reading it after a forward). Raises
    ``ValueError`` for a projection the fused loss and the entropy precompute cannot read
    (anything but ``TiedLinear`` or a bias-free ``nn.Linear``). ``LinearCrossEntropy`` calls it
    at set-up, so such a model fails before the first step."""
    output = model.output
    if isinstance(output, TiedLinear):
        weight = output.tied_module.weight
    elif isinstance(output, nn.Linear) and output.bias is None:
        weight = output.weight
    else:
        raise ValueError(f"the fused loss and the entropy precompute need a bias-free linear output "
                         f"projection, not {output!r}")
    return weight


def hidden_states(model: TransformerDecoder, tokens: torch.Tensor, *, mask=None,
                  input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[b, s, d]``: the decoder's forward up to and including its final norm, without the
    output projection.

    torchtune 0.6.1's ``TransformerDecoder`` has no switch to skip the projection (0.7's
    ``skip_output_layer``): its forward ends in ``self.unembed(h)``, the norm then the
    projection. For this one call the instance's ``unembed`` is the norm alone; the class and
    its other users (evaluation, generation) are untouched. Running the real forward keeps
    FSDP2's root hooks, the embedding hook and activation checkpointing as they are.

    Example:
        >>> from entrodrop.models.qwen3 import qwen3
        >>> model = qwen3(vocab_size=32, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=8,
        ...               intermediate_dim=16, max_seq_len=16, tie_word_embeddings=True)
        >>> tokens = torch.randint(0, 32, (2, 5))
        >>> h = hidden_states(model, tokens)
        >>> h.shape, torch.allclose(model.output(h), model(tokens))
        (torch.Size([2, 5, 8]), True)
    """
    model.unembed = model.norm.__call__  # a bound method, not a module: nothing is registered
    try:
        out = model(tokens, mask=mask, input_pos=input_pos)
    finally:
        del model.unembed
    if isinstance(out, list):
        raise ValueError("hidden_states: the model returns intermediate hidden states too (output_hidden_states); "
                         "the recipes' models do not")
    return out


def fp32_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``[n, dim] @ [vocab, dim].T`` in fp32, whatever the inputs' dtype: accumulated in fp32 and
    never rounded to bf16 on the way.

    ``(h @ w.T).float()`` rounds each bf16 logit to 8 bits of mantissa before the upcast: a
    logit of 20 moves by up to 0.06, and on an LM's peaked predictions the entropy by up to
    0.08 nats. On CUDA the matmul writes its fp32 accumulator as it is (``out_dtype``); on the
    CPU, which has no such kernel, the operands are upcast first.

    Example:
        >>> h, w = torch.randn(2, 8).bfloat16(), torch.randn(5, 8).bfloat16()
        >>> fp32_logits(h, w).dtype
        torch.float32
        >>> torch.allclose(fp32_logits(h, w), h.float() @ w.float().T)
        True
    """
    if hidden.dtype == torch.float32 or hidden.dtype == torch.float64:
        return (hidden @ weight.T).float()
    if hidden.is_cuda:
        return torch.mm(hidden, weight.T, out_dtype=torch.float32)
    return hidden.float() @ weight.float().T


def layerwise_hidden_states(model: TransformerDecoder, tokens: torch.Tensor, mask: Optional[_MaskType] = None,
                            input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[b, s] -> [b, s, dim]``: ``hidden_states`` for a plain (unsharded) model, its parts
    called one by one: embedding, layers, norm.

    The entropy precompute uses it because ``TransformerDecoder.forward`` refuses rows longer
    than ``max_seq_len``, and packed rows may be longer (each sample keeps its own positions,
    so none passes the rotary cache). A sharded model needs ``hidden_states``: FSDP2's root
    hooks run only in the real forward. Right padding needs no mask: attention is causal.
    """
    h = model.tok_embeddings(tokens)
    for layer in model.layers:
        h = layer(h, mask=mask, input_pos=input_pos)
    return model.norm(h)
