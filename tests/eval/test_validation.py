"""The held-out loss by entropy bucket (entrodrop.eval.validation) on constructed examples: buckets as
exact shares, losses from whole or chunked logits, one rank or two."""

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from entrodrop.data.packing import IGNORE_INDEX
from entrodrop.eval.evaluator import Evaluator
from entrodrop.eval.validation import (
    HIGH,
    LOW,
    bucket_loss_sums,
    entropy_buckets,
    validation_batches,
    validation_losses,
)


class FixedLogits(torch.nn.Module):
    """A stand-in model whose logits give each position a chosen loss."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, tokens, mask=None, input_pos=None):
        return self.logits


def test_bucket_losses_on_a_constructed_example():
    # One row: a document of 6 tokens, then padding. Position t predicts token t + 1 with loss
    # losses[t]; the entropies are those of the input tokens.
    vocab, losses = 4, torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5])
    labels = torch.tensor([[1, 2, 3, 0, 1, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]])
    logits = torch.zeros(1, 8, vocab)
    for t, loss in enumerate(losses):
        # log softmax at the label = -loss: put mass p = exp(-loss) there, spread the rest
        p = math.exp(-loss)
        logits[0, t] = math.log((1 - p) / (vocab - 1))
        logits[0, t, labels[0, t]] = math.log(p)
    # The input tokens' bucket flags (entropy_buckets): tokens 1 and 3 are low, 2 and 4 high,
    # token 5 neither; token 0 and the padding have no entropy.
    bucket = torch.tensor([[0, LOW, HIGH, LOW, HIGH, 0, 0, 0]], dtype=torch.uint8)
    batch = {"tokens": torch.zeros(1, 8, dtype=torch.long), "labels": labels, "bucket": bucket,
             "document_ids": torch.tensor([[0] * 6 + [-1] * 2]), "input_pos": torch.arange(8).unsqueeze(0)}
    sums = bucket_loss_sums(FixedLogits(logits), batch, device=torch.device("cpu"))
    # Position t predicts token t + 1: low are positions 0 and 2, high positions 1 and 3.
    expected = [losses.sum(), 5, losses[[0, 2]].sum(), 2, losses[[1, 3]].sum(), 2]
    torch.testing.assert_close(sums.float(), torch.tensor(expected, dtype=torch.float32), atol=1e-5, rtol=0)


def test_bucket_losses_are_the_same_from_chunks_of_logits():
    # Two rows, logits in 4 chunks along the sequence (torchtune's chunked output): each loss
    # must meet its own token's label and entropy, as with the whole logits.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 8, 5, generator=gen)
    labels = torch.randint(0, 5, (2, 8), generator=gen)
    labels[1, 6:] = IGNORE_INDEX
    bucket = torch.randint(0, 4, (2, 8), generator=gen, dtype=torch.uint8)  # some tokens in both buckets
    bucket[:, 0] = 0
    batch = {"tokens": torch.zeros(2, 8, dtype=torch.long), "labels": labels, "bucket": bucket,
             "document_ids": torch.tensor([[0] * 8, [0] * 6 + [-1] * 2]), "input_pos": torch.arange(8).repeat(2, 1)}
    whole = bucket_loss_sums(FixedLogits(logits), batch, device=torch.device("cpu"))
    chunked = bucket_loss_sums(FixedLogits(list(logits.chunk(4, dim=1))), batch, device=torch.device("cpu"))
    torch.testing.assert_close(chunked, whole)
    assert whole[1] == 14  # every labelled token counted once


def two_valued_validation(root):
    """A held-out token store and its entropy cache whose entropies take two fp16 values, 2 of
    every 9 tokens the higher one, as on the tiny models: the "high 25%" share ends inside the
    lower value's tokens, and the "low 50%" share too. Samples of various lengths, one empty."""
    from entrodrop.data.sample_store import sample_table, write_store

    rng = np.random.default_rng(0)
    lengths = [9, 0, 14, 5, 16, 11, 7, 12, 3, 16]
    samples = [rng.integers(0, 32, n).astype(np.int32) for n in lengths]
    counter = iter(range(sum(lengths)))
    entropies = [np.array([np.nan] + [2.0 if next(counter) % 9 in (2, 7) else 0.5 for _ in range(n - 1)],
                          np.float16) if n else np.zeros(0, np.float16) for n in lengths]
    key = {"model": None, "tokenizer": "tiny", "corpus": "held_out", "max_seq_len": 16}
    tokens = write_store(str(root / "tokens"), "tokens", key, samples, sample_table(samples), 4)
    entropy = write_store(str(root / "entropy"), "entropy", {**key, "model": "m"}, entropies, sample_table(samples), 4)
    return tokens, entropy


def test_open_validation_names_a_cut_entropy_shard_before_any_model_loads(tmp_path):
    """Before, a cut shard file opened and read short at the first evaluation."""
    from entrodrop.errors import MissingFileError
    from entrodrop.eval.validation import open_validation

    _, entropy = two_valued_validation(tmp_path)
    shard = entropy.shard_file(1)
    size = shard.stat().st_size
    os.truncate(shard, size - 2)
    with pytest.raises(MissingFileError) as err:
        open_validation(str(tmp_path / "tokens"), str(tmp_path / "entropy"))
    assert f"\n  {shard}: {size - 2} bytes, written with {size}\nFix: re-run recipes/precompute_entropy.py" in str(err.value)


def hand_buckets(entropy):
    """(low, high): the (sample, position) of each bucket's tokens, by the rule spelled out for
    two values a < b: low is the first floor(N / 2) a-tokens in store order; high every b-token,
    then the last a-tokens in store order up to floor(N / 4)."""
    order = [(i, p) for i in range(len(entropy)) for p in range(len(entropy[i])) if not np.isnan(entropy[i][p])]
    a, b = sorted({float(entropy[i][p]) for i, p in order})
    lower = [t for t in order if entropy[t[0]][t[1]] == a]
    higher = [t for t in order if entropy[t[0]][t[1]] == b]
    n = len(order)
    assert len(lower) > n // 2 and 0 < len(higher) < n // 4  # the ties straddle both shares
    return set(lower[: n // 2]), set(higher + lower[len(lower) - (n // 4 - len(higher)):])


def test_entropy_buckets_are_exact_shares_with_ties_by_position(tmp_path):
    """Two entropy values, as on the tiny models: H >= quantile put every token in the high 25%
    and 78% in the low 50%. The buckets hold exactly floor(N / 2) and floor(N / 4) tokens of one
    order (entropy, then place in the store: sample, then position), the gate's, and never share one."""
    _, entropy = two_valued_validation(tmp_path)
    values = [entropy[i] for i in range(len(entropy))]
    flags = entropy_buckets(values)
    assert [f.shape for f in flags] == [v.shape for v in values] and all(f.dtype == np.uint8 for f in flags)
    low, high = hand_buckets(values)
    assert {(i, p) for i, f in enumerate(flags) for p in np.flatnonzero(f == LOW)} == low
    assert {(i, p) for i, f in enumerate(flags) for p in np.flatnonzero(f == HIGH)} == high
    assert not low & high
    n = sum(int((~np.isnan(v)).sum()) for v in values)
    assert (len(low), len(high)) == (n // 2, n // 4)
    assert all(f[0] == 0 for f in flags if len(f))  # a sample's first token has no entropy, no bucket


class TokenTable(torch.nn.Module):
    """A stand-in model whose logits at a position depend on that input token alone."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, tokens, mask=None, input_pos=None):
        return self.table[tokens]


def test_validation_losses_by_bucket_are_a_hand_computation_on_one_rank_or_two(tmp_path):
    """The Evaluator's all / low / high losses are the mean losses of the tokens each bucket
    holds, computed by hand: on the old thresholds, high equalled all here. Two ranks' rows,
    summed, count every token once: exactly N, floor(N / 2) and floor(N / 4)."""
    from omegaconf import OmegaConf

    tokens, entropy = two_valued_validation(tmp_path)
    table = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    model = TokenTable(table)
    # Position p - 1 predicts token p of its sample.
    logp = F.log_softmax(table, -1)
    loss = {(i, p): -logp[tokens[i][p - 1], tokens[i][p]].item()
            for i in range(len(tokens)) for p in range(1, len(tokens[i]))}
    low, high = hand_buckets([entropy[i] for i in range(len(entropy))])
    expected = {name: sum(loss[t] for t in ts) / len(ts) for name, ts in [("all", loss), ("low", low), ("high", high)]}
    assert expected["high"] != pytest.approx(expected["all"], rel=1e-3)
    cfg = OmegaConf.create({"tasks": {}, "metrics": {}, "limit": None})
    evaluator = Evaluator(model, torch.device("cpu"), (tokens, entropy), 16, 2, None, None, cfg)
    record = evaluator(step=3, target_epoch=1.0, checkpoint="step_3")
    assert record["val_loss"] == pytest.approx(expected, rel=1e-6)
    # beside the losses, the base model's mean entropy of the very tokens each bucket scores
    base = {(i, p): float(entropy[i][p]) for i in range(len(tokens)) for p in range(1, len(tokens[i]))}
    assert record["base_entropy"] == pytest.approx(
        {name: sum(base[t] for t in ts) / len(ts) for name, ts in [("all", base), ("low", low), ("high", high)]}, rel=1e-6)

    flags = entropy_buckets([entropy[i] for i in range(len(entropy))])
    sums = [sum(bucket_loss_sums(model, batch, torch.device("cpu"))
                for batch in validation_batches(tokens, entropy, flags, 16, 2, rank, 2)) for rank in (0, 1)]
    assert all(s[1] > 0 for s in sums)  # both ranks had rows
    totals = sums[0] + sums[1]
    assert totals[1::2].tolist() == [len(loss), len(loss) // 2, len(loss) // 4]
    means = (totals[0::2] / totals[1::2]).tolist()
    assert means == pytest.approx([expected[k] for k in ("all", "low", "high")], rel=1e-6)


def test_batches_cut_after_their_longest_row_give_the_losses_of_the_full_rows(tmp_path):
    """The held-out rows go longest first and each batch ends at its longest row's last token: a
    causal model's losses are those of the rows padded to seq_len, to float rounding, for less work."""
    from entrodrop.models.qwen3 import qwen3

    tokens, entropy = two_valued_validation(tmp_path)
    torch.manual_seed(0)
    model = qwen3(vocab_size=32, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=16, intermediate_dim=32,
                  max_seq_len=64, head_dim=8, norm_eps=1e-6, rope_base=10000.0, tie_word_embeddings=True).eval()
    flags = entropy_buckets([entropy[i] for i in range(len(entropy))])
    batches = list(validation_batches(tokens, entropy, flags, 16, 3))
    widths = [batch["tokens"].shape[1] for batch in batches]
    used = [[int((row != -1).sum()) for row in batch["document_ids"]] for batch in batches]
    assert widths == [max(u) for u in used] and min(widths) < 16  # cut, and the last row reached
    assert sum(map(sum, used)) == sum(int(tokens.table[i]["length"]) for i in range(len(tokens)))
    assert [u for us in used for u in us] == sorted((u for us in used for u in us), reverse=True)

    def padded(batch):  # the same rows padded back to 16 columns, as they were laid out before
        pad = 16 - batch["tokens"].shape[1]
        fill = {"tokens": 0, "labels": IGNORE_INDEX, "document_ids": -1, "bucket": 0, "domain": -1, "sample": -1}
        out = {k: F.pad(v, (0, pad), value=fill[k]) for k, v in batch.items() if k != "input_pos"}
        out["input_pos"] = torch.cat([batch["input_pos"], torch.arange(pad).expand(len(batch["tokens"]), pad)], 1)
        return out

    cut = validation_losses(model, iter(batches), torch.device("cpu"))
    full = validation_losses(model, map(padded, batches), torch.device("cpu"))
    assert cut == pytest.approx(full, rel=1e-6) and cut["all"] > 0
