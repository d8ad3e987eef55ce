"""midpoint: auto's watch (entrodrop.train.midpoint): it fixes j0 where the validation loss was
lowest once it stops improving, never moves it, resumes from a checkpoint to the same j0, and
reads its state from the recipe state's own keys, the layout saved checkpoints have."""

import logging

import pytest
import torch
from omegaconf import OmegaConf

from entrodrop.method.dropout import TokenDropoutPlan
from entrodrop.train.midpoint import MidpointWatch, midpoint_state

# (step, all-token validation loss) every 3 steps: it falls to 2.2 at step 9, then rises.
LOSSES = [(3, 3.0), (6, 2.5), (9, 2.2), (12, 2.25), (15, 2.3), (18, 2.4), (21, 2.1), (24, 2.0)]


def record(step: int, loss: float) -> dict:
    return {"step": step, "target_epoch": step / 12, "val_loss": {"all": loss, "low": loss + 1.0}}


def td(**settings):
    base = {"targeting": "low", "gate_percentile": 0.5, "schedule": "sigmoid", "gamma_max": 0.1, "sharpness": 0.2,
            "midpoint": "auto", "midpoint_unit": "epochs", "auto_patience": 2, "auto_min_improvement": 0.0,
            "signal": "entropy"}
    return OmegaConf.create({**base, **settings})


def test_j0_is_the_lowest_loss_once_it_stops_improving_and_never_moves():
    watch = MidpointWatch(patience=2, min_improvement=0.0)
    got = [watch.observe(record(step, loss)) for step, loss in LOSSES]
    j0 = {"target_epoch": 9 / 12, "step": 9, "fixed_at_step": 15}
    assert got == [None, None, None, None, j0, j0, j0, j0]  # the later, lower losses do not move it
    assert len(watch.val_losses) == 5  # nothing is read once j0 is fixed


def test_the_watch_logs_once_the_evaluation_that_fixes_j0(caplog):
    watch = MidpointWatch(patience=2, min_improvement=0.0)
    with caplog.at_level(logging.INFO):
        for step, loss in LOSSES:
            watch.observe(record(step, loss))
    lines = [r.getMessage() for r in caplog.records if "midpoint: auto fixed j0" in r.getMessage()]
    assert lines == ["midpoint: auto fixed j0 at target epoch 0.75 (step 9), the lowest validation loss so far, "
                     "after 2 evaluations in a row without a relative improvement above 0; the curriculum runs "
                     "from step 16"]


@pytest.mark.parametrize("stop", range(len(LOSSES) + 1))
def test_a_watch_resumed_from_its_saved_state_decides_as_the_uninterrupted_one(tmp_path, stop):
    straight = MidpointWatch(2, 0.0)
    expected = [straight.observe(record(step, loss)) for step, loss in LOSSES]
    first = MidpointWatch(2, 0.0)
    for step, loss in LOSSES[:stop]:
        first.observe(record(step, loss))
    torch.save({"step": 0, **midpoint_state(first)}, tmp_path / "recipe_state.pt")  # as a checkpoint keeps it
    resumed = MidpointWatch(2, 0.0)
    resumed.load_state_dict(torch.load(tmp_path / "recipe_state.pt", weights_only=False, mmap=True))
    assert [resumed.observe(record(step, loss)) for step, loss in LOSSES[stop:]] == expected[stop:]
    assert resumed.state_dict() == straight.state_dict()


def test_a_recipe_state_saved_before_the_watch_existed_resumes():
    # What the recipes saved under these keys before MidpointWatch: the list of
    # (target_epoch, step, loss) tuples and j0, beside the rest of the recipe state.
    old = {"step": 12, "seed": 0, "val_losses": [(0.25, 3, 3.0), (0.5, 6, 2.5), (0.75, 9, 2.2), (1.0, 12, 2.25)],
           "j0": None, "loss_signal": None}
    watch = MidpointWatch(2, 0.0)
    watch.load_state_dict(old)
    assert watch.observe(record(15, 2.3)) == {"target_epoch": 0.75, "step": 9, "fixed_at_step": 15}
    fixed = {**old, "j0": {"target_epoch": 0.75, "step": 9, "fixed_at_step": 15}}
    watch.load_state_dict(fixed)
    assert watch.observe(record(18, 1.0)) == fixed["j0"]


def test_j0_enters_the_dropout_in_its_unit_and_not_before_it_is_fixed():
    watch = MidpointWatch(2, 0.0)
    for unit, midpoint in (("epochs", 0.75), ("steps", 9)):
        dropout = TokenDropoutPlan.from_config(td(midpoint_unit=unit), seed=3)
        assert dropout.midpoint is None and watch.apply(dropout) is dropout
    for step, loss in LOSSES[:5]:
        watch.observe(record(step, loss))
    for unit, midpoint in (("epochs", 0.75), ("steps", 9)):
        dropout = TokenDropoutPlan.from_config(td(midpoint_unit=unit), seed=3)
        fixed = watch.apply(dropout)
        assert fixed.midpoint == midpoint and fixed.midpoint_unit == unit and fixed.seed == 3
        assert fixed == TokenDropoutPlan.from_config(td(midpoint=midpoint, midpoint_unit=unit), seed=3)


def test_only_midpoint_auto_has_a_watch_and_every_recipe_state_keeps_its_keys():
    watch = MidpointWatch.from_config(td(auto_patience=4, auto_min_improvement=0.01))
    assert (watch.patience, watch.min_improvement) == (4, 0.01)
    assert MidpointWatch.from_config(td(midpoint=2.0)) is None
    assert midpoint_state(None) == {"val_losses": [], "j0": None}  # what a run with a number has always saved
    assert midpoint_state(watch) == {"val_losses": [], "j0": None}
    watch.observe(record(3, 3.0))
    assert midpoint_state(watch) == {"val_losses": [(0.25, 3, 3.0)], "j0": None}
