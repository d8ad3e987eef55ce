"""entrodrop.experiments.run_queue.py: jobs start in order once what they need is done, at most
``parallel`` at once, each done job is marked and skipped by the next call, and a failure stops new
starts and names the job and its log. The jobs are small Python commands that wait for files, never
for a time."""

import sys
import textwrap

import pytest

from entrodrop.experiments.run_queue import RUN_ENV, Job, run_jobs, runs_at_once

PY = sys.executable


def command(script: str, *args) -> callable:
    return lambda: [PY, "-c", textwrap.dedent(script), *map(str, args)]


# Each job marks itself running, records how many are running, waits until `release` exists or
# until `partner` has started too (a rendezvous of two running at once), then ends.
RUN = """
    import pathlib, sys, time
    root, name, partner = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    (root / "running" / name).touch()
    (root / "counts" / name).write_text(str(len(list((root / "running").iterdir()))))
    while partner != "-" and not (root / "started" / partner).exists() and not (root / "release").exists():
        (root / "started" / name).touch()
        time.sleep(0.01)  # polling a file: the event, not a time, ends the wait
    (root / "started" / name).touch()
    (root / "out" / name).write_text(name)
    (root / "running" / name).unlink()
"""


@pytest.fixture
def root(tmp_path):
    for folder in ("running", "counts", "started", "out"):
        (tmp_path / folder).mkdir()
    return tmp_path


def test_at_most_parallel_run_at_once_and_a_done_job_is_skipped_next_time(root):
    # a and b can only end once both have started: two run at once, or this never returns
    jobs = [Job("a", command(RUN, root, "a", "b")), Job("b", command(RUN, root, "b", "a")),
            Job("c", command(RUN, root, "c", "-")), Job("d", command(RUN, root, "d", "-"))]
    seen = []
    assert run_jobs(jobs, 2, root / "logs", root / "done", on_done=lambda job: seen.append(job.name)) == seen
    assert sorted(seen) == ["a", "b", "c", "d"]
    assert all(int((root / "counts" / name).read_text()) <= 2 for name in "abcd")
    assert sorted(p.name for p in (root / "done").iterdir()) == ["a.done", "b.done", "c.done", "d.done"]
    assert run_jobs(jobs, 2, root / "logs", root / "done") == []  # all marked done: nothing runs


def test_a_job_starts_only_after_the_jobs_it_needs_and_its_old_outputs_go_first(root):
    (root / "out" / "late").mkdir()
    (root / "out" / "late" / "stale").write_text("from a killed attempt")
    needs = """
        import pathlib, sys
        root = pathlib.Path(sys.argv[1])
        assert (root / "out" / "first").read_text() == "first", "ran before the job it needs"
        assert not (root / "out" / "late").exists(), "the earlier attempt's outputs are still there"
        (root / "out" / "late").mkdir()
    """
    jobs = [Job("late", command(needs, root), outputs=[root / "out" / "late"], after=("first",)),
            Job("first", command(RUN, root, "first", "-"))]
    assert run_jobs(jobs, 2, root / "logs", root / "done") == ["first", "late"]


def test_a_failure_stops_new_starts_names_the_job_and_its_log_and_a_rerun_runs_what_is_left(root):
    fail = "import sys; sys.stderr.write('no such file: data.bin\\n'); sys.exit(3)"
    jobs = [Job("bad", command(fail)), Job("after_bad", command(RUN, root, "after_bad", "-"), after=("bad",)),
            Job("later", command(RUN, root, "later", "-"))]
    with pytest.raises(SystemExit) as stopped:
        run_jobs(jobs, 1, root / "logs", root / "done")
    message = str(stopped.value)
    assert f"bad: exit status 3, see {root / 'logs' / 'bad.log'}" in message
    assert (root / "logs" / "bad.log").read_text() == "no such file: data.bin\n"
    assert not (root / "out" / "later").exists() and not (root / "out" / "after_bad").exists()
    jobs[0] = Job("bad", command("pass"))  # fixed
    assert run_jobs(jobs, 1, root / "logs", root / "done") == ["bad", "after_bad", "later"]


def test_jobs_that_cannot_run_are_refused_before_any_starts(root):
    with pytest.raises(ValueError, match="two jobs of one name"):
        run_jobs([Job("a", command("pass")), Job("a", command("pass"))], 1, root / "logs", root / "done")
    with pytest.raises(ValueError, match=r"jobs need \['ghost'\]"):
        run_jobs([Job("a", command("pass"), after=("ghost",))], 1, root / "logs", root / "done")
    assert not (root / "done").exists()


def test_how_many_runs_at_once_and_what_their_environment_adds():
    assert runs_at_once("cpu", 2) == 2 and runs_at_once("cpu", 0) == 1
    assert runs_at_once("cuda", 16, 139 << 30) == 16  # an H200: the CPU cores bound it
    assert runs_at_once("cuda", 16, 3 << 30) == 1
    assert set(RUN_ENV) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}


def test_a_job_whose_command_cannot_be_made_fails_like_one_that_exits_badly(root):
    def unreadable():
        raise FileNotFoundError("run directory baseline_seed0 does not exist")

    with pytest.raises(SystemExit, match="needs_it: FileNotFoundError: run directory baseline_seed0 does not exist"):
        run_jobs([Job("needs_it", unreadable), Job("next", command(RUN, root, "next", "-"))], 1, root / "logs",
                 root / "done")
    assert not (root / "out" / "next").exists() and not (root / "done" / "needs_it.done").exists()
