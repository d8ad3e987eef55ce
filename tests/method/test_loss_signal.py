"""token_dropout.signal: loss (entrodrop.method.loss_signal): the live store holds each target token's
own last training loss, at the token it predicts; before its first visit, its cached entropy.

The hand computations run a tiny Qwen3 on each target sample alone (not packed) and take
``F.cross_entropy`` of its logits: position t - 1's loss is token t's signal. The store keeps
fp16, so values are compared to 1e-3 relative (fp16 rounds to 4.9e-4; the packed and the
unpacked forward differ by ~1e-6); a write one position off is off by whole nats.
"""

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from conftest import REPO
from omegaconf import OmegaConf
from torchtune.modules.loss import CEWithChunkedOutputLoss

from entrodrop.config import schemas
from entrodrop.config.check import check_config
from entrodrop.data.loader import build_loader
from entrodrop.data.packing import IGNORE_INDEX, TARGET, block_causal_mask
from entrodrop.data.sample_store import SampleStore, sample_table, write_store
from entrodrop.errors import ConfigError
from entrodrop.method.dropout import TokenDropoutPlan, entropy_gate, plan_perturbation
from entrodrop.method.loss_signal import (
    LossSignal,
    flat_values,
    gate_agreement,
    loss_with_token_losses,
)
from entrodrop.models.head import hidden_states
from entrodrop.models.loss import LinearCrossEntropy
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.train.run_dir import differences, plain, resume_state

TINY_TRAINING = REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml"
SEQ_LEN, VOCAB = 32, 64


def key(corpus: str, model=None) -> dict:
    return {"model": model, "tokenizer": "t", "corpus": corpus, "max_seq_len": SEQ_LEN}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A target corpus of 30 samples (an empty one at 4, a one-token one at 7) with distinct
    fp16 entropies (NaN first), a general corpus, in shards of 8: their directories."""
    rng = np.random.default_rng(0)
    target = [rng.integers(1, VOCAB, n).astype(np.int32) for n in rng.integers(2, 16, 30)]
    target[4], target[7] = target[4][:0], target[7][:1]
    general = [rng.integers(1, VOCAB, n).astype(np.int32) for n in rng.integers(4, 16, 300)]
    entropies = [np.r_[np.nan, rng.uniform(0, 8, len(s) - 1)] if len(s) else np.zeros(0) for s in target]
    root = tmp_path_factory.mktemp("signal_stores")
    for name, kind, k, values, samples in [
        ("target", "tokens", key("t"), target, target), ("entropy", "entropy", key("t", "m"), entropies, target),
        ("general", "tokens", key("g"), general, general),
    ]:
        write_store(str(root / name), kind, k, values, sample_table([s.tolist() for s in samples]), 8)
    return {name: str(root / name) for name in ("target", "entropy", "general")}


@pytest.fixture(scope="module")
def batch(stores):
    """The first batch of the real loader: 4 rows of 32, target and general samples packed."""
    loader = build_loader(stores["target"], stores["entropy"], stores["general"], SEQ_LEN, 4, 0.6, seed=0)
    batch = next(iter(loader))
    assert batch["target_epoch"] < 1, "a sample twice in the batch: the hand computations expect one visit"
    assert (batch["sample"] >= 0).any() and (batch["domain"] == 0).any(), "the batch needs target and general tokens"
    return batch


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    # Embeddings ~ N(0, 1), tied: logits spread over several nats, so neighbouring tokens' losses differ.
    return qwen3(vocab_size=VOCAB, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=16, intermediate_dim=32,
                 max_seq_len=SEQ_LEN, tie_word_embeddings=True)


def step_losses(model, batch) -> torch.Tensor:
    """``[b, s]`` per-token losses of the batch through the recipes' path: the fused loss's
    by-product of the packed forward."""
    loss_fn = LinearCrossEntropy(chunk_size=16)
    loss_fn.set_model_output(model)
    hidden = hidden_states(model, batch["tokens"], mask=block_causal_mask(batch["document_ids"]),
                           input_pos=batch["input_pos"])
    with torch.no_grad():
        _, losses = loss_with_token_losses(loss_fn)(hidden, batch["labels"])
    return losses


def offsets_of(store_dir: str) -> np.ndarray:
    lengths = SampleStore(store_dir, "entropy").table["length"].astype(np.int64)
    return np.cumsum(lengths) - lengths


def expected_store(stores, batch, losses, drop=None) -> torch.Tensor:
    """What ``record`` must leave, position by position: position q's loss goes to the slot of
    the token at q + 1 when q has a label, that token is a target token and q was not dropped."""
    expected = torch.from_numpy(flat_values(SampleStore(stores["entropy"], "entropy"))).clone()
    offsets = offsets_of(stores["entropy"])
    sample, pos, labels = batch["sample"], batch["input_pos"], batch["labels"]
    written = 0
    for r in range(sample.shape[0]):
        for q in range(sample.shape[1] - 1):
            if labels[r, q] == IGNORE_INDEX or sample[r, q + 1] < 0:
                continue
            assert sample[r, q] == sample[r, q + 1] and pos[r, q + 1] == pos[r, q] + 1  # the loader's layout
            assert labels[r, q] == batch["tokens"][r, q + 1]
            if drop is None or not drop[r, q]:
                expected[offsets[sample[r, q + 1]] + pos[r, q + 1]] = losses[r, q].half()
                written += 1
    assert written > 20
    return expected


def test_the_signal_is_each_tokens_own_loss_at_the_token_it_predicts(stores, batch):
    model = tiny_model()
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    losses = step_losses(model, batch)
    signal.record(index, batch["labels"], losses, None, IGNORE_INDEX)

    tokens, entropy = SampleStore(stores["target"], "tokens"), SampleStore(stores["entropy"], "entropy")
    offsets = offsets_of(stores["entropy"])
    trained = set(batch["sample"][batch["sample"] >= 0].tolist())
    assert len(trained) >= 3
    model.set_num_output_chunks(0)
    all_by_hand = []
    for i in range(len(tokens)):
        n, values = len(tokens[i]), signal.values[offsets[i] : offsets[i] + len(tokens[i])].float()
        if i not in trained or n < 2:  # not visited (or nothing predicts it): still the cached entropy
            torch.testing.assert_close(values, torch.tensor(entropy[i]).float(), rtol=0, atol=0, equal_nan=True)
            continue
        ids = torch.tensor(tokens[i]).long()
        with torch.no_grad():
            by_hand = F.cross_entropy(model(ids[None])[0, :-1], ids[1:], reduction="none")  # the loss of x_t at t - 1
        all_by_hand.append(by_hand)
        torch.testing.assert_close(values[1:], by_hand, rtol=1e-3, atol=1e-3)
        assert torch.isnan(values[0]), "a sample's first token is predicted by nothing"
    assert torch.cat(all_by_hand).std() > 1.0, "losses too alike to tell a shifted write"
    # Exactly those slots, with exactly the losses the step computed (fp16).
    torch.testing.assert_close(signal.values, expected_store(stores, batch, losses), rtol=0, atol=0, equal_nan=True)


def test_before_any_record_the_signal_is_the_cached_entropy(stores, batch):
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    assert ((index >= 0) == (batch["domain"] == TARGET)).all()
    looked_up = signal.lookup(index)
    assert looked_up.dtype == torch.float32
    # The loader's own join, bitwise: NaN at each sample's first token, general tokens and padding.
    torch.testing.assert_close(looked_up, batch["entropy"], rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(looked_up[batch["domain"] != TARGET]).all()
    assert torch.isnan(looked_up[(batch["domain"] == TARGET) & (batch["input_pos"] == 0)]).all()
    # and so the gate the first epoch uses is the entropy gate
    for targeting in ("low", "high", "random"):
        assert torch.equal(entropy_gate(looked_up, batch["document_ids"], 0.5, targeting),
                           entropy_gate(batch["entropy"], batch["document_ids"], 0.5, targeting))


def test_dropped_positions_do_not_update_the_token_they_predict(stores, batch):
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    losses = step_losses(tiny_model(), batch)
    drop = (torch.rand(batch["sample"].shape, generator=torch.Generator().manual_seed(0)) < 0.5) & (batch["sample"] >= 0)
    signal.record(index, batch["labels"], losses, drop, IGNORE_INDEX)
    expected = expected_store(stores, batch, losses, drop)
    torch.testing.assert_close(signal.values, expected, rtol=0, atol=0, equal_nan=True)
    undropped = expected_store(stores, batch, losses)
    kept_apart = (undropped != expected) & ~expected.isnan()  # slots the mask left at their entropy
    assert kept_apart.sum() >= 10, "the mask kept too few tokens at their entropy to tell"


def test_general_tokens_and_padding_are_never_recorded_or_gated(stores, batch):
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    losses = step_losses(tiny_model(), batch)
    other = batch["domain"] != TARGET
    assert (losses[other & (batch["labels"] != IGNORE_INDEX)] > 0).all()  # the general tokens had losses to write
    before = signal.values.clone()
    signal.record(index, batch["labels"], losses, None, IGNORE_INDEX)
    changed = ~((signal.values == before) | (torch.isnan(signal.values) & torch.isnan(before)))
    # Only the target tokens whose predecessor had a label moved (a loss equal to its entropy in fp16 would not).
    targets_predicted = ((batch["labels"] != IGNORE_INDEX) & (batch["sample"] >= 0)).sum()
    assert 0 < changed.sum() <= targets_predicted
    assert torch.isnan(signal.lookup(index)[other]).all()
    for targeting in ("low", "high", "random"):
        assert not entropy_gate(signal.lookup(index), batch["document_ids"], 1.0, targeting)[other].any()
    dropout = TokenDropoutPlan("low", 1.0, "static", 1.0, 0.2, 0, "steps", seed=0)
    drop, _, _, counts = plan_perturbation(dropout, 0.0, {**batch, "entropy": signal.lookup(index)}, 0, range(4), 16,
                                           torch.device("cpu"))
    assert drop.any() and not drop[other].any() and counts[0] == drop.sum()


def entropy_store(root: Path, values: list) -> SampleStore:
    """An entropy cache holding ``values`` (one list a sample), two samples a shard."""
    tokens = [list(range(1, len(v) + 1)) for v in values]
    return write_store(str(root), "entropy", key("t", "m"), [np.asarray(v, np.float16) for v in values],
                       sample_table(tokens), 2)


def test_the_gate_takes_the_bottom_k_of_the_signal(tmp_path, stores, batch):
    # Hand case: the loss reverses the entropy order of the first sample.
    nan = float("nan")
    signal = LossSignal(entropy_store(tmp_path, [[nan, 1, 2, 3, 4], [nan, 1, 2]]), torch.device("cpu"))
    index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7]])
    labels = torch.tensor([[9, 9, 9, 9, IGNORE_INDEX, 9, 9, IGNORE_INDEX]])
    signal.record(index, labels, torch.tensor([[8.0, 7.0, 6.0, 5.0, 0.0, 0.5, 3.0, 0.0]]), None, IGNORE_INDEX)
    looked_up = signal.lookup(index)
    torch.testing.assert_close(looked_up, torch.tensor([[nan, 8, 7, 6, 5, nan, 0.5, 3]]), equal_nan=True)
    documents = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])
    assert entropy_gate(looked_up, documents, 0.5, "low").int().tolist() == [[0, 0, 0, 1, 1, 0, 1, 0]]
    assert entropy_gate(looked_up, documents, 0.5, "high").int().tolist() == [[0, 1, 1, 0, 0, 0, 0, 1]]

    # A real batch after a step: per document, the floor(k n) lowest signals, ties by position.
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    signal.record(index, batch["labels"], step_losses(tiny_model(), batch), None, IGNORE_INDEX)
    looked_up = signal.lookup(index)
    gate = entropy_gate(looked_up, batch["document_ids"], 0.5, "low")
    expected = torch.zeros_like(gate)
    for r in range(gate.shape[0]):
        for doc in batch["document_ids"][r].unique().tolist():
            places = [q for q in range(gate.shape[1])
                      if batch["document_ids"][r, q] == doc and not math.isnan(looked_up[r, q])]
            lowest = sorted(places, key=lambda q: (looked_up[r, q].item(), q))[: math.floor(0.5 * len(places) + 1e-6)]
            expected[r, lowest] = True
    assert torch.equal(gate, expected)
    assert not torch.equal(gate, entropy_gate(batch["entropy"], batch["document_ids"], 0.5, "low")), "the signal did not move"


def test_a_token_twice_in_one_step_keeps_its_larger_loss(tmp_path):
    nan = float("nan")
    signal = LossSignal(entropy_store(tmp_path, [[nan, 9, 9, 9], [nan, 2]]), torch.device("cpu"))
    # Sample 0 in three rows (an epoch boundary inside the batch), in either order; the third
    # row's loss at q = 0 is the largest, but its input there was dropped.
    index = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]])
    labels = torch.tensor([[5, 5, 5, IGNORE_INDEX]] * 3)
    losses = torch.tensor([[1.0, 4.0, 0.25, 0.0], [2.0, 3.0, 0.5, 0.0], [7.0, 1.0, 0.0, 0.0]])
    drop = torch.tensor([[False] * 4, [False] * 4, [True, False, False, False]])
    for order in ([0, 1, 2], [2, 1, 0]):
        signal.load_state_dict({"values": torch.tensor([nan, 9, 9, 9, nan, 2], dtype=torch.float16)})
        signal.record(index[order], labels[order], losses[order], drop[order], IGNORE_INDEX)
        # The larger of this step's losses, not of them and the old value (9: larger, older).
        torch.testing.assert_close(signal.values, torch.tensor([nan, 2, 4, 0.5, nan, 2], dtype=torch.float16),
                                   equal_nan=True)


def test_the_store_saves_and_loads_bitwise_and_refuses_another_corpus(tmp_path, stores, batch):
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    signal.record(index, batch["labels"], step_losses(tiny_model(), batch), None, IGNORE_INDEX)
    path = tmp_path / "state.pt"
    torch.save(signal.state_dict(), path)
    fresh = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    fresh.load_state_dict(torch.load(path))
    assert torch.equal(fresh.values.view(torch.int16), signal.values.view(torch.int16))  # NaNs too
    other = LossSignal(entropy_store(tmp_path / "other", [[float("nan"), 1.0]]), torch.device("cpu"))
    with pytest.raises(ConfigError, match="it was trained on other target data"):
        other.load_state_dict(signal.state_dict())


def _record_on_rank(rank: int, init_file: str, stores: dict, out: str) -> None:
    """One of two gloo processes: record its half of the rows (the other rank's rows repeat
    a sample of its own with other losses), distributed."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    index, labels, losses = torch.load(Path(out) / "step.pt")
    rows = slice(2 * rank, 2 * rank + 2)
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    signal.record(index[rows], labels[rows], losses[rows], None, IGNORE_INDEX, distributed=True)
    torch.save(signal.state_dict(), Path(out) / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: everything is written and the group destroyed, and
    # a rank that then tears down gloo's and FSDP's objects can abort ('terminate called without an
    # active exception'), failing a test whose results are all in.
    os._exit(0)


@pytest.mark.recipe
def test_two_ranks_record_what_one_records(tmp_path, stores, batch):
    signal = LossSignal(SampleStore(stores["entropy"], "entropy"), torch.device("cpu"))
    index = signal.index(batch["sample"], batch["input_pos"])
    labels, losses = batch["labels"], step_losses(tiny_model(), batch)
    # Row 3 trains row 0's samples again (what an epoch boundary in the batch does), with higher losses.
    index, labels, losses = index.clone(), labels.clone(), losses.clone()
    index[3], labels[3], losses[3] = index[0], labels[0], losses[0] + 1.0
    torch.save((index, labels, losses), tmp_path / "step.pt")
    mp.spawn(_record_on_rank, args=(str(tmp_path / "init"), stores, str(tmp_path)), nprocs=2)
    signal.record(index, labels, losses, None, IGNORE_INDEX)
    for rank in (0, 1):
        assert torch.equal(torch.load(tmp_path / f"{rank}.pt")["values"].view(torch.int16), signal.values.view(torch.int16))
    written = (labels[0, :-1] != IGNORE_INDEX) & (index[0, 1:] >= 0)
    assert written.any() and torch.equal(signal.values[index[0, 1:][written]], losses[3, :-1][written].half())


def test_gate_agreement_of_the_entropy_with_itself_and_a_hand_case():
    nan = float("nan")
    entropy = torch.tensor([nan, 1, 2, 3, 4, nan, 5, 6, 7], dtype=torch.float16)
    offsets = torch.tensor([0, 5])
    assert gate_agreement(entropy.clone(), entropy, offsets, 0.5, "low") == {"gate_agreement": 1.0,
                                                                             "rank_correlation": 1.0}
    # Sample 0's order reversed: its gate (2 of 4 tokens) moves entirely, sample 1's (1 of 3) stays.
    signal = torch.tensor([nan, 4, 3, 2, 1, nan, 5, 6, 7], dtype=torch.float16)
    got = gate_agreement(signal, entropy, offsets, 0.5, "low")
    assert got["gate_agreement"] == pytest.approx(1 / 3)
    # Spearman over the 7 tokens with both: rank differences 3, 1, -1, -3, 0, 0, 0, so 1 - 6 * 20 / (7 * 48).
    assert got["rank_correlation"] == pytest.approx(9 / 14)
    assert gate_agreement(signal, entropy, offsets, 0.5, "high")["gate_agreement"] == pytest.approx(1 / 3)


def test_the_store_agrees_with_the_cache_it_started_from(stores):
    entropy = SampleStore(stores["entropy"], "entropy")
    signal = LossSignal(entropy, torch.device("cpu"))
    assert signal.values.dtype == torch.float16 and signal.values.numel() == int(entropy.table["length"].sum())
    assert signal.agreement(entropy, 0.5, "low") == {"gate_agreement": 1.0, "rank_correlation": 1.0}


# Which losses give per-token values.

def test_the_fused_loss_gives_its_own_loss_bitwise_and_each_tokens_loss():
    model = tiny_model()
    loss_fn = LinearCrossEntropy(chunk_size=7)
    loss_fn.set_model_output(model)
    tokens = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    labels = torch.cat([tokens[:, 1:], torch.full((2, 1), IGNORE_INDEX)], dim=1)
    labels[0, 4] = IGNORE_INDEX
    hidden = hidden_states(model, tokens)
    loss, losses = loss_with_token_losses(loss_fn)(hidden, labels)
    reference = loss_fn(hidden, labels)
    assert torch.equal(loss, reference)  # what signal: entropy trains with, bitwise
    # and as the fused loss summed it before it returned the token losses: chunk by chunk
    total = torch.zeros(())
    for chunk in losses.flatten().split(7):
        total += chunk.sum()
    assert torch.equal(loss, total / (labels != IGNORE_INDEX).sum())
    assert not losses.requires_grad and losses.shape == labels.shape and losses.dtype == torch.float32
    by_hand = F.cross_entropy(model.output(hidden).flatten(0, 1), labels.flatten(), reduction="none").view(2, 12)
    torch.testing.assert_close(losses, by_hand, rtol=1e-5, atol=1e-6)
    assert (losses[labels == IGNORE_INDEX] == 0).all()
    grads = torch.autograd.grad(loss, model.tok_embeddings.weight, retain_graph=True)[0]
    assert torch.equal(grads, torch.autograd.grad(reference, model.tok_embeddings.weight)[0])


def test_torchtunes_chunked_loss_gives_its_own_loss_and_each_tokens_loss():
    model = tiny_model()
    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=4)
    model.set_num_output_chunks(4)
    tokens = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    labels = torch.cat([tokens[:, 1:], torch.full((2, 1), IGNORE_INDEX)], dim=1)
    labels[1, 2] = IGNORE_INDEX
    logits = model(tokens)
    assert isinstance(logits, list) and len(logits) == 4
    loss, losses = loss_with_token_losses(loss_fn)(logits, labels)
    reference = loss_fn(logits, labels)
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=0)
    assert not losses.requires_grad and losses.shape == labels.shape
    by_hand = F.cross_entropy(torch.cat(logits, dim=1).flatten(0, 1), labels.flatten(), reduction="none").view(2, 12)
    torch.testing.assert_close(losses, by_hand, rtol=1e-6, atol=1e-7)
    weight = model.tok_embeddings.weight
    torch.testing.assert_close(torch.autograd.grad(loss, weight, retain_graph=True)[0],
                               torch.autograd.grad(reference, weight)[0], rtol=1e-5, atol=1e-7)


def test_a_loss_without_per_token_values_is_a_clear_error():
    # liger-kernel's fused kernel returns the reduced loss only. It is not installed here, so
    # the loss is built without its __init__ (which imports it): what impl: liger would hold.
    liger = object.__new__(LinearCrossEntropy)
    liger.chunk_size, liger.impl, liger.ignore_index, liger.reduction = 4096, "liger", IGNORE_INDEX, "mean"
    liger._model, liger._liger = None, object()
    with pytest.raises(ConfigError, match=r"token_dropout.signal=loss needs each token's loss, but loss.impl='liger'.*"
                                          r"use impl: torch, or torchtune.modules.loss.CEWithChunkedOutputLoss"):
        loss_with_token_losses(liger)
    with pytest.raises(ConfigError, match=r"token_dropout.signal=loss needs each token's loss, which CrossEntropyLoss "
                                          r"does not give: use entrodrop.models.loss.LinearCrossEntropy \(impl: torch\)"):
        loss_with_token_losses(torch.nn.CrossEntropyLoss())


# Config and resume.

def training_problems(cfg) -> list:
    problems = check_config(cfg, schemas.TRAINING)
    # The tiny config's stores are made by the tests that need them: not a problem here.
    return [p for p in problems + schemas.check_rules(cfg, schemas.TRAINING_RULES, problems) if "holds no store" not in p]


def test_signal_loss_needs_a_ranking_gate_and_the_entropy_cache(stores):
    cfg = OmegaConf.load(TINY_TRAINING)
    # A cache that exists: a rule is skipped while one of its keys has a problem already.
    cfg.data.target_entropy = stores["entropy"]
    assert cfg.token_dropout.signal == "entropy"
    cfg.token_dropout.signal = "loss"
    assert training_problems(cfg) == []
    for change, why in [({"targeting": "random"}, "targeting=random gates every token"),
                        ({"schedule": "none"}, "schedule=none drops nothing")]:
        changed = OmegaConf.merge(cfg, {"token_dropout": change})
        assert training_problems(changed) == [f"token_dropout.signal=loss ranks the tokens the gate takes, but {why}: "
                                              "use signal=entropy"]
        assert training_problems(OmegaConf.merge(changed, {"token_dropout": {"signal": "entropy"}})) == []
    no_cache = OmegaConf.merge(cfg, {"data": {"target_entropy": None}})
    assert ("token_dropout.signal=loss starts from the entropy cache (each token's signal before its first visit): "
            "set data.target_entropy") in training_problems(no_cache)
    cfg.token_dropout.signal = "gradient"
    assert training_problems(cfg) == ["token_dropout.signal=gradient must be one of ('entropy', 'loss')"]


def test_a_checkpoint_saved_before_the_key_resumes_as_entropy_and_another_signal_is_refused(tmp_path):
    cfg = OmegaConf.load(TINY_TRAINING)
    may_change = schemas.may_change_on_resume(cfg)
    old = plain(cfg)
    del old["token_dropout"]["signal"]  # what a checkpoint saved before the key existed holds
    (tmp_path / "step_3").mkdir()
    torch.save({"config": old, "step": 3}, tmp_path / "step_3" / "recipe_state.pt")
    state, where = resume_state(str(tmp_path), plain(cfg), 10, may_change, (), schemas.ADDED_KEYS)
    assert state["step"] == 3 and where == tmp_path / "step_3"
    assert differences(old, plain(cfg), may_change) == ["token_dropout.signal: checkpoint has <absent>, now entropy"]
    cfg.token_dropout.signal = "loss"
    with pytest.raises(ConfigError, match="token_dropout.signal: checkpoint has entropy, now loss"):
        resume_state(str(tmp_path), plain(cfg), 10, may_change, (), schemas.ADDED_KEYS)
    # and a checkpoint that has the key is compared as it is
    torch.save({"config": plain(cfg), "step": 3}, tmp_path / "step_3" / "recipe_state.pt")
    cfg.token_dropout.signal = "entropy"
    with pytest.raises(ConfigError, match="token_dropout.signal: checkpoint has loss, now entropy"):
        resume_state(str(tmp_path), plain(cfg), 10, may_change, (), schemas.ADDED_KEYS)
