"""The mixed, packed training stream: ratio, epochs, ranks, exact resume, the entropy join."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from entrodrop.data.corpus import tokenize_corpus
from entrodrop.data.loader import build_loader, num_training_steps, plan_budget
from entrodrop.data.packing import (
    GENERAL,
    IGNORE_INDEX,
    PADDING,
    TARGET,
    block_causal_mask,
)
from entrodrop.data.sample_store import SampleStore, sample_table, write_store
from entrodrop.errors import CacheMismatchError, MissingFileError
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.models.tiny import TINY_QWEN3

SEQ_LEN = 64


def key(corpus: str, max_seq_len: int = SEQ_LEN) -> dict:
    return {"model": None, "tokenizer": "tiny", "corpus": corpus, "max_seq_len": max_seq_len}


@pytest.fixture(scope="module")
def stores(tiny_assets, tmp_path_factory):
    """Token stores of the tiny target (plus one empty record) and general corpora, cut to 64
    tokens, and an entropy cache of the target with distinct values per token."""
    d = tiny_assets / "qwen3"
    tokenizer = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))
    target = tokenize_corpus(tokenizer, str(tiny_assets / "target.jsonl"), "text", SEQ_LEN)
    target.insert(5, [])  # an empty record
    general = tokenize_corpus(tokenizer, str(tiny_assets / "general.jsonl"), "text", SEQ_LEN)
    root = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(0)
    entropies = [np.r_[np.nan, rng.uniform(0, 8, len(s) - 1)] if s else np.zeros(0) for s in target]
    paths = {
        "target": write_store(str(root / "target"), "tokens", key("t"), [np.asarray(s, np.int32) for s in target],
                              sample_table(target), 16).dir,
        "entropy": write_store(str(root / "entropy"), "entropy", {**key("t"), "model": "m"}, entropies,
                               sample_table(target), 16).dir,
        "general": write_store(str(root / "general"), "tokens", key("g"), [np.asarray(s, np.int32) for s in general],
                               sample_table(general), 256).dir,
    }
    return {k: str(v) for k, v in paths.items()}, target, general, entropies


def loader(stores, global_batch_size=4, rank=0, world_size=1, ratio=0.6, seed=0, seq_len=SEQ_LEN):
    paths = stores[0]
    return build_loader(paths["target"], paths["entropy"], paths["general"], seq_len, global_batch_size,
                        ratio, seed, rank, world_size)


def take(it, n):
    return [next(it) for _ in range(n)]


def test_realized_ratio_stays_within_two_points_over_any_1000_steps(stores):
    it = iter(loader(stores, global_batch_size=2))
    per_step = np.array([[(b["domain"] == TARGET).sum().item(), (b["domain"] >= 0).sum().item()] for b in take(it, 1200)])
    for start in range(0, 201, 50):
        window = per_step[start : start + 1000].sum(0)
        assert abs(window[0] / window[1] - 0.6) < 0.02, start


def test_target_repeats_per_epoch_in_new_orders_and_general_never_repeats(stores):
    _, target, general, _ = stores
    stream = loader(stores).root
    stream.reset()
    draws = [stream._draw() for _ in range(3000)]
    target_ids = [i for d, i in draws if d == TARGET]
    n = sum(1 for s in target if s)
    epochs = [target_ids[k * n : (k + 1) * n] for k in range(len(target_ids) // n)]
    assert len(epochs) >= 3
    for epoch in epochs:
        assert sorted(epoch) == [i for i, s in enumerate(target) if s]
    assert epochs[0] != epochs[1] != epochs[2]
    general_ids = [i for d, i in draws if d == GENERAL]
    assert len(general_ids) == len(set(general_ids)) and 5 not in target_ids
    assert stream.num_empty == {"target": 1, "general": sum(1 for s in general if not s)}


def test_rows_hold_whole_documents_with_shifted_labels_and_joined_entropy(stores):
    _, target, general, entropies = stores
    # Rows twice as long as the longest sample: several documents to a row, and padding.
    batches = take(iter(loader(stores, seq_len=2 * SEQ_LEN)), 8)
    rows = [(b, r) for b in batches for r in range(b["tokens"].shape[0])]
    assert any(b["document_ids"][r].max() >= 1 for b, r in rows), "no row holds two documents"
    assert any((b["domain"][r] == PADDING).any() for b, r in rows), "no row is padded"
    for batch, r in rows:
        docs = batch["document_ids"][r]
        for doc in docs.unique().tolist():
            at = (docs == doc).nonzero().view(-1)
            tokens = batch["tokens"][r, at]
            if doc == -1:
                assert (batch["domain"][r, at] == PADDING).all() and (batch["labels"][r, at] == IGNORE_INDEX).all()
                continue
            assert at.tolist() == list(range(at[0], at[0] + len(at)))  # contiguous
            assert batch["input_pos"][r, at].tolist() == list(range(len(at)))
            assert batch["labels"][r, at[:-1]].tolist() == tokens[1:].tolist() and batch["labels"][r, at[-1]] == IGNORE_INDEX
            domain = batch["domain"][r, at[0]].item()
            source = target if domain == TARGET else general
            i = next(k for k, s in enumerate(source) if s == tokens.tolist())
            if domain == TARGET:
                expected = torch.from_numpy(entropies[i].astype(np.float16).astype(np.float32))
                torch.testing.assert_close(batch["entropy"][r, at], expected, equal_nan=True)
            else:
                assert torch.isnan(batch["entropy"][r, at]).all()


def test_ranks_split_each_global_batch_into_disjoint_parts(stores):
    one = iter(loader(stores, global_batch_size=4))
    ranks = [iter(loader(stores, global_batch_size=4, rank=r, world_size=2)) for r in range(2)]
    for _ in range(6):
        full = next(one)
        parts = [next(r) for r in ranks]
        for name in ("tokens", "labels", "entropy", "domain", "document_ids", "input_pos"):
            torch.testing.assert_close(torch.cat([p[name] for p in parts]), full[name], equal_nan=True)


@pytest.mark.parametrize("world_size", [1, 2])
def test_resume_mid_epoch_gives_the_same_batches(stores, world_size):
    for rank in range(world_size):
        uninterrupted = loader(stores, rank=rank, world_size=world_size)
        it = iter(uninterrupted)
        take(it, 7)
        state = uninterrupted.state_dict()
        expected = take(it, 5)
        assert 0 < expected[0]["target_epoch"] % 1, "the test should resume mid-epoch"

        resumed = loader(stores, rank=rank, world_size=world_size)
        resumed.load_state_dict(state)
        for want, got in zip(expected, take(iter(resumed), 5)):
            for name in ("tokens", "labels", "entropy", "domain"):
                torch.testing.assert_close(got[name], want[name], equal_nan=True)
            assert got["target_epoch"] == want["target_epoch"]


def test_another_seed_gives_another_stream(stores):
    a, b = next(iter(loader(stores, seed=0))), next(iter(loader(stores, seed=1)))
    assert not torch.equal(a["tokens"], b["tokens"])


def test_a_cache_of_other_tokens_is_refused(stores, tmp_path):
    paths, target, _, entropies = stores
    other = [s[:-1] if i == 9 else s for i, s in enumerate(target)]
    wrong = write_store(str(tmp_path / "e"), "entropy", {**key("t"), "model": "m"},
                        [e[: len(s)] for e, s in zip(entropies, other)], sample_table(other), 16)
    with pytest.raises(CacheMismatchError, match="first sample that differs: sample 9"):
        build_loader(paths["target"], str(wrong.dir), paths["general"], SEQ_LEN, 4, 0.6, 0)


def corrupt_sample(store_dir, i: int) -> Path:
    """Add 1 to one token id of sample ``i`` in its shard's tokens.npy, as a bad disk or a stray
    write would; the manifest and tables stay as they were. Returns the shard file."""
    store = SampleStore(str(store_dir), "tokens")
    per_shard = store.manifest["samples_per_shard"]
    shard = Path(store_dir) / f"shard-{i // per_shard:05d}" / "tokens.npy"
    tokens = np.load(shard)
    start = i - i % per_shard
    tokens[int(store.table["length"][start:i].sum()) + 1] += 1
    np.save(shard, tokens)
    return shard


def test_a_corrupted_token_shard_is_refused_before_the_first_batch(stores, tmp_path):
    paths, target, _, _ = stores
    shutil.copytree(paths["target"], tmp_path / "t")
    assert len(target[37]) > 1
    shard = corrupt_sample(tmp_path / "t", 37)  # shard-00002, 16 samples a shard
    with pytest.raises(CacheMismatchError) as err:
        build_loader(str(tmp_path / "t"), paths["entropy"], paths["general"], SEQ_LEN, 4, 0.6, 0)
    message = str(err.value)
    assert f"the token store {tmp_path / 't'} holds other token ids than it was written with" in message
    assert f"{shard}: 1 of 16 samples differ, the first is sample 37 (same length, {len(target[37])}" in message
    assert "re-run recipes/tokenize_corpus.py" in message
    # Without an entropy cache nothing else would ever look at the target tokens.
    with pytest.raises(CacheMismatchError, match="sample 37"):
        build_loader(str(tmp_path / "t"), None, paths["general"], SEQ_LEN, 4, 0.6, 0)


def test_a_cut_token_shard_is_refused(stores, tmp_path):
    paths = stores[0]
    shutil.copytree(paths["target"], tmp_path / "t")
    shard = tmp_path / "t" / "shard-00001" / "tokens.npy"
    size = shard.stat().st_size
    np.save(shard, np.load(shard)[:-1])
    # The manifest records each file's size: the store does not open.
    with pytest.raises(CacheMismatchError, match=f"{shard}: {size - 4} bytes, written with {size}"):
        build_loader(str(tmp_path / "t"), paths["entropy"], paths["general"], SEQ_LEN, 4, 0.6, 0)
    # A store written before sizes were recorded: the token count tells.
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    del manifest["file_sizes"]
    (tmp_path / "t" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheMismatchError, match=f"{shard} holds .* tokens, but its samples 16 to 31 have"):
        build_loader(str(tmp_path / "t"), paths["entropy"], paths["general"], SEQ_LEN, 4, 0.6, 0)


def test_a_deleted_entropy_shard_file_is_named_before_the_first_batch(stores, tmp_path):
    """Before, the loader built, and the run died with FileNotFoundError at the first batch that
    drew from the shard (after the model had loaded; a gloo error with two processes)."""
    paths = stores[0]
    shutil.copytree(paths["entropy"], tmp_path / "e")
    shard = tmp_path / "e" / "shard-00002" / "entropy.npy"
    size = shard.stat().st_size
    shard.unlink()
    with pytest.raises(MissingFileError) as err:
        build_loader(paths["target"], str(tmp_path / "e"), paths["general"], SEQ_LEN, 4, 0.6, 0)
    assert str(err.value) == (
        f"the entropy cache at {tmp_path / 'e'} is missing files its manifest names, or has them at another size "
        f"than written:\n  {shard}: missing (written with {size} bytes)\nFix: re-run recipes/precompute_entropy.py "
        "with the same config (the same cache_dir): it writes these files again, computing only their shards, and "
        "keeps the others")


def test_the_token_table_is_the_one_the_store_was_written_with(stores):
    paths, target, general, _ = stores
    for path, samples in ((paths["target"], target), (paths["general"], general)):
        store = SampleStore(path, "tokens")
        assert np.array_equal(store.token_table(), sample_table(samples))
        assert store.differences(store.token_table(), store.table) == []


def test_a_corrupted_general_sample_is_caught_when_read(stores, tmp_path):
    paths = stores[0]
    shutil.copytree(paths["general"], tmp_path / "g")
    stream = loader(stores).root
    stream.reset()
    first_general = next(i for domain, i in (stream._draw() for _ in range(100)) if domain == GENERAL)
    corrupt_sample(tmp_path / "g", first_general)
    # The general store is read once and may be huge: it is not hashed at start-up, but sample by sample.
    it = iter(build_loader(paths["target"], paths["entropy"], str(tmp_path / "g"), SEQ_LEN, 4, 0.6, 0))
    with pytest.raises(CacheMismatchError, match=f"token store {tmp_path / 'g'}, sample {first_general}: .*"
                                                 "re-run recipes/tokenize_corpus.py"):
        next(it)


def test_bad_settings_are_reported_together(stores):
    with pytest.raises(ValueError) as err:
        build_loader(*stores[0].values(), seq_len=32, global_batch_size=3, target_ratio=1.5, seed=0, rank=0, world_size=2)
    message = str(err.value)
    assert "target_ratio=1.5 must be in (0, 1)" in message
    assert "global_batch_size=3 is not a multiple of 2 processes" in message
    assert "longer than seq_len=32" in message


def test_budget_arithmetic():
    budget = plan_budget(total_tokens=1_000_000, global_batch_size=8, seq_len=1024, target_ratio=0.6,
                         target_tokens=50_000, general_tokens=10_000_000)
    assert budget.num_steps == 122 and budget.tokens_per_step == 8192
    assert budget.target_epochs == pytest.approx(0.6 * 122 * 8192 / 50_000)
    assert "122 steps" in budget.describe()
    with pytest.raises(ValueError, match="general corpus has 1000"):
        plan_budget(1_000_000, 8, 1024, 0.6, 50_000, 1000)
    with pytest.raises(ValueError, match="less than one step"):
        plan_budget(100, 8, 1024, 0.6, 50_000, 10_000_000)


def test_packed_documents_do_not_attend_to_each_other(stores, tiny_assets, make_tiny_assets):
    torch.manual_seed(0)
    model = qwen3(**TINY_QWEN3).eval()
    batch, row = next((b, r) for b in take(iter(loader(stores)), 300) for r in range(4)
                      if b["document_ids"][r].max() >= 1)
    tokens, docs = batch["tokens"][row : row + 1], batch["document_ids"][row : row + 1]
    with torch.no_grad():
        packed = model(tokens, mask=block_causal_mask(docs), input_pos=batch["input_pos"][row : row + 1])
        for doc in range(int(docs.max()) + 1):
            at = (docs[0] == doc).nonzero().view(-1)
            alone = model(tokens[:, at])
            torch.testing.assert_close(packed[:, at], alone, atol=1e-4, rtol=1e-5)


def test_tokenize_recipe_one_and_two_processes_and_the_loader_joins_it(tiny_assets, tune_run, tmp_path):
    """The real CLI: token stores from one and two processes are identical, and the loader
    accepts either with the entropy cache the precompute writes from one of them."""
    def tokenize(out, nproc):
        result = tune_run("recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml",
                          f"corpora.target.store_dir={out}/target", f"corpora.general.store_dir={out}/general",
                          f"corpora.target_val.store_dir={out}/target_val", "samples_per_shard=100", nproc=nproc)
        assert result.returncode == 0, result.stderr[-3000:]

    tokenize(tmp_path / "one", 1)
    tokenize(tmp_path / "two", 2)
    for store in ("target/samples.npy", "general/samples.npy", "general/shard-00003/tokens.npy"):
        assert (tmp_path / "one" / store).read_bytes() == (tmp_path / "two" / store).read_bytes()
    result = tune_run("recipes/precompute_entropy.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
                      f"target_tokens={tmp_path}/two/target", f"cache_dir={tmp_path}/entropy")
    assert result.returncode == 0, result.stderr[-3000:]
    batch = next(iter(build_loader(f"{tmp_path}/one/target", f"{tmp_path}/entropy", f"{tmp_path}/one/general",
                                   256, 4, 0.6, 0)))
    assert (batch["domain"] == TARGET).any() and not torch.isnan(batch["entropy"][batch["domain"] == TARGET]).all()


def test_block_causal_mask_is_causal_within_each_document_only():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 30, (4, 12), generator=gen)
    docs = torch.stack([torch.repeat_interleave(torch.arange(12), n)[:100] for n in lengths])
    docs[0, 90:] = -1  # padding is a document of its own
    same_document = docs.unsqueeze(-1) == docs.unsqueeze(-2)
    causal = torch.tril(torch.ones(100, 100, dtype=torch.bool))
    assert torch.equal(block_causal_mask(docs), same_document & causal)


def test_the_dense_block_causal_mask_is_torchtunes():
    from torchtune.modules.attention_utils import create_block_causal_mask

    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        b, s = int(torch.randint(1, 4, (1,), generator=gen)), int(torch.randint(1, 40, (1,), generator=gen))
        rows = []
        for _ in range(b):  # documents as pack_rows lays them out: runs of 0, 1, 2..., then padding (-1)
            lengths = torch.randint(1, 12, (s,), generator=gen).cumsum(0)
            filled = int(torch.randint(0, s + 1, (1,), generator=gen))
            ids = torch.searchsorted(lengths, torch.arange(s), right=True)
            rows.append(torch.where(torch.arange(s) < filled, ids, -1))
        docs = torch.stack(rows)
        expected = create_block_causal_mask([torch.unique_consecutive(row, return_counts=True)[1] for row in docs])
        assert torch.equal(block_causal_mask(docs), expected)


@pytest.mark.parametrize("total_tokens, global_batch_size, seq_len", [(81920, 8, 256), (81919, 8, 256),
                                                                      (2048, 8, 256), (10**12, 512, 4096)])
def test_the_step_count_is_whole_global_batches_and_the_budget_uses_it(total_tokens, global_batch_size, seq_len):
    steps = num_training_steps(total_tokens, global_batch_size, seq_len)
    assert steps * global_batch_size * seq_len <= total_tokens < (steps + 1) * global_batch_size * seq_len
    budget = plan_budget(total_tokens, global_batch_size, seq_len, 0.6, 10**9, 10**13)
    assert budget.num_steps == steps
