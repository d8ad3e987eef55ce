"""Token entropy: equal to a full-softmax computation and to transformers' logits, and
independent of chunk size, batch size, padding and packing."""

import math

import pytest
import torch
from torchtune.models.llama3_1 import llama3_1

from entrodrop.checkpointing import HFCheckpointer
from entrodrop.corpus import tokenize_corpus
from entrodrop.entropy import entropy_from_hidden, output_weight, pack_samples, sample_entropies, shard_entropies
from entrodrop.models.qwen3 import qwen3, qwen3_tokenizer


def full_softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.double(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def test_matches_full_softmax_on_peaked_and_flat_rows_whatever_the_chunks():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(6, 16, generator=gen) * torch.tensor([0.001, 0.1, 1, 3, 10, 40]).unsqueeze(1)
    weight = torch.randn(1000, 16, generator=gen)
    expected = full_softmax_entropy(hidden @ weight.T)
    assert expected[0] == pytest.approx(math.log(1000), abs=1e-2) and expected[-1] < 0.5
    # Chunks that divide the sizes and chunks that leave a remainder; one vocab block or many,
    # the largest logit early or late in the vocabulary.
    for chunk, vocab_chunk in [(1, 1000), (4, 7), (6, 256), (64, 333), (5, 1)]:
        got = entropy_from_hidden(hidden, weight, chunk, vocab_chunk)
        torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=0)
    flipped = entropy_from_hidden(hidden, weight.flip(0), 4, 100)
    torch.testing.assert_close(flipped.double(), expected, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def tiny(tiny_assets, make_tiny_assets, tmp_path_factory):
    d = tiny_assets / "qwen3"
    tokenizer = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))
    samples = tokenize_corpus(tokenizer, str(tiny_assets / "target.jsonl"), "text", max_seq_len=96)[:12]
    models = {}
    for name, build, args, model_type in [
        ("qwen3", qwen3, make_tiny_assets.TINY_QWEN3, "QWEN3"),
        ("llama3_1", llama3_1, make_tiny_assets.TINY_LLAMA3_1, "LLAMA3"),
    ]:
        model = build(**args).eval()
        out = tmp_path_factory.mktemp(name)
        model.load_state_dict(HFCheckpointer(str(tiny_assets / name), model_type, str(out)).load_checkpoint()["model"])
        models[name] = model
    return [torch.tensor(s) for s in samples], models


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])  # tied and untied output projection
def test_sample_entropies_match_the_models_own_logits(tiny, name):
    samples, models = tiny
    model = models[name]
    got = sample_entropies(model, samples, chunk_size=7, vocab_chunk_size=500)
    assert len({len(s) for s in samples}) > 1, "samples of one length would not exercise padding"
    for ids, h in zip(samples, got):
        assert h.shape == ids.shape and torch.isnan(h[0]) and not torch.isnan(h[1:]).any()
        with torch.no_grad():
            expected = full_softmax_entropy(model(ids.unsqueeze(0))[0, :-1])
        torch.testing.assert_close(h[1:].double(), expected, atol=1e-4, rtol=0)


def test_sample_entropies_match_transformers(tiny, tiny_assets):
    transformers = pytest.importorskip("transformers")
    samples, models = tiny
    reference = transformers.Qwen3ForCausalLM.from_pretrained(tiny_assets / "qwen3").eval()
    got = sample_entropies(models["qwen3"], samples, chunk_size=64, vocab_chunk_size=2048)
    for ids, h in zip(samples, got):
        with torch.no_grad():
            expected = full_softmax_entropy(reference(ids.unsqueeze(0)).logits[0, :-1])
        torch.testing.assert_close(h[1:].double(), expected, atol=1e-4, rtol=0)


def test_batch_size_and_chunk_size_do_not_change_the_result(tiny):
    samples, models = tiny
    model = models["qwen3"]
    one_batch = sample_entropies(model, samples, chunk_size=1000, vocab_chunk_size=10_000)
    one_by_one = [sample_entropies(model, [s], chunk_size=3, vocab_chunk_size=100)[0] for s in samples]
    for a, b in zip(one_batch, one_by_one):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0, equal_nan=True)


def test_output_weight_is_the_embedding_when_tied(tiny):
    _, models = tiny
    assert output_weight(models["qwen3"]) is models["qwen3"].tok_embeddings.weight
    assert output_weight(models["llama3_1"]) is models["llama3_1"].output.weight


def test_a_sample_of_one_token_has_only_nan(tiny):
    _, models = tiny
    (h,) = sample_entropies(models["qwen3"], [torch.tensor([5])], chunk_size=4, vocab_chunk_size=64)
    assert h.shape == (1,) and torch.isnan(h).all()


def test_pack_samples_places_every_sample_once_within_the_pack_length():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 100, (300,), generator=gen).tolist() + [0, 100, 1]
    rows = pack_samples(lengths, pack_len=100)
    placed = [i for row in rows for i in row]
    assert sorted(placed) == [i for i, n in enumerate(lengths) if n]  # each non-empty sample once
    assert all(sum(lengths[i] for i in row) <= 100 for row in rows)
    assert [lengths[i] for i in rows[0]] == [100]  # a sample of exactly the pack length fills a row
    # Best fit decreasing fills these rows to 95% (in the order given, a new row whenever a
    # sample does not fit the current one would fill 74%).
    assert sum(lengths) / (100 * len(rows)) > 0.95
    assert pack_samples(lengths, pack_len=100) == rows  # a function of the lengths alone


def test_pack_samples_refuses_a_sample_longer_than_the_pack_length():
    with pytest.raises(ValueError, match=r"sample 2 has 9 tokens, more than the pack length 8 \(2 sample"):
        pack_samples([8, 3, 9, 0, 12], pack_len=8)


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])
def test_packed_and_unpacked_entropies_agree(tiny, name):
    """fp32 on CPU: the packed layout (block-causal mask, per-document positions) gives each
    sample the entropies it has batched by length, within 1e-4 nats, and the same NaNs."""
    samples, models = tiny
    model = models[name]
    samples = [s.tolist() for s in samples] + [[], [7], samples[0][:2].tolist()]  # lists, as a shard gives
    pack_len = max(len(s) for s in samples)  # one sample exactly fills a row
    assert len({len(s) for s in samples}) > 3 and sum(map(len, samples)) > 3 * pack_len
    by_length = shard_entropies(model, samples, 4, 7, 500, pack_len=None)
    # 3 rows a batch: rows from several batches, the last one filled with empty rows.
    packed = shard_entropies(model, samples, 3, 7, 500, pack_len=pack_len)
    assert [len(h) for h in packed] == [len(h) for h in by_length] == [len(s) for s in samples]
    assert packed[-3].shape == (0,) and torch.isnan(packed[-2]).all()
    for a, b in zip(packed, by_length):
        if len(a):
            assert torch.isnan(a[0]) and not torch.isnan(a[1:]).any()
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0, equal_nan=True)


def test_packed_rows_may_be_longer_than_the_models_rotary_cache(tiny, make_tiny_assets):
    samples, models = tiny
    pack_len = make_tiny_assets.TINY_QWEN3["max_seq_len"] + 100  # padding positions restart at 0
    samples = [s.tolist() for s in samples[:3]]
    by_length = shard_entropies(models["qwen3"], samples, 3, 64, 2048, pack_len=None)
    packed = shard_entropies(models["qwen3"], samples, 2, 64, 2048, pack_len=pack_len)
    for a, b in zip(packed, by_length):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0, equal_nan=True)


def test_packed_shard_refuses_a_sample_longer_than_the_rows(tiny):
    samples, models = tiny
    longest = max(len(s) for s in samples)
    with pytest.raises(ValueError, match=f"has {longest} tokens, more than the pack length {longest - 1}"):
        shard_entropies(models["qwen3"], [s.tolist() for s in samples], 2, 64, 2048, pack_len=longest - 1)
