"""The fused linear + cross-entropy loss against the unfused one, and activation checkpointing
of a share of the layers.

Tolerances: in fp32 the fused loss does the same arithmetic as the unfused one, the logits of
each chunk by the same matmul; what differs is the order of summation (the loss and the
weight's gradient summed chunk by chunk, the logsumexp by another kernel). fp32 rounding is
6e-8 relative per operation and these sums have at most a few thousand terms, so 1e-5 relative
on the loss and 1e-4 relative (with an absolute floor of 1e-6, for gradients near zero) on
every gradient leave a margin of more than 10x while catching any real mistake - a missed
token, a wrong sign or a gradient off by a chunk are off by far more than 1e-3. In float64
``gradcheck`` compares the backward with finite differences outright.
"""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torchtune.models.llama3_1 import llama3_1
from torchtune.modules.loss import CEWithChunkedOutputLoss

from entrodrop.data.packing import block_causal_mask
from entrodrop.method.dropout import EmbeddingHook, mean_embedding, perturb_embeddings
from entrodrop.models.head import hidden_states, output_weight
from entrodrop.models.loss import (
    EVALUATION_OUTPUT_CHUNKS,
    LinearCrossEntropy,
    linear_cross_entropy,
    linear_cross_entropy_and_token_losses,
    model_output_for,
)
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.train.activations import checkpoint_layers, num_checkpointed_layers

LOSS_RTOL, GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-4, 1e-6


def inputs(n=37, d=16, vocab=50, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, d, generator=gen) * 0.5).to(dtype).requires_grad_()
    labels = torch.randint(0, vocab, (n,), generator=gen)
    labels[torch.rand(n, generator=gen) < 0.3] = -100
    return hidden, weight, labels


def unfused(hidden, weight, labels, reduction="sum"):
    return F.cross_entropy(F.linear(hidden, weight).float(), labels, ignore_index=-100, reduction=reduction)


def grads(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("chunk_size", [1, 5, 36, 37, 4096])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_loss_and_gradients_equal_the_unfused_path(chunk_size, reduction):
    hidden, weight, labels = inputs()
    expected = unfused(hidden, weight, labels, reduction)
    loss = linear_cross_entropy(hidden, weight, labels, chunk_size, reduction=reduction)
    torch.testing.assert_close(loss, expected, rtol=LOSS_RTOL, atol=0)
    got, want = grads(loss, hidden, weight), grads(expected, hidden, weight)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=GRAD_RTOL, atol=GRAD_ATOL)
    assert got[0][labels == -100].abs().max() == 0, "an ignored token got a gradient"


def test_backward_against_finite_differences():
    hidden, weight, labels = inputs(n=9, d=4, vocab=7, seed=1, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda h, w: linear_cross_entropy(h, w, labels, chunk_size=4), (hidden, weight))


def test_bf16_matches_the_unfused_bf16_path():
    # Both project in bf16 and upcast the logits, so the loss agrees to fp32 summation order;
    # the gradients are rounded to bf16 (8 bits of mantissa): 2e-2 of their largest entry.
    hidden, weight, labels = inputs(n=64, d=32, vocab=300, seed=2, dtype=torch.bfloat16)
    expected = unfused(hidden, weight, labels, "mean")
    loss = linear_cross_entropy(hidden, weight, labels, chunk_size=16, reduction="mean")
    torch.testing.assert_close(loss, expected, rtol=1e-3, atol=0)
    for got, want in zip(grads(loss, hidden, weight), grads(expected, hidden, weight)):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=2e-2 * want.float().abs().max().item())


def test_token_losses_are_the_per_token_cross_entropy():
    hidden, weight, labels = inputs()
    expected = unfused(hidden, weight, labels, "none")
    _, losses = linear_cross_entropy_and_token_losses(hidden, weight, labels, chunk_size=8)
    torch.testing.assert_close(losses, expected, rtol=LOSS_RTOL, atol=1e-6)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match=r"chunk_size=0 must be a positive integer.*impl='cuda' must be one of torch, liger"
                                         r".*reduction='none' must be one of mean, sum"):
        LinearCrossEntropy(chunk_size=0, impl="cuda", reduction="none")
    with pytest.raises(ValueError, match="do not fit"):
        linear_cross_entropy(torch.zeros(4, 3), torch.zeros(10, 5), torch.zeros(4, dtype=torch.long))
    with pytest.raises(RuntimeError, match="call set_model_output"):
        LinearCrossEntropy()(torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="not supported by the recipes"):
        model_output_for(tiny_qwen3(), torch.nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match="reduction='sum': the recipes take the mean"):
        model_output_for(tiny_qwen3(), LinearCrossEntropy(reduction="sum"))


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed")
def test_liger_without_liger_kernel_says_how_to_install_it():
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        LinearCrossEntropy(impl="liger")


def tiny_qwen3(num_layers=2):
    torch.manual_seed(0)
    return qwen3(vocab_size=300, num_layers=num_layers, num_heads=4, num_kv_heads=2, embed_dim=32, intermediate_dim=64,
                 max_seq_len=64, head_dim=8, tie_word_embeddings=True)


def tiny_llama(num_layers=2):
    torch.manual_seed(0)
    return llama3_1(vocab_size=300, num_layers=num_layers, num_heads=4, num_kv_heads=2, embed_dim=32,
                    intermediate_dim=64, max_seq_len=64)


def packed_batch(seed=3):
    """Two packed rows of 24 tokens: documents of different lengths, padding labelled -100."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 300, (2, 24), generator=gen)
    document_ids = torch.tensor([[0] * 10 + [1] * 14, [0] * 19 + [-1] * 5])
    input_pos = torch.cat([torch.arange(10), torch.arange(14), torch.arange(19), torch.zeros(5, dtype=torch.long)]).view(2, 24)
    labels = torch.randint(0, 300, (2, 24), generator=gen)
    labels[1, 19:] = labels[0, 9] = -100
    drop = torch.rand(2, 24, generator=gen) < 0.3
    return tokens, labels, block_causal_mask(document_ids), input_pos, drop


def loss_and_grads(model, loss_fn, drop):
    """The recipes' step on one batch: the model's output (through ``model_output_for``) or, with
    ``loss_fn=None``, full logits and F.cross_entropy; EntroDrop's embedding hook is set."""
    tokens, labels, mask, input_pos, _ = packed_batch()
    hook = EmbeddingHook(model.tok_embeddings)
    hook.set(lambda x: perturb_embeddings(x, drop, mean_embedding(model.tok_embeddings.weight), None))
    if loss_fn is None:
        logits = model(tokens, mask=mask, input_pos=input_pos)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    else:
        loss = loss_fn(model_output_for(model, loss_fn)(tokens, mask=mask, input_pos=input_pos), labels)
    loss.backward()
    hook.set(None)
    # named_parameters shows the checkpoint wrapper's prefix (state_dict hides it)
    return loss.detach(), {name.replace("._checkpoint_wrapped_module", ""): p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("build", [tiny_qwen3, tiny_llama], ids=["qwen3-tied", "llama3.1-untied"])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_the_fused_loss_trains_the_tiny_models_like_full_logits(build, share):
    drop = packed_batch()[-1]
    expected, expected_grads = loss_and_grads(build(), None, drop)
    for loss_fn in (LinearCrossEntropy(chunk_size=7), CEWithChunkedOutputLoss(num_output_chunks=4)):
        model = build()
        assert checkpoint_layers(model, share) == round(share * 2)
        loss, got = loss_and_grads(model, loss_fn, drop)
        torch.testing.assert_close(loss, expected, rtol=LOSS_RTOL, atol=0)
        assert got.keys() == expected_grads.keys()
        for name in got:
            torch.testing.assert_close(got[name], expected_grads[name], rtol=GRAD_RTOL, atol=GRAD_ATOL, msg=name)
    unperturbed, _ = loss_and_grads(build(), None, torch.zeros_like(drop))
    assert not torch.allclose(unperturbed, expected), "the embedding hook did not reach the loss"


def test_hidden_states_leave_the_model_as_it_was():
    model = tiny_qwen3()
    tokens = packed_batch()[0]
    logits = model(tokens)
    h = hidden_states(model, tokens)
    assert h.shape == (2, 24, 32) and "unembed" not in vars(model)
    torch.testing.assert_close(model.output(h), logits, rtol=0, atol=0)
    with pytest.raises(ValueError):
        hidden_states(model, torch.zeros(1, 65, dtype=torch.long))  # longer than max_seq_len
    assert "unembed" not in vars(model) and torch.equal(model(tokens), logits)
    assert list(model.state_dict()) == list(tiny_qwen3().state_dict())
    assert output_weight(model) is model.tok_embeddings.weight
    assert output_weight(tiny_llama()).shape == (300, 32)


def test_evaluation_reads_bf16_sized_logit_chunks_with_the_fused_loss():
    model = tiny_qwen3()
    model_output_for(model, LinearCrossEntropy())
    chunks = model(packed_batch()[0])
    assert isinstance(chunks, list) and len(chunks) == EVALUATION_OUTPUT_CHUNKS


def test_the_bottom_share_of_layers_is_checkpointed():
    assert [num_checkpointed_layers(28, s) for s in (0.0, 0.1, 0.5, 0.99, 1.0)] == [0, 3, 14, 28, 28]
    model = tiny_qwen3(num_layers=4)
    names = list(model.state_dict())
    assert checkpoint_layers(model, 0.5) == 2
    wrapped = [type(layer).__name__ == "CheckpointWrapper" for layer in model.layers]
    assert wrapped == [True, True, False, False]
    assert list(model.state_dict()) == names
    with pytest.raises(ValueError, match=r"activation_checkpointing_share=1.5 must be in \[0, 1\]"):
        num_checkpointed_layers(4, 1.5)
