"""Qwen3 for torchtune 0.6.1, which ships Qwen2 and Qwen2.5 but not Qwen3.

Qwen3 differs from Qwen2.5 in four ways that matter here:

- ``head_dim`` is set explicitly and need not equal ``embed_dim // num_heads``
  (Qwen3-0.6B: 16 heads x 128 = 2048 while ``embed_dim`` is 1024);
- q/k/v projections have no bias;
- each query and key head is RMS-normalised over ``head_dim`` BEFORE the rotary embedding.
  torchtune 0.6.1's ``MultiHeadAttention`` applies its ``q_norm``/``k_norm`` AFTER the rotary
  embedding, so we cannot use those slots. Instead the norm rides on the projection
  (:class:`HeadNormLinear`): ``MultiHeadAttention`` calls ``q_proj`` first and rotates after,
  which is exactly Qwen3's order, and KV-caching, FSDP and activation checkpointing see an
  ordinary ``MultiHeadAttention``;
- the small models tie the input embedding and the output projection.

Rotary embeddings use the "rotate half" layout of the Hugging Face checkpoints
(``Qwen2RotaryPositionalEmbeddings``), so no q/k weight permutation is needed when converting.
"""

from typing import Optional

import torch
from torch import nn
from torchtune.models.qwen2._positional_embeddings import (
    Qwen2RotaryPositionalEmbeddings,
)
from torchtune.modules import (
    FeedForward,
    MultiHeadAttention,
    RMSNorm,
    TiedLinear,
    TransformerDecoder,
    TransformerSelfAttentionLayer,
)


class HeadNormLinear(nn.Module):
    """A bias-free linear projection followed by an RMSNorm over each head.

    This is Qwen3's ``q_proj`` + ``q_norm`` (and ``k_proj`` + ``k_norm``) as one module, so that the
    norm runs before ``MultiHeadAttention`` applies the rotary embedding.

    Args:
        in_dim (int): input features.
        num_heads (int): heads in the output.
        head_dim (int): features per head; the norm runs over this axis.
        norm_eps (float): epsilon of the RMSNorm.

    Shapes:
        ``[..., in_dim] -> [..., num_heads * head_dim]``

    Example:
        >>> proj = HeadNormLinear(in_dim=8, num_heads=2, head_dim=4, norm_eps=1e-6)
        >>> proj(torch.randn(3, 5, 8)).shape
        torch.Size([3, 5, 8])
    """

    def __init__(self, in_dim: int, num_heads: int, head_dim: int, norm_eps: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.proj = nn.Linear(in_dim, num_heads * head_dim, bias=False)
        self.norm = RMSNorm(head_dim, eps=norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = self.proj(x).unflatten(-1, (-1, self.head_dim))
        return self.norm(heads).flatten(-2)


def qwen3(
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: Optional[int] = None,
    attn_dropout: float = 0.0,
    norm_eps: float = 1e-6,
    rope_base: float = 1_000_000.0,
    tie_word_embeddings: bool = False,
) -> TransformerDecoder:
    """Build a Qwen3 decoder from its hyper-parameters.

    Args:
        vocab_size (int): rows of the token embedding.
        num_layers (int): transformer blocks.
        num_heads (int): query heads.
        num_kv_heads (int): key/value heads (GQA when fewer than ``num_heads``).
        embed_dim (int): width of the residual stream (``hidden_size`` in Hugging Face).
        intermediate_dim (int): width of the SwiGLU MLP.
        max_seq_len (int): longest sequence, sizes the rotary cache and any KV cache.
        head_dim (Optional[int]): features per head; ``embed_dim // num_heads`` if None.
        attn_dropout (float): dropout inside attention. Default 0.0.
        norm_eps (float): epsilon of every RMSNorm. Default 1e-6.
        rope_base (float): rotary base period. Default 1e6.
        tie_word_embeddings (bool): reuse the token embedding as the output projection.

    Returns:
        TransformerDecoder: the model, in torchtune's module layout.

    Example:
        >>> model = qwen3(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
        ...               embed_dim=16, intermediate_dim=32, max_seq_len=32, head_dim=12)
        >>> model(torch.randint(0, 64, (2, 5))).shape
        torch.Size([2, 5, 64])
    """
    head_dim = head_dim or embed_dim // num_heads
    rope = Qwen2RotaryPositionalEmbeddings(dim=head_dim, max_seq_len=max_seq_len, base=rope_base)
    layers = nn.ModuleList()
    for _ in range(num_layers):
        attn = MultiHeadAttention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            q_proj=HeadNormLinear(embed_dim, num_heads, head_dim, norm_eps),
            k_proj=HeadNormLinear(embed_dim, num_kv_heads, head_dim, norm_eps),
            v_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
            output_proj=nn.Linear(num_heads * head_dim, embed_dim, bias=False),
            pos_embeddings=rope,
            max_seq_len=max_seq_len,
            attn_dropout=attn_dropout,
        )
        mlp = FeedForward(
            gate_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
            down_proj=nn.Linear(intermediate_dim, embed_dim, bias=False),
            up_proj=nn.Linear(embed_dim, intermediate_dim, bias=False),
        )
        layers.append(
            TransformerSelfAttentionLayer(
                attn=attn,
                mlp=mlp,
                sa_norm=RMSNorm(embed_dim, eps=norm_eps),
                mlp_norm=RMSNorm(embed_dim, eps=norm_eps),
            )
        )
    tok_embeddings = nn.Embedding(vocab_size, embed_dim)
    if tie_word_embeddings:
        output = TiedLinear(tok_embeddings)
    else:
        output = nn.Linear(embed_dim, vocab_size, bias=False)
    return TransformerDecoder(
        tok_embeddings=tok_embeddings,
        layers=layers,
        max_seq_len=max_seq_len,
        num_heads=num_heads,
        head_dim=head_dim,
        norm=RMSNorm(embed_dim, eps=norm_eps),
        output=output,
    )
