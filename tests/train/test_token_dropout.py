"""TokenDropoutState (entrodrop.train.token_dropout): the recipes' one owner of EntroDrop's run
state. The masks, the gate and the schedule have their tests in test_dropout.py; the recipes'
resume tests show the run state surviving a kill. These show what the object adds: the
perturbation exists only inside a micro-batch, and its state keeps the recipe-state keys."""

import pytest
import torch
from omegaconf import OmegaConf
from torchtune.modules.loss import CEWithChunkedOutputLoss

from entrodrop.method.dropout import mean_embedding
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.train.token_dropout import TokenDropoutState


def config(midpoint="0") -> OmegaConf:
    return OmegaConf.create({
        "neftune_alpha": 0.0, "data": {"target_entropy": "unused: signal is entropy"},
        "token_dropout": {"targeting": "low", "gate_percentile": 0.5, "schedule": "static", "gamma_max": 1.0,
                          "sharpness": 1.0, "midpoint": midpoint, "midpoint_unit": "steps", "signal": "entropy",
                          "auto_patience": 1, "auto_min_improvement": 0.0}})


def tiny_model():
    torch.manual_seed(0)
    return qwen3(vocab_size=50, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=8, intermediate_dim=16,
                 max_seq_len=16, tie_word_embeddings=True)


def a_batch():
    """Two target rows of one document each, with distinct entropies (the loader's keys)."""
    g = torch.Generator().manual_seed(1)
    return {"tokens": torch.randint(0, 50, (2, 8), generator=g), "entropy": torch.rand(2, 8, generator=g),
            "document_ids": torch.zeros(2, 8, dtype=torch.long), "domain": torch.ones(2, 8, dtype=torch.long),
            "target_epoch": 1.0}


def test_e_bar_is_at_the_dropped_positions_inside_a_micro_batch_only():
    model = tiny_model()
    run = TokenDropoutState.from_config(config(), CEWithChunkedOutputLoss(), seed=0, device=torch.device("cpu"))
    run.attach(model, model.tok_embeddings.weight.detach().clone())
    batch = a_batch()
    plan = lambda step: run.dropout.plan(batch["entropy"], batch["document_ids"], step, 1.0, range(2))[0]  # noqa: E731
    step = next(s for s in range(100) if plan(s)[1].any())  # gamma_j ~ U(0, 1): a step that drops in row 1
    stats, counts = run.plan(batch, step, rows=range(2))
    drop = plan(step)
    assert stats["gamma_max"] == 1.0 and counts.tolist() == [int(drop.sum()), 16]
    e_bar, table = mean_embedding(model.tok_embeddings.weight), model.tok_embeddings.weight
    with run.for_micro_batch(slice(1, 2)):  # the second row alone
        out = model.tok_embeddings(batch["tokens"][1:2])
    assert torch.equal(out[0][drop[1]], e_bar.expand(int(drop[1].sum()), 8))
    assert torch.equal(out[0][~drop[1]], table[batch["tokens"][1]][~drop[1]])
    assert torch.equal(model.tok_embeddings(batch["tokens"]), table[batch["tokens"]])  # outside: unperturbed
    with pytest.raises(RuntimeError), run.for_micro_batch(slice(0, 1)):
        raise RuntimeError("a failed forward")
    assert torch.equal(model.tok_embeddings(batch["tokens"]), table[batch["tokens"]])  # even after a failure


def test_its_state_is_the_recipe_states_keys_and_a_resume_keeps_the_saved_e_bar_and_j0():
    model = tiny_model()
    run = TokenDropoutState.from_config(config("auto"), CEWithChunkedOutputLoss(), 0, torch.device("cpu"))
    run.attach(model, model.tok_embeddings.weight.detach())
    assert run.dropout.midpoint is None
    for step, loss in [(3, 3.0), (6, 3.5)]:
        record = run.observe({"target_epoch": step / 10, "step": step, "val_loss": {"all": loss}})
    assert record["auto_midpoint"] == {"target_epoch": 0.3, "step": 3, "fixed_at_step": 6} and run.dropout.midpoint == 3
    state = run.state_dict()
    # The top-level keys of a recipe state's token dropout part: a checkpoint written with them resumes.
    assert set(state) == {"e_bar", "val_losses", "j0", "loss_signal"} and state["loss_signal"] is None
    resumed = TokenDropoutState.from_config(config("auto"), CEWithChunkedOutputLoss(), 0, torch.device("cpu"))
    resumed.attach(model, None)  # a resumed run: e_bar comes from its state, not from trained weights
    resumed.load_state_dict({**state, "step": 6, "optimizer": {}})  # a whole recipe state
    assert torch.equal(resumed.state_dict()["e_bar"], state["e_bar"]) and resumed.dropout.midpoint == 3
    assert resumed.state_dict()["j0"] == state["j0"] and resumed.state_dict()["val_losses"] == state["val_losses"]
