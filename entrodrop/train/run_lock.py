"""One live run per output directory: a lock that a run holds from its start to its end.

Two runs writing into one ``output_dir`` (a ``resume=True`` started while the run it resumes
still trains) write two logs, the same checkpoints, and evaluations out of order. So a run
takes ``output_dir/.run.lock`` (``entrodrop.dir_lock``) before it looks at the directory
(``entrodrop.train.run_dir``), and a second run is refused with one line naming the process
and host that hold it.

A run also writes where its config says outside ``output_dir``: its checkpoints
(``checkpointer.output_dir``) and its logs (``metric_logger.log_dir``). Two runs with two
``output_dir`` and one checkpoint directory would save into each other's ``step_<N>``, so each of
those directories that is not inside ``output_dir`` is locked the same way (``hold_run_dirs``).

The lock is no earlier run (``run_dir.earlier_run`` ignores it), and ``overwrite=True`` moves an
earlier run aside around it (``run_dir.move_aside``), so the run keeps holding it.
"""

from contextlib import ExitStack
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from omegaconf import DictConfig

from entrodrop.dir_lock import LOCK_NAME, take_dir_lock
from entrodrop.errors import OutputDirError

__all__ = ["LOCK_NAME", "hold_run_dir", "hold_run_dirs"]


def hold_run_dirs(cfg: DictConfig, rank: int = 0, distributed: bool = False) -> Optional[ExitStack]:
    """``hold_run_dir`` for a training config: its ``output_dir``, and the checkpoint and log
    directories it writes outside it (a metric logger that writes no local files has no
    ``log_dir``)."""
    return hold_run_dir(cfg.output_dir, rank, distributed, others={
        "checkpointer.output_dir": cfg.checkpointer.output_dir, "metric_logger.log_dir": cfg.metric_logger.get("log_dir")})


def hold_run_dir(output_dir: str, rank: int = 0, distributed: bool = False,
                 others: Optional[Mapping[str, Optional[str]]] = None) -> Optional[ExitStack]:
    """Take ``output_dir``'s lock (creating the directory), and that of each directory of
    ``others`` (config key: directory, None for none) not inside it, for as long as the returned
    stack stays open: keep it for the whole run. In an N-process run (``distributed``) rank 0 takes
    them for every rank (the others get None), and every rank raises its error, so none waits at a
    collective for a rank 0 that has stopped.

    Raises:
        OutputDirError: another live run holds a lock; one line with the directory's key, its PID and host.
    """
    held, error = None, None
    if rank == 0:
        try:
            held = _take_all(_to_lock(output_dir, others or {}))
        except OutputDirError as refused:
            error = refused
    if distributed:
        # Imported here: a process that takes the lock alone needs no torch (the tests start such processes).
        import torch.distributed as dist

        shared = [error]
        dist.broadcast_object_list(shared, src=0)
        error = shared[0]
    if error is not None:
        raise error
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


def _take_all(dirs: List[Tuple[str, Path]]) -> ExitStack:
    """Every lock of ``dirs``, or none: one that another run holds releases those taken before it."""
    with ExitStack() as stack:
        for key, directory in dirs:
            stack.enter_context(take_dir_lock(directory, key))
        return stack.pop_all()
