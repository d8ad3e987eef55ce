"""What both training recipes call from the library instead of keeping a copy each: the step
count, the output directory's fresh start and resume, pruning, and the metric fields of an
evaluation record."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from entrodrop.checkpointing import RECIPE_STATE_FNAME
from entrodrop.data.loader import num_training_steps, plan_budget
from entrodrop.errors import ConfigError, NoCheckpointError, OutputDirError
from entrodrop.eval.records import metric_fields
from entrodrop.train.run_dir import (
    clear_earlier_run,
    find_earlier_run,
    plain,
    prune_to_newest_and_best,
    resume_run,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("total_tokens, global_batch_size, seq_len", [(81920, 8, 256), (81919, 8, 256),
                                                                      (2048, 8, 256), (10**12, 512, 4096)])
def test_the_step_count_is_whole_global_batches_and_the_budget_uses_it(total_tokens, global_batch_size, seq_len):
    steps = num_training_steps(total_tokens, global_batch_size, seq_len)
    assert steps * global_batch_size * seq_len <= total_tokens < (steps + 1) * global_batch_size * seq_len
    budget = plan_budget(total_tokens, global_batch_size, seq_len, 0.6, 10**9, 10**13)
    assert budget.num_steps == steps


def test_metric_fields_flatten_a_record_and_mark_j0_at_the_evaluation_that_fixed_it():
    j0 = {"target_epoch": 0.75, "step": 9, "fixed_at_step": 15}
    record = {"step": 15, "target_epoch": 1.25, "checkpoint": "run/checkpoints/step_15",
              "val_loss": {"all": 2.3, "low": 2.0, "high": 2.6}, "groups": {"code": 0.25, "general": 0.5},
              "tasks": {"t": {"acc,none": 0.25}}, "signal": {"gate_agreement": 0.9, "rank_correlation": 0.8},
              "auto_midpoint": j0}
    assert metric_fields(record) == {
        "val_loss_all": 2.3, "val_loss_low": 2.0, "val_loss_high": 2.6, "code_average": 0.25, "general_average": 0.5,
        "signal_gate_agreement": 0.9, "signal_rank_correlation": 0.8, "midpoint_epoch": 0.75, "midpoint_step": 9}
    later = {**record, "step": 18}  # every later record carries j0; the log marks it once
    assert "midpoint_epoch" not in metric_fields(later) and "midpoint_step" not in metric_fields(later)
    not_fixed = {"step": 3, "target_epoch": 0.25, "val_loss": {"all": 3.0}, "auto_midpoint": None}
    assert metric_fields(not_fixed) == {"val_loss_all": 3.0}
    assert metric_fields({"step": 3, "target_epoch": 0.25, "groups": {"code": 0.5}}) == {"code_average": 0.5}


def training_cfg(out: Path, **settings):
    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml")
    cfg.output_dir = str(out)
    for key, value in settings.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def save_state(cfg, step: int) -> Path:
    """A checkpoint directory holding only a recipe state, as a run with ``cfg`` saves it."""
    path = Path(cfg.checkpointer.output_dir) / f"step_{step}"
    path.mkdir(parents=True)
    torch.save({"step": step, "config": plain(cfg)}, path / RECIPE_STATE_FNAME)
    return path


def files_of(root: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_a_fresh_run_over_an_earlier_one_is_refused_untouched_or_moves_it_aside(tmp_path):
    cfg = training_cfg(tmp_path / "run")
    assert find_earlier_run(cfg) == [] and clear_earlier_run(cfg, []) == []
    save_state(cfg, 4)
    (tmp_path / "run" / "logs").mkdir()
    (tmp_path / "run" / "logs" / "log_1.txt").write_text("Step 1 | loss:1.0\n")
    before = files_of(tmp_path)
    with pytest.raises(OutputDirError, match=r"holds an earlier run:\n  .*1 checkpoint \(step_4\)\n  .*1 log file"):
        find_earlier_run(cfg)
    assert files_of(tmp_path) == before
    cfg.overwrite = True
    found = find_earlier_run(cfg)
    assert len(found) == 2 and files_of(tmp_path) == before  # looking writes nothing
    (tmp_path / "run" / "checkpoints" / ".step_6.tmp-x").mkdir()  # a killed save: moved with the rest
    [line] = clear_earlier_run(cfg, found)
    [moved] = tmp_path.glob("run.replaced-*")
    assert line == f"overwrite=True: the earlier run was moved to {moved}"
    assert not (tmp_path / "run").exists() and (moved / "checkpoints" / "step_4" / RECIPE_STATE_FNAME).is_file()


def test_resume_counts_the_budget_in_steps_and_names_what_a_killed_save_left(tmp_path):
    cfg = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10)  # 10 steps
    removed = [f"removed {tmp_path}/run/checkpoints/.step_2.tmp-x, left by a save that was killed"]
    with pytest.raises(NoCheckpointError) as error:
        resume_run(cfg, plain(cfg), [], {}, removed)
    assert removed[0] in str(error.value)
    path = save_state(cfg, 10)
    state, resume_dir = resume_run(cfg, plain(cfg), [], {})
    assert resume_dir == path and state["step"] == 10
    shorter = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10 - 1)  # 9 steps
    with pytest.raises(ConfigError, match="total_tokens=20479 is 9 steps, fewer than the 10 the checkpoint"):
        resume_run(shorter, plain(shorter), ["total_tokens"], {})


def test_pruning_keeps_the_newest_and_the_best_and_says_what_it_pruned(tmp_path):
    cfg = training_cfg(tmp_path / "run")
    for step in (2, 4, 6, 8):
        save_state(cfg, step)
    eval_dir = tmp_path / "run" / "eval"
    eval_dir.mkdir()
    (eval_dir / "summary.json").write_text(json.dumps({"best_checkpoint": {"path": "elsewhere/step_4"}}))
    checkpoints = cfg.checkpointer.output_dir
    lines = prune_to_newest_and_best(checkpoints, eval_dir, 1, keep_weights=True)
    assert lines == [f"keep_last_n_checkpoints=1: pruned {checkpoints}/step_{s} to its weights" for s in (2, 6)]
    assert sorted(p.name for p in Path(checkpoints).iterdir()) == ["step_2", "step_4", "step_6", "step_8"]
    assert not (Path(checkpoints) / "step_2" / RECIPE_STATE_FNAME).exists()
    save_state(cfg, 10)
    lines = prune_to_newest_and_best(checkpoints, eval_dir, 1, keep_weights=False)
    assert lines == [f"keep_last_n_checkpoints=1: pruned {checkpoints}/step_8"]
    assert not (Path(checkpoints) / "step_8").exists() and (Path(checkpoints) / "step_4").is_dir()
    assert prune_to_newest_and_best(checkpoints, eval_dir, None, keep_weights=False) == []
