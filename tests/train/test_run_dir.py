"""What a run finds in its output directory (entrodrop.train.run_dir), as both training recipes
call it: earlier runs, a fresh start over them or moving them aside, resume (its config and
its stores), pruning checkpoints."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.data.fingerprints import store_key
from entrodrop.data.sample_store import sample_table, write_store
from entrodrop.data.store_identity import store_identities, training_stores
from entrodrop.errors import CheckpointError, ConfigError, EntroDropError, NoCheckpointError, OutputDirError
from entrodrop.eval.checkpoint_scoring import (
    checkpoint_progress,
    checkpoints_to_score,
    scorable_checkpoints,
)
from entrodrop.models.checkpointing import PROGRESS_FNAME, RECIPE_STATE_FNAME
from entrodrop.train.run_dir import (
    RunDir,
    best_checkpoint,
    clear_earlier_run,
    earlier_run,
    find_earlier_run,
    kept_checkpoint,
    move_aside,
    plain,
    processes_changed,
    prune_checkpoints,
    prune_to_newest_and_best,
    refuse_earlier_run,
    remove_killed_saves,
    resumable,
    resume_run,
    resume_state,
    saved_processes,
    saved_rng,
)
from entrodrop.train.run_lock import LOCK_NAME, hold_run_dir, hold_run_dirs


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


def test_pruning_can_keep_the_weights_for_an_offline_evaluation(tmp_path):
    root = make_checkpoints(tmp_path / "checkpoints", [2, 4, 6])
    for step in (2, 4, 6):
        (root / f"step_{step}" / "config.json").write_text("{}")
        (root / f"step_{step}" / "model.safetensors").write_bytes(b"weights")
    assert prune_checkpoints(str(root), 1, keep_weights=True) == [root / "step_2", root / "step_4"]
    assert [sorted(p.name for p in d.iterdir()) for d in sorted(root.iterdir())] == [
        ["config.json", "model.safetensors"], ["config.json", "model.safetensors"],
        ["config.json", "model.safetensors", RECIPE_STATE_FNAME]]
    assert prune_checkpoints(str(root), 1, keep_weights=True) == []  # nothing left to prune
    # all three are scored offline, in step order; training resumes only from the whole one
    assert scorable_checkpoints(str(root)) == [root / "step_2", root / "step_4", root / "step_6"]
    assert earlier_run(root, tmp_path / "logs", tmp_path / "eval") == [f"{root}: 1 checkpoint (step_6)"]


def whole_checkpoints(root, steps=(3, 12, 7)):
    """``step_<N>`` directories that hold a config and a weight file: whole checkpoints."""
    for step in steps:
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / "config.json").write_text("{}")
        (root / f"step_{step}" / "model.safetensors").write_bytes(b"w")


def test_scorable_checkpoints_name_every_incomplete_one(tmp_path):
    root = tmp_path / "checkpoints"
    whole_checkpoints(root)
    (root / ".step_20.tmp-x").mkdir()  # a save in progress is not a checkpoint
    assert [p.name for p in scorable_checkpoints(str(root))] == ["step_3", "step_7", "step_12"]
    assert scorable_checkpoints(str(root / "step_7")) == [root / "step_7"]  # one Hugging Face directory
    (root / "step_7" / "config.json").unlink()
    (root / "step_12" / "model.safetensors").unlink()
    with pytest.raises(EntroDropError, match="2 incomplete checkpoints") as error:
        scorable_checkpoints(str(root))
    assert f"{root / 'step_7'}: no config.json" in str(error.value)
    assert f"{root / 'step_12'}: no weight file" in str(error.value)
    assert isinstance(error.value, ValueError)
    with pytest.raises(EntroDropError, match="holds neither") as error:
        scorable_checkpoints(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        scorable_checkpoints(str(tmp_path / "nowhere"))
    assert isinstance(error.value, FileNotFoundError)


def test_a_checkpoint_says_where_in_training_it_was_saved(tmp_path):
    (tmp_path / "step_14").mkdir()
    assert checkpoint_progress(tmp_path / "step_14") == {"step": 14, "target_epoch": None}  # an older checkpoint
    (tmp_path / "step_14" / PROGRESS_FNAME).write_text(json.dumps({"step": 14, "target_epoch": 1.02}))
    assert checkpoint_progress(tmp_path / "step_14") == {"step": 14, "target_epoch": 1.02}
    assert checkpoint_progress(tmp_path) == {"step": None, "target_epoch": None}


def test_the_checkpoints_to_score_are_those_without_a_record_of_this_evaluation(tmp_path):
    root = tmp_path / "checkpoints"
    whole_checkpoints(root)
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    scored = {"tasks": {"t": {}}, "limit": None, "val_loss": {"all": 1.0}}
    (eval_dir / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 3, "checkpoint": "/moved/step_3", **scored},  # training's: the adapter scored it
        {"step": 7, "checkpoint": str(root / "step_7"), **scored, "backend": "hf", "max_gen_toks": 512},
        {"step": 12, "checkpoint": str(root / "step_12"), **scored, "limit": 16}]))
    ask = lambda backend, max_gen_toks=512: checkpoints_to_score(  # noqa: E731
        str(root), str(eval_dir), ["t"], None, True, backend, max_gen_toks)
    found, todo = ask("torchtune")
    assert found == [root / "step_3", root / "step_7", root / "step_12"]
    assert todo == [root / "step_7", root / "step_12"]  # step_7 was scored by hf, step_12 on 16 documents
    assert ask("hf")[1] == [root / "step_3", root / "step_12"]
    assert ask("hf", max_gen_toks=256)[1] == [root / "step_3", root / "step_7", root / "step_12"]
    # Nothing recorded yet: every checkpoint; one Hugging Face directory: itself.
    assert checkpoints_to_score(str(root), str(tmp_path / "none"), ["t"], None, True, "torchtune", 512)[1] == found
    assert checkpoints_to_score(str(root / "step_12"), str(eval_dir), ["t"], None, True, "hf", 512) == (
        [root / "step_12"], [root / "step_12"])


def test_a_run_that_failed_before_its_first_step_is_no_earlier_run(tmp_path):
    # What the metric logger leaves at set-up: an empty log file (and torchtune's copy of the
    # config, in output_dir, which may be the log directory too).
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "log_1700000000.txt").write_text("")
    (logs / "torchtune_config.yaml").write_text("seed: 0\n")
    assert earlier_run(tmp_path / "checkpoints", logs, tmp_path / "eval") == []
    (logs / "log_1700000000.txt").write_text("Step 1 | loss:1.0\n")
    assert earlier_run(tmp_path / "checkpoints", logs, tmp_path / "eval") == [f"{logs}: 1 log file"]


def whole_checkpoint(path: Path) -> Path:
    """A directory that holds all a resume reads: training state, config.json, weights."""
    path.mkdir(parents=True)
    for name, data in ((RECIPE_STATE_FNAME, b"state"), ("config.json", b"{}"), ("model.safetensors", b"w")):
        (path / name).write_bytes(data)
    return path


def test_what_a_killed_save_left_is_removed_and_a_set_aside_checkpoint_restored(tmp_path):
    root = tmp_path / "checkpoints"
    assert remove_killed_saves(root) == []
    make_checkpoints(root, [3, 6])
    (root / "step_3" / "model.safetensors").write_bytes(b"w")
    debris = [whole_checkpoint(root / ".step_9.tmp-a1b2c3d4"),  # a save killed before its rename
              whole_checkpoint(root / ".step_6.old"),  # killed after the new step_6 was in place
              whole_checkpoint(root / ".step_2.deleting")]  # a prune killed while deleting
    (root / ".step_12.tmp-x").mkdir()  # killed as the save began
    (root / ".step_8.old").mkdir()  # a set-aside step_8 deleted part way: nothing to restore
    (root / ".step_8.old" / "config.json").write_text("{}")
    whole_checkpoint(root / ".step_5.old")  # killed between the two renames: the only step_5
    (root / ".step_5.tmp-y").mkdir()  # ... and the new step_5 it was to replace it with
    (root / ".keep.tmp-z").mkdir()  # not a checkpoint's: left alone
    (root / "notes.txt").write_text("mine")
    assert not resumable(tmp_path / "nowhere") and resumable(root)
    done = remove_killed_saves(root)
    assert sorted(p.name for p in root.iterdir()) == [".keep.tmp-z", "notes.txt", "step_3", "step_5", "step_6"]
    assert (root / "step_5" / RECIPE_STATE_FNAME).read_bytes() == b"state"
    assert (root / "step_6" / RECIPE_STATE_FNAME).read_bytes() == b"state"  # the newer step_6 stays
    save, prune = "left by a save that was killed", "left by a pruning of old checkpoints that was killed"
    removed = [*debris[:2], root / ".step_12.tmp-x", root / ".step_8.old", root / ".step_5.tmp-y"]
    assert sorted(done) == sorted([f"removed {p}, {save}" for p in removed] + [
        f"removed {debris[2]}, {prune}",
        f"restored {root / 'step_5'} from {root / '.step_5.old'}, which a save that was killed had set aside"])
    assert remove_killed_saves(root) == []


def test_a_run_with_no_whole_checkpoint_is_not_resumable_and_resuming_it_says_what_to_do(tmp_path):
    root = tmp_path / "checkpoints"
    (root / ".step_10.tmp-x").mkdir(parents=True)  # the first save, killed
    assert not resumable(root)
    whole_checkpoint(root / ".step_10.old")  # a set-aside step_10 with none beside it: restorable
    assert resumable(root)

    found = [f"{tmp_path / 'logs'}: 1 log file"]
    with pytest.raises(FileExistsError) as error:
        refuse_earlier_run("out", found, resumable=False)
    message = str(error.value)
    assert isinstance(error.value, EntroDropError)
    assert message.startswith("output_dir=out holds an earlier run:\n  " + found[0])
    assert "resume=True" not in message, "resuming a run with no checkpoint fails"
    assert "cannot be resumed" in message and "overwrite=True" in message and "another output_dir" in message
    with pytest.raises(EntroDropError, match="Continue it with resume=True, write elsewhere with another output_dir, "
                                             "or set overwrite=True"):
        refuse_earlier_run("out", found, resumable=True)
    refuse_earlier_run("out", [], resumable=False)  # nothing there: nothing to refuse

    removed = [f"removed {root / '.step_10.tmp-x'}, left by a save that was killed"]
    with pytest.raises(FileNotFoundError) as error:
        resume_state(str(tmp_path / "empty"), {}, 10, [], found + removed)
    message = str(error.value)
    assert isinstance(error.value, EntroDropError)
    assert "holds no whole step_<N> checkpoint" in message and "cannot be resumed" in message
    assert f"\n  {found[0]}\n  {removed[0]}\n" in message
    assert "resume=False overwrite=True" in message and "another output_dir" in message
    with pytest.raises(EntroDropError, match="there is no earlier run here to resume: start it with resume=False$"):
        resume_state(str(tmp_path / "empty"), {}, 10, [], [])


def training_cfg(out: Path, **settings):
    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml")
    cfg.output_dir = str(out)
    for key, value in settings.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def save_state(cfg, step: int, processes: int = 0) -> Path:
    """A checkpoint directory holding only a recipe state, as a run with ``cfg`` saves it: the
    single-device recipe's (one generator state), or the distributed recipe's of ``processes``."""
    path = Path(cfg.checkpointer.output_dir) / f"step_{step}"
    path.mkdir(parents=True)
    rng = {"cpu": torch.get_rng_state(), "cuda": None}
    torch.save({"step": step, "config": plain(cfg), "rng": [rng] * processes if processes else rng},
               path / RECIPE_STATE_FNAME)
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


def test_ctrl_c_names_the_last_checkpoint_or_how_to_start_again(tmp_path):
    """What the one line printed on Ctrl-C says a training run kept (entrodrop.config.cli.reported)."""
    cfg = training_cfg(tmp_path / "run")
    assert kept_checkpoint(cfg) == "no checkpoint was written yet; run the same command again to start over"
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run" / "logs" / "log_1.txt").write_text("Step 1 | loss:1.0\n")
    assert kept_checkpoint(cfg) == ("no checkpoint was written yet, so the run cannot be resumed; run the same command "
                                    "with overwrite=True to start again (it moves what this run logged aside)")
    save_state(cfg, 2)
    save_state(cfg, 4)
    (tmp_path / "run" / "checkpoints" / ".step_6.tmp-x").mkdir()  # the save Ctrl-C stopped: not a checkpoint
    assert kept_checkpoint(cfg) == (f"the last checkpoint written is {tmp_path}/run/checkpoints/step_4; run the same "
                                    "command with resume=True to continue from it")


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


def test_the_run_lock_is_no_earlier_run_and_overwrite_leaves_it_held(tmp_path):
    cfg = training_cfg(tmp_path / "run", **{"metric_logger.log_dir": str(tmp_path / "run")})  # logs beside the lock
    with hold_run_dir(cfg.output_dir):
        assert find_earlier_run(cfg) == []
        save_state(cfg, 4)
        cfg.overwrite = True
        [line] = clear_earlier_run(cfg, find_earlier_run(cfg))
        [moved] = tmp_path.glob("run.replaced-*")
        assert line == f"overwrite=True: the earlier run was moved to {moved}"
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [LOCK_NAME]
        assert (moved / "checkpoints" / "step_4" / RECIPE_STATE_FNAME).is_file() and not (moved / LOCK_NAME).exists()
        with pytest.raises(OutputDirError, match="is in use by another run"):  # still held, in the same place
            hold_run_dir(cfg.output_dir)


def test_overwrite_leaves_the_lock_of_a_checkpoint_dir_outside_output_dir_held_where_it_is(tmp_path):
    cfg = training_cfg(tmp_path / "run", **{"checkpointer.output_dir": str(tmp_path / "checkpoints")})
    with hold_run_dirs(cfg):
        save_state(cfg, 4)
        cfg.overwrite = True
        clear_earlier_run(cfg, find_earlier_run(cfg))
        [moved] = tmp_path.glob("checkpoints.replaced-*")
        assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [LOCK_NAME]
        assert (moved / "step_4" / RECIPE_STATE_FNAME).is_file() and not (moved / LOCK_NAME).exists()
        with pytest.raises(OutputDirError, match=r"^checkpointer.output_dir=.* belongs to another run \(output_dir="
                                                 f"{tmp_path / 'run'}, training now: PID {os.getpid()} "):
            hold_run_dir(str(tmp_path / "other"), others={"checkpointer.output_dir": cfg.checkpointer.output_dir})


def test_a_damaged_recipe_state_is_named_with_the_newest_intact_checkpoint_and_nothing_is_touched(tmp_path):
    cfg = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10)
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in (2, 4, 6):
        save_state(cfg, step)
    for step in (4, 6):  # cut short, as a copy or a full disk leaves it
        state = checkpoints / f"step_{step}" / RECIPE_STATE_FNAME
        state.write_bytes(state.read_bytes()[:100])
    before = files_of(tmp_path)
    with pytest.raises(CheckpointError) as error:
        resume_run(cfg, plain(cfg), [], {})
    message = str(error.value)
    assert "\n" not in message and message.startswith(
        f"resume=True, but {checkpoints}/step_6/{RECIPE_STATE_FNAME} cannot be read (RuntimeError: ")
    assert (f"(mv {checkpoints}/step_6 {tmp_path}/run/step_6.damaged; mv {checkpoints}/step_4 "
            f"{tmp_path}/run/step_4.damaged), then resume=True continues from step_2, the newest intact checkpoint"
            ) in message
    assert files_of(tmp_path) == before  # nothing deleted, nothing moved
    for step in (4, 6):  # the user's move: the run resumes from step_2
        (checkpoints / f"step_{step}").rename(tmp_path / "run" / f"step_{step}.damaged")
    assert resume_run(cfg, plain(cfg), [], {})[1] == checkpoints / "step_2"
    (checkpoints / "step_2" / RECIPE_STATE_FNAME).write_bytes(b"")
    with pytest.raises(CheckpointError, match="no older checkpoint can be read either: start again with resume=False"):
        resume_run(cfg, plain(cfg), [], {})


def test_a_checkpoint_resumes_with_either_recipe_and_any_number_of_processes(tmp_path, caplog):
    # The data and the masks are drawn per global row, so a run saved by 2 processes (two nodes, or
    # one of two) goes on with 1, 2 or 4; each process takes the generators its rank saved, if any.
    cfg = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10)
    save_state(cfg, 2, processes=2)
    for world_size in (None, 2, 4):
        state, resume_dir = resume_run(cfg, plain(cfg), [], {}, world_size=world_size)
        assert resume_dir.name == "step_2"
    assert saved_processes(state) == 2 and saved_rng(state, 1) is state["rng"][1] and saved_rng(state, 2) is None
    assert processes_changed(state, resume_dir, 2) is None
    assert processes_changed(state, resume_dir, 1).startswith(
        f"{resume_dir} was saved by 2 processes; resuming with 1: the data and the drop masks go on as one run's")
    save_state(cfg, 4)  # the single-device recipe's: one generator state
    state, _ = resume_run(cfg, plain(cfg), [], {}, world_size=2)
    assert saved_processes(state) == 1 and saved_rng(state, 0) is state["rng"] and saved_rng(state, 1) is None


def test_resume_compares_what_the_stores_are_not_where_they_are(tiny_assets, tmp_path):
    """A checkpoint keeps its stores' identities: the same stores moved resume; another store
    under the path the checkpoint trained on (another working directory, a new tokenize run) is
    refused in one line naming its key; a checkpoint without identities compares the paths."""
    tokenizer = {"_component_": "entrodrop.models.qwen3.qwen3_tokenizer", "path": str(tiny_assets / "qwen3/vocab.json")}

    def store(path: Path, lengths) -> str:
        samples = [np.arange(1, n + 1, dtype=np.int32) for n in lengths]
        write_store(str(path), "tokens", store_key(tokenizer, {"data": "general"}, 256), samples, sample_table(samples), 2)
        return str(path)

    general = store(tmp_path / "data" / "general", [5, 3, 7])
    cfg = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10, **{"data.general_tokens": general})
    path = save_state(cfg, 2)
    state = torch.load(path / RECIPE_STATE_FNAME, weights_only=False)
    torch.save({**state, "stores": store_identities(training_stores(cfg))}, path / RECIPE_STATE_FNAME)

    moved = tmp_path / "moved" / "general"
    (tmp_path / "data").rename(tmp_path / "moved")
    resumed = training_cfg(tmp_path / "run", total_tokens=8 * 256 * 10, **{"data.general_tokens": str(moved)})
    assert resume_run(resumed, plain(resumed), [], {})[1] == path

    store(tmp_path / "data" / "general", [5, 3, 6])  # another store at the old path: one sample shorter
    with pytest.raises(ConfigError) as error:
        resume_run(cfg, plain(cfg), [], {})
    [line] = [line for line in str(error.value).splitlines() if "general" in line]
    assert line == (
        f"  data.general_tokens={general} is another store than the one the checkpoint trained on (then at {general}): "
        "num_tokens: 15 then, 14 now; its samples' token ids (table "
        f"{state_stores(path)['data.general_tokens']['identity']['table']} then, "
        f"{store_identities({'g': general})['g']['identity']['table']} now); set data.general_tokens to the store the "
        "checkpoint trained on")

    # A checkpoint saved without identities compares the paths, as before.
    save_state(cfg, 4)
    with pytest.raises(ConfigError, match=f"data.general_tokens: checkpoint has {general}, now {moved}"):
        resume_run(resumed, plain(resumed), [], {})
    assert resume_run(cfg, plain(cfg), [], {})[1].name == "step_4"


def state_stores(checkpoint: Path) -> dict:
    return torch.load(checkpoint / RECIPE_STATE_FNAME, weights_only=False)["stores"]


def test_overwrite_refuses_to_move_aside_a_folder_that_holds_what_the_run_reads(tmp_path):
    run, checkpoints = tmp_path / "run", tmp_path / "checkpoints"
    (run / "tokens" / "target").mkdir(parents=True)  # a store tokenized into the run's folder
    cfg = training_cfg(run, overwrite=True, **{"data.target_tokens": str(run / "tokens" / "target"),
                                               "checkpointer.output_dir": str(checkpoints)})
    base = save_state(cfg, 4)  # an earlier run's checkpoint, now the base model of this one
    cfg.checkpointer.checkpoint_dir = str(base)
    before = files_of(tmp_path)
    with pytest.raises(OutputDirError) as error:
        find_earlier_run(cfg)
    assert str(error.value) == (
        f"overwrite=True would move the earlier run aside, and with it what this run reads: checkpointer.checkpoint_dir="
        f"{base} is inside checkpointer.output_dir={checkpoints}; data.target_tokens={run / 'tokens' / 'target'} is "
        f"inside output_dir={run}. Nothing was moved: give this run another output_dir, one that holds none of its "
        "inputs")
    assert files_of(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "run"]
    cfg.checkpointer.checkpoint_dir = str(REPO / "assets" / "tiny" / "qwen3")
    cfg.data.target_tokens = str(tmp_path / "elsewhere")  # inputs outside what moves: it moves
    assert len(find_earlier_run(cfg)) == 1


# ------------------------------------------------- another run's folders: never written into, never moved

LIVE_RUN = """
import sys, time
from omegaconf import OmegaConf
from entrodrop.train.run_lock import hold_run_dirs
lock = hold_run_dirs(OmegaConf.load(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def other_run(tmp_path):
    """Another run in ``tmp_path/A`` that saved step_4: ``other_run(live)`` returns its config, and
    while ``live`` a second process holds its folders as a training run does until it ends."""
    holders = []

    def start(live: bool, **settings):
        cfg = training_cfg(tmp_path / "A", **settings)
        with hold_run_dirs(cfg):
            save_state(cfg, 4)
        if live:
            OmegaConf.save(cfg, tmp_path / "A.yaml")
            holders.append(subprocess.Popen([sys.executable, "-c", LIVE_RUN, str(tmp_path / "A.yaml")], cwd=REPO,
                                            stdout=subprocess.PIPE, text=True))
            assert holders[-1].stdout.readline() == "held\n"
        return cfg

    yield start
    for holder in holders:
        holder.kill()
        holder.communicate()


@pytest.mark.parametrize("live", [False, True], ids=["ended", "live"])
@pytest.mark.parametrize("key", ["checkpointer.output_dir", "metric_logger.log_dir"])
def test_a_folder_inside_another_runs_output_dir_is_refused_naming_that_run_and_nothing_is_moved(
        tmp_path, other_run, live, key):
    other_run(live)
    before = files_of(tmp_path / "A")
    cfg = training_cfg(tmp_path / "B", overwrite=True, **{key: str(tmp_path / "A" / "checkpoints")})
    with pytest.raises(OutputDirError) as refused:
        hold_run_dirs(cfg)
    state = (f"training now: PID {json.loads((tmp_path / 'A' / LOCK_NAME).read_text())['pid']} on host "
             if live else "ended)")
    assert str(refused.value).startswith(f"{key}={tmp_path / 'A' / 'checkpoints'} is inside {tmp_path / 'A'}, which "
                                         f"belongs to another run (output_dir={tmp_path / 'A'}, {state}")
    assert str(refused.value).endswith(". Nothing was moved or written: give this run an output_dir, "
                                       "checkpointer.output_dir and metric_logger.log_dir outside that run's folders")
    assert files_of(tmp_path / "A") == before and not (tmp_path / "B").exists()
    cfg.output_dir = str(tmp_path / "A" / "B")  # a run's output_dir inside another run's: the same
    with pytest.raises(OutputDirError, match=r"^output_dir=\S+/A/B is inside \S+/A, which belongs to another run"):
        hold_run_dirs(cfg)


@pytest.mark.parametrize("live", [False, True], ids=["ended", "live"])
def test_a_checkpoint_folder_another_run_wrote_outside_its_output_dir_is_refused_while_that_run_exists(
        tmp_path, other_run, live):
    other_run(live, **{"checkpointer.output_dir": str(tmp_path / "checkpoints")})
    cfg = training_cfg(tmp_path / "B", overwrite=True, **{"checkpointer.output_dir": str(tmp_path / "checkpoints")})
    with pytest.raises(OutputDirError, match=rf"^checkpointer.output_dir={tmp_path}/checkpoints belongs to another "
                                             rf"run \(output_dir={tmp_path}/A, {'training now' if live else 'ended'}"):
        hold_run_dirs(cfg)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [LOCK_NAME, "step_4"]
    if not live:  # that run's folder gone (moved or deleted by its user): the folder is free
        (tmp_path / "A").rename(tmp_path / "A.old")
        with hold_run_dirs(cfg):
            assert json.loads((tmp_path / "checkpoints" / LOCK_NAME).read_text())["run"] == str(tmp_path / "B")


def test_overwrite_never_moves_a_folder_that_holds_another_runs_folder(tmp_path, other_run):
    other_run(False, **{"checkpointer.output_dir": str(tmp_path / "B" / "from_A")})  # A's checkpoints inside B
    cfg = training_cfg(tmp_path / "B")
    with hold_run_dirs(cfg):
        save_state(cfg, 2)  # B's own earlier run
        before = files_of(tmp_path)
        cfg.overwrite = True
        with pytest.raises(OutputDirError) as refused:
            find_earlier_run(cfg)
        assert str(refused.value) == (
            f"overwrite=True would move another run's folder aside: output_dir={tmp_path / 'B'} holds "
            f"{tmp_path / 'B' / 'from_A'}, which belongs to another run (output_dir={tmp_path / 'A'}, ended). Nothing "
            "was moved: give this run an output_dir of its own")
        assert files_of(tmp_path) == before


def test_only_training_runs_locks_make_a_folder_anothers(tmp_path):
    """A lock that a token store's writer or a ``make demo`` call left above a run is no run's; a
    lock from before locks named their run is the run's whose folder holds it."""
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "h", "started": "t", "key": "make demo"}))
    with hold_run_dirs(training_cfg(tmp_path / "run")):
        pass
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "h", "started": "t"}))
    with pytest.raises(OutputDirError, match=rf"^output_dir={tmp_path}/old/run is inside {tmp_path}/old, which "
                                             rf"belongs to another run \(output_dir={tmp_path}/old, ended\)"):
        hold_run_dirs(training_cfg(tmp_path / "old" / "run"))
    with hold_run_dirs(training_cfg(tmp_path / "old")):  # its own folder: that run, resumed
        pass


@pytest.fixture
def group_of_one(tmp_path):
    """The locks' refusal goes to every rank (an all_reduce): a group of one process stands in for N."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_run_dir_opened_by_n_processes_waits_for_every_rank_and_lets_rank_0_alone_move_the_earlier_run(
        tmp_path, group_of_one):
    cfg = OmegaConf.create({"output_dir": str(tmp_path / "run"), "resume": False, "overwrite": True,
                            "checkpointer": {"output_dir": str(tmp_path / "run" / "checkpoints")},
                            "metric_logger": {"log_dir": str(tmp_path / "run" / "logs")},
                            "save_every_n_steps": 4, "keep_last_n_checkpoints": 1, "keep_pruned_weights": False})
    make_checkpoints(tmp_path / "run" / "checkpoints", [4])
    events = []
    rank_1 = RunDir(cfg, [], {}, rank=1, world_size=2, barrier=lambda: events.append("barrier"))
    assert rank_1.open({}) == (None, None) and events == ["barrier", "barrier"]
    assert (tmp_path / "run" / "checkpoints" / "step_4").is_dir()  # rank 1 looked and moved nothing
    rank_0 = RunDir(cfg, [], {}, rank=0, world_size=2, barrier=lambda: events.append("barrier"))
    assert rank_0.open({}) == (None, None)
    assert not (tmp_path / "run" / "checkpoints").exists() and list(tmp_path.glob("run.replaced-*"))
    assert [rank_0.should_save(step, 10, False, False) for step in (3, 4, 8, 10)] == [False, True, True, True]
    assert rank_0.should_save(5, 10, True, False) and rank_0.should_save(5, 10, False, True)
