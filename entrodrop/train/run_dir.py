"""What a training run finds in, and leaves in, its output directory.

A run writes checkpoints (``step_<N>``), logs and evaluations (``eval/evals.jsonl``,
``summary.json``). A second run into the same places with ``resume: False`` would overwrite
some checkpoints, keep others, and append to the evaluations, so ``earlier_run`` lists what
is there and the recipes refuse to start over it unless told to resume or to move it aside
(``move_aside``). ``prune_checkpoints`` keeps the disk bounded: the newest N checkpoints and
the best one, and optionally the weights of the others, for an offline evaluation
(``recipes/evaluate.py``; ``entrodrop.eval.checkpoint_scoring.scorable_checkpoints`` lists them) to score.
``remove_killed_saves`` clears what a save or a prune killed part way left, before a run goes
on in the directory.
"""

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from omegaconf import DictConfig, OmegaConf
from torchtune import utils

from entrodrop.data.loader import num_training_steps
from entrodrop.data.store_identity import store_changes, store_identities, training_stores
from entrodrop.errors import CheckpointError, ConfigError, NoCheckpointError, OutputDirError
from entrodrop.models.checkpointing import (
    CONFIG_KEY,
    RECIPE_STATE_FNAME,
    RNG_KEY,
    STEP_KEY,
    STORES_KEY,
    checkpoint_problem,
    latest_checkpoint,
)
from entrodrop.train.run_lock import LOCK_NAME, hold_run_dirs, others_folders, run_folders

# Files a logger writes before the first step: torchtune's copy of the config (written by
# log_config at set-up, and rewritten by every run). A run that failed before its first step
# leaves it and an empty log file, and no logged step: not an earlier run to protect. Nor is the
# run's lock (run_lock), where the logs are written into output_dir itself.
_NOT_A_LOGGED_STEP = ("torchtune_config.yaml", LOCK_NAME)

# What a kill during a save leaves in a checkpoint directory, by the step it was saving:
# .step_<N>.tmp-<x>   HFCheckpointer.save_checkpoint's checkpoint, not yet whole;
# .step_<N>.old       the step_<N> that _replace_dir set aside for a new one, deleted after;
# .step_<N>.deleting  a checkpoint prune_checkpoints was deleting.
_KILLED_SAVE = re.compile(r"\.(step_\d+)\.(tmp-.*|old|deleting)")

log = utils.get_logger("INFO")


def _steps(checkpoint_dir: Path) -> List[Path]:
    """The complete ``step_<N>`` checkpoints, oldest first."""
    found = [p for p in checkpoint_dir.glob("step_*")
             if p.name[5:].isdigit() and (p / RECIPE_STATE_FNAME).exists()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def earlier_run(checkpoint_dir: str, log_dir: str, eval_dir: str) -> List[str]:
    """What an earlier run left in these directories, one line each (empty: nothing).

    Example:
        >>> earlier_run("/nonexistent/checkpoints", "/nonexistent/logs", "/nonexistent/eval")
        []
    """
    found = []
    steps = _steps(Path(checkpoint_dir))
    if steps:
        span = steps[0].name if len(steps) == 1 else f"{steps[0].name} to {steps[-1].name}"
        found.append(f"{checkpoint_dir}: {len(steps)} checkpoint{'s' * (len(steps) > 1)} ({span})")
    logs = _logged(Path(log_dir))
    if logs:
        found.append(f"{log_dir}: {len(logs)} log file{'s' * (len(logs) > 1)}")
    evals = [p for p in (Path(eval_dir) / "evals.jsonl", Path(eval_dir) / "summary.json") if p.exists()]
    if evals:
        found.append(f"{eval_dir}: {', '.join(p.name for p in evals)}")
    return found


def _logged(log_dir: Path) -> List[Path]:
    """The files under ``log_dir`` that hold something a run logged: not empty, and not the copy
    of the config a logger writes at set-up, nor the run's lock (``_NOT_A_LOGGED_STEP``). A run
    that failed before its first step (a bad value found at the first forward pass) leaves none."""
    if not log_dir.is_dir():
        return []
    return sorted(p for p in log_dir.rglob("*")
                  if p.is_file() and p.name not in _NOT_A_LOGGED_STEP and p.stat().st_size > 0)


def refuse_earlier_run(output_dir: str, found: List[str], resumable: bool) -> None:
    """Raise if ``earlier_run`` found anything: name it and the ways out. ``resume=True`` is one
    only when the earlier run saved a whole checkpoint (``resumable``): a run killed in its first
    save leaves logs and no checkpoint, and resuming it fails."""
    if not found:
        return
    ways = ("Continue it with resume=True, write elsewhere with another output_dir, or set overwrite=True "
            "to move it aside" if resumable else
            "It cannot be resumed: it saved no whole checkpoint. Start again with overwrite=True (which moves it "
            "aside), or write elsewhere with another output_dir")
    raise OutputDirError(f"output_dir={output_dir} holds an earlier run:\n  " + "\n  ".join(found) + f"\n{ways}")


def _run_dirs(cfg: DictConfig) -> Tuple[str, str, Optional[str]]:
    """A training config's output directory, checkpoint directory and log directory (None for a
    metric logger that writes no local files)."""
    return cfg.output_dir, cfg.checkpointer.output_dir, cfg.metric_logger.get("log_dir")


def find_earlier_run(cfg: DictConfig) -> List[str]:
    """A run with ``resume: False`` looks at its directories: what an earlier run left there
    (``earlier_run``), once it may go on. Raises ``OutputDirError`` (``refuse_earlier_run``) if
    something is there and ``overwrite`` is False, or ``refuse_moving_inputs`` if it is True; reads,
    never writes, so that every process can look and a refused run touches nothing.
    """
    output_dir, checkpoints, log_dir = _run_dirs(cfg)
    found = earlier_run(checkpoints, log_dir or "", Path(output_dir) / "eval")
    if not cfg.overwrite:
        refuse_earlier_run(output_dir, found, resumable(checkpoints))
    elif found:
        refuse_moving_inputs(cfg)
        refuse_moving_others(cfg)
    return found


def refuse_moving_others(cfg: DictConfig) -> None:
    """Raise before ``overwrite=True`` moves a folder aside that holds another run's folder (a
    checkpoint or log folder it locked, ``entrodrop.train.run_lock.others_folders``): moved, that
    run's records would name folders that hold this run's files, or nothing."""
    theirs = others_folders(run_folders(cfg), Path(cfg.output_dir).resolve(), within=True)
    if theirs:
        raise OutputDirError(f"overwrite=True would move another run's folder aside: {'; '.join(theirs)}. Nothing "
                             "was moved: give this run an output_dir of its own")


def refuse_moving_inputs(cfg: DictConfig) -> None:
    """Raise before ``overwrite=True`` moves a folder aside (``clear_earlier_run``) that is, or holds,
    something the run reads: a token store, an entropy cache, the base checkpoint, tokenizer files
    (any config value naming an existing path, but the run's own output folders). Moved, the run
    fails on it, and the message it fails with says to write the store again, hours of tokenizing
    that one ``mv`` undoes."""
    values = dict(_leaves(plain(cfg)))
    outputs = ("output_dir", "checkpointer.output_dir", "metric_logger.log_dir")  # what move_aside moves
    folders = [(key, Path(os.path.abspath(values[key]))) for key in outputs if _existing(values.get(key))]
    folders += [(key, path.resolve()) for key, path in folders]
    inside = []
    for key, value in values.items():
        if key in outputs or not _existing(value):
            continue
        # Both spellings: a symlink inside the folder moves with it, a folder reached through one does too.
        spelt = (Path(os.path.abspath(value)), Path(value).resolve())
        folder = next((f for f, path in folders if any(p.is_relative_to(path) for p in spelt)), None)
        if folder:
            inside.append(f"{key}={value} is inside {folder}={values[folder]}")
    if inside:
        raise OutputDirError(f"overwrite=True would move the earlier run aside, and with it what this run reads: "
                             f"{'; '.join(inside)}. Nothing was moved: give this run another output_dir, one that "
                             "holds none of its inputs")


def _leaves(tree: Any, prefix: str = "") -> List[Tuple[str, Any]]:
    """``(dotted key, value)`` of every value in a plain config, lists included (``a.0``)."""
    items = tree.items() if isinstance(tree, Mapping) else enumerate(tree) if isinstance(tree, list) else None
    if items is None:
        return [(prefix[:-1], tree)]
    return [leaf for key, value in items for leaf in _leaves(value, f"{prefix}{key}.")]


def _existing(value: Any) -> bool:
    """Whether ``value`` is text that names an existing file or folder."""
    try:
        return isinstance(value, str) and bool(value) and Path(value).exists()
    except (OSError, ValueError):  # a name too long, a NUL: text, not a path
        return False


def clear_earlier_run(cfg: DictConfig, found: List[str]) -> List[str]:
    """Make way for a fresh run (``overwrite: True``): move the earlier run ``found`` aside
    (``move_aside``), and remove what killed saves left with no earlier run (nothing was moved);
    a line for the log each. One process does this, after every process has looked."""
    output_dir, checkpoints, log_dir = _run_dirs(cfg)
    done = []
    if found:
        moved = move_aside(output_dir, [checkpoints, log_dir] if log_dir else [checkpoints])
        done.append(f"overwrite=True: the earlier run was moved to {', '.join(map(str, moved))}")
    return done + remove_killed_saves(checkpoints)


def resume_run(cfg: DictConfig, config: Dict[str, Any], may_change: Sequence[str], added: Dict[str, Any],
               removed: Sequence[str] = (), world_size: Optional[int] = None,
               identities: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], Path]:
    """``resume_state`` for a training config (``resume: True``): its latest checkpoint's state
    and directory, once the config ``config`` (``plain(cfg)``) matches the checkpoint's but for
    ``may_change`` (keys ``added`` since take their values), and its step fits the budget
    (``num_training_steps``). ``removed`` is what ``remove_killed_saves`` removed first, named
    with the rest of the directory when there is no checkpoint to resume. ``world_size``: the
    processes of the distributed recipe resuming it, None for the single-device recipe; the
    checkpoint may have been written by either recipe, with any number of processes
    (``processes_changed`` says so in the log). ``identities``: the
    stores' (``entrodrop.data.training_stores``), as the run opened them; None reads them here."""
    output_dir, checkpoints, log_dir = _run_dirs(cfg)
    found = earlier_run(checkpoints, log_dir or "", Path(output_dir) / "eval") + list(removed)
    num_steps = num_training_steps(cfg.total_tokens, cfg.global_batch_size, cfg.data.seq_len)
    state, resume_dir = resume_state(checkpoints, config, num_steps, may_change, found, added,
                                     identities if identities is not None else store_identities(training_stores(cfg)))
    changed = processes_changed(state, resume_dir, world_size or 1)
    if changed:
        log.info(changed)
    return state, resume_dir


def saved_processes(state: Dict[str, Any]) -> int:
    """How many processes wrote the recipe state ``state``: the distributed recipe keeps one
    generator state per process (a list), the single-device recipe one (a mapping; a tensor before
    the CUDA state was saved)."""
    return len(state[RNG_KEY]) if isinstance(state[RNG_KEY], list) else 1


def saved_rng(state: Dict[str, Any], rank: int = 0) -> Optional[Dict[str, Any]]:
    """The generator state process ``rank`` resumes with: the one that rank saved; None for a rank
    the saving run did not have (it keeps what its seed gave it, ``training.set_seed``)."""
    saved = state[RNG_KEY]
    if isinstance(saved, list):
        return saved[rank] if rank < len(saved) else None
    return saved if rank == 0 else None


def processes_changed(state: Dict[str, Any], resume_dir: Path, processes: int) -> Optional[str]:
    """A line for the log when a run resumes on another number of processes than saved it (another
    recipe, or as many nodes again): what goes on as one run, and what starts anew."""
    saved = saved_processes(state)
    if saved == processes:
        return None
    return (f"{resume_dir} was saved by {saved} process{'es' if saved > 1 else ''}; resuming with {processes}: the data "
            "and the drop masks go on as one run's (drawn per global row), the global generators (hidden dropout, "
            "NEFTune's noise) of the processes the saving run did not have start from the seed")


def resume_state(checkpoint_dir: str, config: Dict[str, Any], num_steps: int,
                 may_change: Sequence[str], found: Sequence[str] = (),
                 added: Optional[Dict[str, Any]] = None,
                 stores: Optional[Mapping[str, Any]] = None) -> Tuple[Dict[str, Any], Path]:
    """The recipe state of the latest checkpoint and its directory, once the config it was
    trained with matches ``config`` (plain values) but for the keys under ``may_change``, and
    its step fits in a budget of ``num_steps``. One ``ConfigError`` names every difference.
    ``found`` is what the run directory holds besides (``earlier_run``'s lines, what
    ``remove_killed_saves`` removed), named when there is no checkpoint to resume.

    ``stores``: the identities of the stores the config names now (``store_identities``). A
    checkpoint that saved its own (``"stores"``) is compared store by store (``store_changes``),
    not path by path: a store that moved resumes, another store under the same path is refused.
    One saved without them compares the paths.

    The state is memory-mapped: the optimizer state is read only when it is loaded.
    """
    resume_dir = latest_checkpoint(checkpoint_dir)
    if resume_dir is None:
        raise NoCheckpointError(_nothing_to_resume(checkpoint_dir, found))
    state = _read_state(resume_dir)
    if isinstance(state, str):
        raise CheckpointError(_damaged_state(checkpoint_dir, resume_dir, state))
    if CONFIG_KEY not in state:
        raise ConfigError(f"{resume_dir} was written by an older version that kept no config: resume it with that one")
    saved_stores = state.get(STORES_KEY)
    if saved_stores is not None and stores is not None:
        problems = differences(state[CONFIG_KEY], config, [*may_change, *saved_stores], added=added)
        problems += store_changes(saved_stores, stores, may_change)
    else:
        problems = differences(state[CONFIG_KEY], config, may_change, added=added)
    if num_steps < state[STEP_KEY]:
        problems.append(f"total_tokens={config['total_tokens']} is {num_steps} steps, fewer than the "
                        f"{state[STEP_KEY]} the checkpoint has trained")
    if problems:
        raise ConfigError(f"resume=True, but {resume_dir} was trained with another config:\n  " + "\n  ".join(problems)
                          + "\nResume with the checkpoint's values, or start a new run in another output_dir. "
                          f"These may change on resume: {', '.join(may_change)}")
    return state, resume_dir


def _read_state(checkpoint: Path) -> Union[Dict[str, Any], str]:
    """``checkpoint``'s recipe state (memory-mapped), or why it cannot be read (a file cut short
    by a copy or a full disk fails to open: torch reads a zip file's directory at its end)."""
    try:
        return torch.load(checkpoint / RECIPE_STATE_FNAME, weights_only=False, mmap=True)
    except Exception as error:  # noqa: BLE001  (whatever torch or pickle raise, the file is unreadable)
        return " ".join(f"{type(error).__name__}: {error}".split())


def _damaged_state(checkpoint_dir: str, newest: Path, why: str) -> str:
    """What to do when the newest checkpoint's recipe state cannot be read: move the damaged
    checkpoints (it, and any newer than the newest intact one) out of ``checkpoint_dir`` and resume
    again, which continues from the newest intact one. Nothing is deleted or moved here: the
    damaged file may be the one a user can still copy again whole."""
    steps = list(reversed(_steps(Path(checkpoint_dir))))  # newest first
    damaged, intact = [newest], None
    for step in steps[steps.index(newest) + 1:]:
        if isinstance(_read_state(step), str):
            damaged.append(step)
        else:
            intact = step
            break
    move = "; ".join(f"mv {d} {Path(checkpoint_dir).parent / (d.name + '.damaged')}" for d in damaged)
    then = (f"then resume=True continues from {intact.name}, the newest intact checkpoint" if intact else
            "no older checkpoint can be read either: start again with resume=False overwrite=True (it moves this "
            "run aside)")
    return (f"resume=True, but {newest / RECIPE_STATE_FNAME} cannot be read ({why}): the checkpoint is damaged (a copy "
            f"cut short, a full disk), and nothing was changed. Copy it again whole if you have it; or move "
            f"{'it' if len(damaged) == 1 else 'the damaged ones'} out of {checkpoint_dir} ({move}), {then}")


def _nothing_to_resume(checkpoint_dir: str, found: Sequence[str]) -> str:
    """Why ``resume=True`` cannot go on with no whole checkpoint in ``checkpoint_dir``, and what to
    do: a run killed before its first whole save is started again, after moving it aside."""
    if not found:
        return (f"resume=True, but {checkpoint_dir} holds no step_<N> checkpoint, and there is no earlier run here "
                "to resume: start it with resume=False")
    return (f"resume=True, but {checkpoint_dir} holds no whole step_<N> checkpoint: the earlier run was stopped "
            "before its first save was complete, and cannot be resumed. Found:\n  " + "\n  ".join(found)
            + "\nStart it again with resume=False overwrite=True (which moves the earlier run aside), or with "
            "resume=False and another output_dir")


def remove_killed_saves(checkpoint_dir: str) -> List[str]:
    """Remove what saves and prunes killed part way left in ``checkpoint_dir`` (``_KILLED_SAVE``:
    hidden, so never resumed from, and at 8B a partial checkpoint of many GB); a line for the
    log per path.

    One of them is a whole checkpoint, and is kept: a ``.step_<N>.old`` with no ``step_<N>`` was
    set aside by a save killed between ``_replace_dir``'s two renames, and is the only copy of
    step N. It is renamed back to ``step_<N>``.

    Example:
        >>> remove_killed_saves("/nonexistent/checkpoints")
        []
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    done = []
    for path in sorted(root.iterdir()):
        match = _KILLED_SAVE.fullmatch(path.name)
        if not match:
            continue
        step = root / match.group(1)
        if _restorable(path):
            os.replace(path, step)
            done.append(f"restored {step} from {path}, which a save that was killed had set aside")
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        done.append(f"removed {path}, left by a "
                    f"{'pruning of old checkpoints' if match.group(2) == 'deleting' else 'save'} that was killed")
    return done


def _restorable(path: Path) -> bool:
    """Whether ``path`` is a ``.step_<N>.old`` that is the only copy of step N: no ``step_<N>``
    beside it, and it holds all a resume reads, the training state, config.json and every weight
    file (``_replace_dir`` deletes it file by file once the new ``step_<N>`` is in place)."""
    match = _KILLED_SAVE.fullmatch(path.name)
    return (match is not None and match.group(2) == "old" and not (path.parent / match.group(1)).exists()
            and (path / RECIPE_STATE_FNAME).is_file() and checkpoint_problem(path) is None)


def resumable(checkpoint_dir: str) -> bool:
    """Whether ``resume=True`` finds a checkpoint in ``checkpoint_dir``: a whole ``step_<N>``, or
    one that ``remove_killed_saves`` restores. A run killed in its first save has none."""
    root = Path(checkpoint_dir)
    return latest_checkpoint(checkpoint_dir) is not None or (
        root.is_dir() and any(_restorable(p) for p in root.iterdir()))


def kept_checkpoint(cfg: DictConfig) -> str:
    """What a training run stopped by Ctrl-C keeps and how to go on, for the one line the recipes
    print (``entrodrop.config.cli.reported``): its last whole checkpoint (a save that Ctrl-C stopped
    is none: saves are atomic) and ``resume=True``; with none, how to start again, as
    ``refuse_earlier_run`` will ask once the run has logged a step."""
    output_dir, checkpoints, log_dir = _run_dirs(cfg)
    last = latest_checkpoint(checkpoints)
    if last is not None:
        return f"the last checkpoint written is {last}; run the same command with resume=True to continue from it"
    if earlier_run(checkpoints, log_dir or "", Path(output_dir) / "eval"):
        return ("no checkpoint was written yet, so the run cannot be resumed; run the same command with "
                "overwrite=True to start again (it moves what this run logged aside)")
    return "no checkpoint was written yet; run the same command again to start over"


def move_aside(output_dir: str, paths: Sequence[str]) -> List[Path]:
    """Rename ``output_dir`` (and each of ``paths`` outside it) to ``<name>.replaced-<time>``;
    returns the new names. Nothing is deleted. The run's lock stays where it is (``_move``)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = Path(output_dir).resolve()
    targets = [root] + [Path(p).resolve() for p in paths
                        if Path(p).exists() and root not in Path(p).resolve().parents and Path(p).resolve() != root]
    moved = []
    for path in targets:
        if path.exists():
            new = path.with_name(f"{path.name}.replaced-{stamp}")
            _move(path, new)
            moved.append(new)
    return moved


def _move(path: Path, new: Path) -> None:
    """Rename ``path`` to ``new``; a directory holding the run's lock (``run_lock.LOCK_NAME``) keeps
    it: the rest moves entry by entry. Moved with the rest, the lock would leave ``path`` unlocked,
    and a second run could start there beside the one that holds it."""
    if not (path / LOCK_NAME).exists():
        os.replace(path, new)
        return
    new.mkdir()
    for entry in path.iterdir():
        if entry.name != LOCK_NAME:
            os.replace(entry, new / entry.name)


def best_checkpoint(eval_dir: str) -> Optional[str]:
    """The name (``step_<N>``) of the best checkpoint in ``summary.json``
    (``entrodrop.eval.records.record_evaluation``), or None. By name, so a run directory that
    was moved keeps its best checkpoint."""
    summary = Path(eval_dir) / "summary.json"
    if not summary.exists():
        return None
    best = json.loads(summary.read_text()).get("best_checkpoint")
    return Path(best["path"]).name if best else None


def prune_checkpoints(checkpoint_dir: str, keep_last_n: Optional[int], keep: Optional[str] = None,
                      keep_weights: bool = False) -> List[Path]:
    """Delete all but the newest ``keep_last_n`` checkpoints and the one named ``keep`` (the
    best); ``keep_last_n=None`` deletes nothing. With ``keep_weights`` only their training state
    (``recipe_state.pt``: the optimizer, two thirds of a checkpoint with AdamW) is deleted and the
    weights stay for ``scorable_checkpoints``. Returns what was pruned.

    A whole checkpoint goes in two moves: a rename to a hidden name (so a run killed while
    deleting never leaves a ``step_<N>`` that looks whole), then the removal.
    """
    if keep_last_n is None:
        return []
    steps = _steps(Path(checkpoint_dir))
    kept = {p.name for p in steps[-keep_last_n:]} | {keep}
    pruned = []
    for step in steps:
        if step.name in kept:
            continue
        if keep_weights:
            (step / RECIPE_STATE_FNAME).unlink()  # the weights stay whole: nothing to hide
        else:
            doomed = step.with_name(f".{step.name}.deleting")
            os.replace(step, doomed)
            shutil.rmtree(doomed)
        pruned.append(step)
    return pruned


def prune_to_newest_and_best(checkpoint_dir: str, eval_dir: str, keep_last_n: Optional[int],
                             keep_weights: bool) -> List[str]:
    """``prune_checkpoints``, keeping the newest ``keep_last_n`` and the best checkpoint by
    ``eval_dir``'s summary (``best_checkpoint``); a line for the log per checkpoint pruned. Run
    after the newest evaluation is recorded, so a new best never leaves the old one behind."""
    pruned = prune_checkpoints(checkpoint_dir, keep_last_n, keep=best_checkpoint(eval_dir), keep_weights=keep_weights)
    return [f"keep_last_n_checkpoints={keep_last_n}: pruned {old}" + (" to its weights" if keep_weights else "")
            for old in pruned]


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], may_change: Sequence[str],
                prefix: str = "", added: Optional[Mapping[str, Any]] = None) -> List[str]:
    """Keys whose values differ between two plain config dicts, except those under
    ``may_change`` (dotted keys); as ``"key: checkpoint has A, now B"`` lines. ``added`` maps a
    key that configs gained later to the value a saved config without it ran with.

    Example:
        >>> differences({"a": 1, "b": {"c": 2}, "log": 1}, {"a": 1, "b": {"c": 3}, "log": 5}, ["log"])
        ['b.c: checkpoint has 2, now 3']
        >>> differences({"a": 1}, {"a": 1, "new": "x"}, [], added={"new": "x"})
        []
    """
    lines, added = [], added or {}
    for key in sorted(set(saved) | set(current), key=str):
        path = f"{prefix}{key}"
        if path in may_change:
            continue
        old, new = saved.get(key, added.get(path, "<absent>")), current.get(key, "<absent>")
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            lines += differences(old, new, may_change, f"{path}.", added)
        elif old != new:
            lines.append(f"{path}: checkpoint has {old}, now {new}")
    return lines


def plain(cfg: DictConfig) -> Dict[str, Any]:
    """The config as plain, resolved Python values (what checkpoints keep)."""
    return OmegaConf.to_container(cfg, resolve=True)




def _no_barrier() -> None:
    """One process has no one to wait for."""


class RunDir:
    """A training run's folders, from its start to its last save: what a recipe opens, saves into
    and prunes. The functions above do the work; this holds what they need from the config, in
    the order a run calls them.

    ``open`` holds the folders (``hold_run_dirs``) and looks into them: a fresh run over an earlier
    one is refused, or moves it aside with ``overwrite=True``; a resumed run gets its latest
    checkpoint's state once its config matches. ``should_save`` says when a step is saved,
    ``save`` writes one with its recipe state, ``prune`` keeps the newest and the best. In an
    N-process run (``world_size`` given) every rank looks, rank 0 alone changes the folders, and
    ``barrier`` (``torch.distributed.barrier``) keeps the others from looking while it does, and
    ``shared`` (``entrodrop.train.parallel.every_node_sees``) refuses folders and stores that are not
    the same on every node, before any rank looks into them.
    """

    def __init__(self, cfg: DictConfig, may_change: Sequence[str], added: Dict[str, Any], rank: int = 0,
                 world_size: Optional[int] = None, barrier: Callable[[], None] = _no_barrier,
                 shared: Optional[Callable[[List[Tuple[str, Path]], Dict[str, Any]], None]] = None):
        self._cfg = cfg
        self.config = plain(cfg)  # saved with each checkpoint; a resumed run must match it
        self._may_change, self._added = may_change, added
        self._rank, self._world_size, self._barrier, self._shared = rank, world_size, barrier, shared
        self.output_dir = Path(cfg.output_dir)
        self.checkpoint_dir = Path(cfg.checkpointer.output_dir)
        self.eval_dir = self.output_dir / "eval"
        self._save_every = cfg.save_every_n_steps
        self._keep_last_n = cfg.keep_last_n_checkpoints
        self._keep_weights = cfg.keep_pruned_weights
        self._lock = None

    def open(self, identities: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], Optional[Path]]:
        """(recipe state, its checkpoint) to resume from, or (None, None) for a fresh run into
        folders that hold no earlier run (or whose earlier run was moved aside). The folders stay
        held until the process ends. What a killed save left (``remove_killed_saves``) is removed
        before a resume reads the folder; a refused run touches nothing. Every rank raises the same
        error. ``identities``: the run's stores (``entrodrop.data.training_stores``), which a resume
        compares with its checkpoint's."""
        # Kept to the end: one live run per output, checkpoint and log folder (rank 0 holds them for all).
        self._lock = hold_run_dirs(self._cfg, self._rank, distributed=self._world_size is not None)
        if self._shared:
            self._shared(run_folders(self._cfg), identities)
        if not self._cfg.resume:
            found = find_earlier_run(self._cfg)  # raises over an earlier run unless overwrite=True
            self._barrier()  # every rank has looked before rank 0 moves anything
            self._log(clear_earlier_run(self._cfg, found) if self._rank == 0 else [])
            self._barrier()
            return None, None
        removed = remove_killed_saves(str(self.checkpoint_dir)) if self._rank == 0 else []
        self._log(removed)
        self._barrier()  # a step_<N> restored from its .old is in place before any rank looks
        return resume_run(self._cfg, self.config, self._may_change, self._added, removed, self._world_size, identities)

    def should_save(self, step: int, num_steps: int, epoch_ended: bool, evaluated: bool) -> bool:
        """Whether ``step`` is saved: every ``save_every_n_steps``, at each target-epoch end (``recipes/evaluate.py``
        scores the saved checkpoints offline), at each evaluation (a record names a checkpoint), and at the last."""
        return step % self._save_every == 0 or epoch_ended or evaluated or step == num_steps

    def save(self, checkpointer, model_sd: Dict[str, Any], state: Dict[str, Any], target_epoch: float) -> Path:
        """Write the checkpoint ``step_<state[STEP_KEY]>``: the weights ``model_sd`` and the recipe
        state ``state``, with this run's config (``CONFIG_KEY``), atomically (``HFCheckpointer``)."""
        step = state[STEP_KEY]
        path = checkpointer.save_checkpoint({"model": model_sd}, f"step_{step}", {**state, CONFIG_KEY: self.config},
                                            {"step": step, "target_epoch": target_epoch})
        log.info(f"checkpoint: {path}")
        return path

    def prune(self) -> None:
        """Keep the newest ``keep_last_n_checkpoints`` and the best (``prune_to_newest_and_best``);
        run after the newest evaluation is recorded."""
        self._log(prune_to_newest_and_best(str(self.checkpoint_dir), str(self.eval_dir), self._keep_last_n,
                                           self._keep_weights))

    def saved_rng(self, state: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """This process's generator state in the resumed ``state`` (``saved_rng``)."""
        return saved_rng(state, self._rank)

    how_to_go_on = staticmethod(kept_checkpoint)  # what Ctrl-C kept and how to go on, for ``cli.parse``

    def _log(self, lines: Sequence[str]) -> None:
        for line in lines:
            log.info(line)
