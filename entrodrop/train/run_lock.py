"""One live run per output directory: a lock that a run holds from its start to its end.

Two runs writing into one ``output_dir`` (a ``resume=True`` started while the run it resumes
still trains) write two logs, the same checkpoints, and evaluations out of order. So a run
takes ``output_dir/.run.lock`` (``entrodrop.storage.files``) before it looks at the directory
(``entrodrop.train.run_dir``), and a second run is refused with one line naming the process
and host that hold it.

A run also writes where its config says outside ``output_dir``: its checkpoints
(``checkpointer.output_dir``) and its logs (``metric_logger.log_dir``). Two runs with two
``output_dir`` and one checkpoint directory would save into each other's ``step_<N>``, so each of
those directories that is not inside ``output_dir`` is locked the same way (``hold_run_dirs``).

Each lock names the run it belongs to (its ``output_dir``), and stays when the run ends. So a
run never writes into another run's folders, live or finished (``others_folders``): not into a
folder inside another run's ``output_dir``, nor into a checkpoint or log folder another run wrote
outside its own; and ``overwrite=True`` never moves one aside (``run_dir.refuse_moving_others``).

The lock is no earlier run (``run_dir.earlier_run`` ignores it), and ``overwrite=True`` moves an
earlier run aside around it (``run_dir.move_aside``), so the run keeps holding it.
"""

from contextlib import ExitStack
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig

from entrodrop.errors import OutputDirError
from entrodrop.storage.files import LOCK_NAME, live_holder, lock_record, refused_on_every_rank, take_dir_lock

__all__ = ["LOCK_NAME", "hold_run_dir", "hold_run_dirs", "others_folders", "run_folders", "run_owner"]


def _written_outside(cfg: DictConfig) -> Dict[str, Optional[str]]:
    """The folders a training config writes besides ``output_dir``, by key (None: a metric logger
    that writes no local files)."""
    return {"checkpointer.output_dir": cfg.checkpointer.output_dir, "metric_logger.log_dir": cfg.metric_logger.get("log_dir")}


def run_folders(cfg: DictConfig) -> List[Tuple[str, Path]]:
    """``(config key, directory)`` of each folder a training run writes and locks: its
    ``output_dir``, and its checkpoint and log directories where they are not inside it."""
    return _to_lock(cfg.output_dir, _written_outside(cfg))


def hold_run_dirs(cfg: DictConfig, rank: int = 0, distributed: bool = False) -> Optional[ExitStack]:
    """``hold_run_dir`` for a training config: its ``output_dir``, and the checkpoint and log
    directories it writes outside it (a metric logger that writes no local files has no
    ``log_dir``)."""
    return hold_run_dir(cfg.output_dir, rank, distributed, others=_written_outside(cfg))


def hold_run_dir(output_dir: str, rank: int = 0, distributed: bool = False,
                 others: Optional[Mapping[str, Optional[str]]] = None) -> Optional[ExitStack]:
    """Take ``output_dir``'s lock (creating the directory), and that of each directory of
    ``others`` (config key: directory, None for none) not inside it, for as long as the returned
    stack stays open: keep it for the whole run. In an N-process run (``distributed``) rank 0 takes
    them for every rank (the others get None), and every rank raises its error, so none waits at a
    collective for a rank 0 that has stopped.

    Raises:
        OutputDirError: another live run holds a lock; one line with the directory's key, its PID and
            host. Or a directory is another run's (``others_folders``); one line naming that run.
    """
    held, error = None, None
    if rank == 0:
        try:
            dirs = _to_lock(output_dir, others or {})
            run = Path(output_dir).resolve()
            theirs = others_folders(dirs, run)
            if theirs:
                raise OutputDirError(f"{theirs[0]}. Nothing was moved or written: give this run an output_dir, "
                                     "checkpointer.output_dir and metric_logger.log_dir outside that run's folders")
            held = _take_all(dirs, run)
        except OutputDirError as refused:
            error = refused
    refused_on_every_rank(error, distributed)
    return held


def _to_lock(output_dir: str, others: Mapping[str, Optional[str]]) -> List[Tuple[str, Path]]:
    """(key, directory) of each lock to take: ``output_dir``'s, then each of ``others`` that no
    earlier one holds already (it is, or is inside, a directory locked before it). One process
    cannot take one lock twice: a second ``flock`` of the same file would refuse the run itself."""
    found = [("output_dir", Path(output_dir))]
    for key, directory in others.items():
        if directory is None:
            continue
        path = Path(directory).resolve()
        if not any(held.resolve() == path or held.resolve() in path.parents for _, held in found):
            found.append((key, Path(directory)))
    return found


def _take_all(dirs: List[Tuple[str, Path]], run: Path) -> ExitStack:
    """Every lock of ``dirs``, marked as the run ``run``'s, or none: one that another run holds
    releases those taken before it."""
    with ExitStack() as stack:
        for key, directory in dirs:
            stack.enter_context(take_dir_lock(directory, key, mark={"run": str(run)}))
        return stack.pop_all()


def run_owner(lock: Path) -> Optional[Path]:
    """The ``output_dir`` of the training run whose lock file ``lock`` is, or None: no lock there,
    or the lock of something else (a token store being written, a ``make demo`` call). A lock from
    before locks named their run belongs to the run whose folder holds it."""
    record = lock_record(lock)
    if record is None or ("key" in record and "run" not in record):
        return None
    return Path(record["run"]) if "run" in record else lock.parent


def others_folders(dirs: Sequence[Tuple[str, Path]], run: Path, within: bool = False) -> List[str]:
    """A line for each ``(key, directory)`` of ``dirs`` that is another training run's than ``run``
    (an ``output_dir``, resolved): inside a folder that holds another run's lock, or a folder outside
    ``run`` whose own lock names another run whose ``output_dir`` still exists. ``within``: also
    each other run's lock inside the directories (what moving them aside would carry away). Each
    line names that run, and its PID and host while it lives."""
    ours = {Path(directory).resolve() for _, directory in dirs} | {run}
    lines = []
    for key, directory in dirs:
        path = Path(directory).resolve()
        owners = ((above, run_owner(above / LOCK_NAME)) for above in path.parents if above not in ours)
        where = next(((above, owner) for above, owner in owners if owner not in (None, run)), None)
        if where:
            lines.append(f"{key}={directory} is inside {where[0]}, which belongs to {_whose(where[0], where[1])}")
            continue
        named = (lock_record(path / LOCK_NAME) or {}).get("run")  # a lock from before locks named their run: ours
        if named and Path(named) != run and not path.is_relative_to(run) and Path(named).exists():
            lines.append(f"{key}={directory} belongs to {_whose(path, Path(named))}")
            continue
        if within and path.is_dir():
            held = [(lock.parent, run_owner(lock)) for lock in sorted(path.rglob(LOCK_NAME))
                    if lock.parent.resolve() not in ours]
            lines += [f"{key}={directory} holds {folder}, which belongs to {_whose(folder, owner)}"
                      for folder, owner in held if owner not in (None, run)]
    return lines


def _whose(folder: Path, owner: Path) -> str:
    """The run ``owner`` (an ``output_dir``) whose lock ``folder`` holds, in words: live or ended."""
    holder = live_holder(folder / LOCK_NAME)
    return f"another run (output_dir={owner}, " + (f"training now: {holder})" if holder else "ended)")
