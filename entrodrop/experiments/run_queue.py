"""Many small training runs on one machine, as many at once as it holds: the scheduler of
`make reproduce` and of the demo's groups of runs.

Each job is one command (a `tune run`), started once the jobs it needs are done, at most
``parallel`` at a time: a slot takes the next job as soon as its run ends, so a slow run holds one
slot, not a whole group. A job that ends well is marked done (``<done>/<name>.done``) and skipped
by a later call that finds the mark, so a stopped queue resumes where it was; a job that starts
again has what its earlier attempt wrote removed first. The first job that fails stops new
starts; the runs already going finish, and the error names every failed job and its log.

How many at once (``runs_at_once``): on the CPU one run a core, each with one thread (on the demo's
tiny model two single-thread runs do 1.4 times the work of one run on two threads); on a GPU as
many as its memory and the CPU cores that feed it allow, since one tiny run leaves a GPU idle.
``RUN_ENV`` is the environment every run gets beside that.

``forked``: each slot runs its `tune run` jobs in forks of a process that imported the recipes'
modules once (``entrodrop.experiments.forked_runs``), not in fresh interpreters that import them again: 6 to 7 s
of a 100 s demo run on this CPU. Only on the CPU (see there).
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

# glibc returns a freed block above its mmap threshold to the kernel at once, and the next step's
# allocation of it faults fresh, zeroed pages back in, millions of page faults a demo run. Kept in
# the heap instead, a run spends a fraction of the system time and about a tenth less in all, with
# the same losses bit for bit: only where memory comes from changes (docs/performance.md, "The
# reproduction's runs, and why not faster").
RUN_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
# The GPU memory one run of a tiny model is given when choosing how many share a GPU: its CUDA
# context (about 0.5 GiB) and its tensors, with room to spare. An estimate, not a measurement.
GPU_MEMORY_PER_RUN = 2 << 30


def runs_at_once(device: str, cores: int, gpu_memory: Optional[int] = None) -> int:
    """How many runs of a tiny model to start at once: one a CPU core on the CPU; on a GPU (of
    ``gpu_memory`` bytes) as many as fit ``GPU_MEMORY_PER_RUN`` each, at most one a CPU core, whose
    Python drives the run.

    Example:
        >>> runs_at_once("cpu", 2), runs_at_once("cuda", 16, 80 << 30), runs_at_once("cuda", 16, 8 << 30)
        (2, 16, 4)
    """
    if device == "cpu":
        return max(1, cores)
    return max(1, min(cores, (gpu_memory or 0) // GPU_MEMORY_PER_RUN))


def cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Job:
    """One command of a queue.

    Args:
        name (str): unique in its queue; names its log and its done mark.
        argv (Callable[[], Sequence[str]]): the command, made when the job starts, so that it may
            read what a job it needs wrote (the baseline's proposed midpoint).
        outputs (Sequence[Path]): what the job writes, removed before it starts.
        after (Sequence[str]): the jobs that must be done before it starts.
    """

    name: str
    argv: Callable[[], Sequence[str]]
    outputs: Sequence[Path] = ()
    after: Sequence[str] = field(default_factory=tuple)


def is_tune_run(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a `tune run <recipe file>` on one process, which a forked run can run."""
    return len(argv) > 2 and os.path.basename(argv[0]) == "tune" and argv[1] == "run" and argv[2].endswith(".py")


def run_jobs(jobs: Sequence[Job], parallel: int, logs: Path, done: Path, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[Path] = None, on_done: Callable[[Job], None] = lambda job: None,
             forked: bool = False) -> List[str]:
    """Run ``jobs`` in order, at most ``parallel`` at once, each one's stderr in ``logs/<name>.log``
    and its done mark in ``done``; ``env``: the environment of each (None: this one's); ``on_done``
    is called (in the calling thread's stead, one at a time) after each that ends well; ``forked``:
    `tune run` jobs run in forks of a process that imported the recipes' modules (see the module docs).

    Returns:
        The names of the jobs this call ran (those marked done before are skipped).

    Raises:
        ValueError: two jobs of one name, or a job that needs one that is not in ``jobs``.
        SystemExit: a job failed (its status and log named, with the jobs not started because of it).
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"two jobs of one name in {names}")
    unknown = {dep for job in jobs for dep in job.after} - set(names)
    if unknown:
        raise ValueError(f"jobs need {sorted(unknown)}, which are not among the jobs {names}")
    logs.mkdir(parents=True, exist_ok=True)
    done.mkdir(parents=True, exist_ok=True)
    finished: Dict[str, threading.Event] = {name: threading.Event() for name in names}
    failed: Dict[str, str] = {}
    pending = [job for job in jobs if not (done / f"{job.name}.done").is_file()]
    for name in set(names) - {job.name for job in pending}:
        finished[name].set()
    ran: List[str] = []
    lock = threading.Lock()
    running: Dict[str, subprocess.Popen] = {}
    servers: Dict[int, subprocess.Popen] = {}  # a slot's fork server (entrodrop.experiments.forked_runs)
    job_env = None if env is None else dict(env)

    def run(job: Job) -> None:
        for dep in job.after:
            finished[dep].wait()
        with lock:
            blocked = [dep for dep in job.after if dep in failed]
            if failed:
                failed.setdefault(job.name, f"not started: {', '.join(blocked) or 'another job'} failed")
                return
        for path in job.outputs:
            shutil.rmtree(path, ignore_errors=True)
        argv, log = [str(a) for a in job.argv()], logs / f"{job.name}.log"
        if forked and is_tune_run(argv):
            server = servers.get(threading.get_ident())
            if server is None:
                server = subprocess.Popen([sys.executable, "-m", "entrodrop.experiments.forked_runs"], cwd=cwd, env=job_env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                servers[threading.get_ident()] = server
            with lock:
                running[job.name] = server
            server.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
            server.stdin.flush()
            status = server.stdout.readline().strip()  # "" when the fork server itself ended
            why = f"exit status {status}" if status else f"the fork server ended ({server.poll()})"
            why = None if status == "0" else why
        else:
            with log.open("w") as err:
                proc = subprocess.Popen(argv, cwd=cwd, env=job_env, stdout=subprocess.DEVNULL, stderr=err)
                with lock:
                    running[job.name] = proc
                status = proc.wait()
            why = f"exit status {status}" if status else None
        with lock:
            del running[job.name]
            if why:
                failed[job.name] = f"{why}, see {log}"
                return
            (done / f"{job.name}.done").write_text(" ".join(argv) + "\n")
            ran.append(job.name)
            on_done(job)

    def worker() -> None:
        while True:
            with lock:
                if not pending or failed:
                    return
                job = pending.pop(0)
            try:
                run(job)
            except Exception as error:  # making its command failed (a run it reads is unreadable): a failure like any
                with lock:
                    failed[job.name] = f"{type(error).__name__}: {error}"
            finally:
                finished[job.name].set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(parallel, len(pending))))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C: the runs started here end with this call
        with lock:
            for proc in running.values():
                proc.terminate()
        raise
    finally:
        for server in servers.values():
            server.stdin.close()  # a fork server ends when its input does
            server.wait()
    if failed:
        raise SystemExit("stopped: " + "; ".join(f"{name}: {why}" for name, why in failed.items()))
    return ran
