"""What a run finds in its output directory: earlier runs, moving them aside, pruning checkpoints."""

import json
from pathlib import Path

from entrodrop.checkpointing import RECIPE_STATE_FNAME
from entrodrop.run_dir import best_checkpoint, earlier_run, move_aside, prune_checkpoints


def make_checkpoints(root: Path, steps) -> Path:
    for step in steps:
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / RECIPE_STATE_FNAME).write_bytes(b"state")
    return root


def test_an_earlier_run_is_found_in_each_of_its_directories(tmp_path):
    assert earlier_run(tmp_path / "checkpoints", tmp_path / "logs", tmp_path / "eval") == []
    make_checkpoints(tmp_path / "checkpoints", [3, 20, 6])
    (tmp_path / "checkpoints" / ".step_9.tmp-x").mkdir()  # a save that was killed: not a checkpoint
    found = earlier_run(tmp_path / "checkpoints", tmp_path / "logs", tmp_path / "eval")
    assert found == [f"{tmp_path / 'checkpoints'}: 3 checkpoints (step_3 to step_20)"]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "evals.jsonl").write_text("{}\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "log_1.txt").write_text("Step 1 | loss:1.0\n")
    assert len(earlier_run(tmp_path / "checkpoints", tmp_path / "logs", tmp_path / "eval")) == 3


def test_moving_aside_keeps_everything(tmp_path):
    run = tmp_path / "run"
    make_checkpoints(run / "checkpoints", [1])
    logs = tmp_path / "elsewhere_logs"
    logs.mkdir()
    (logs / "log_1.txt").write_text("x")
    moved = move_aside(str(run), [str(run / "checkpoints"), str(logs)])
    assert not run.exists() and not logs.exists()
    assert len(moved) == 2 and all(p.name.split(".replaced-")[0] in ("run", "elsewhere_logs") for p in moved)
    assert (moved[0] / "checkpoints" / "step_1" / RECIPE_STATE_FNAME).read_bytes() == b"state"
    assert (moved[1] / "log_1.txt").read_text() == "x"


def test_pruning_keeps_the_newest_and_the_best(tmp_path):
    root = make_checkpoints(tmp_path / "checkpoints", [2, 4, 6, 8, 10])
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(
        {"best_checkpoint": {"by": "code average", "path": "/moved/elsewhere/checkpoints/step_4"}}))
    best = best_checkpoint(tmp_path / "eval")
    assert best == "step_4"
    deleted = prune_checkpoints(str(root), 2, keep=best)
    assert sorted(p.name for p in deleted) == ["step_2", "step_6"]
    assert sorted(p.name for p in root.iterdir()) == ["step_10", "step_4", "step_8"]
    assert prune_checkpoints(str(root), None) == []
    assert prune_checkpoints(str(root), 1) == [root / "step_4", root / "step_8"]  # no best: only the newest
    assert best_checkpoint(tmp_path / "nothing") is None
