"""The time limits of one job, written once for the two processes that keep them: the evaluation
(``code_runner.Harness``), which kills a harness that passes them, and the harness
(``code_harness.run_job``), which fails a candidate that passes them. Each side computes the same
figures from the job and its ``Limits`` (a dict in the harness), so each formula lives here alone.

A job's time, in order: the candidate's start and the program's load, ``startup_s`` each; then its
tests, ``timeout_s`` a test (``tests_s``), counted from the line the harness sends when they
begin (``pipes.TESTS_BEGIN``). The evaluation allows each of the two ``MARGIN_S`` more.
"""

# What a harness may take past its tests' deadline (closing the candidate, sending the result)
# before it is killed: a harness stuck in its own work (a test's, or building a value in C code
# that no signal interrupts) costs its tests' deadline and this, however long the work.
MARGIN_S = 2.0


def num_tests(job: dict) -> int:
    """A job's tests: one an input of a ``stdin`` or ``functional`` job; an ``asserts`` job's
    tests, which have no inputs, count as one.

    Example:
        >>> num_tests({"kind": "stdin", "inputs": ["1", "2"]}), num_tests({"kind": "asserts"})
        (2, 1)
    """
    return max(len(job.get("inputs", ())), 1)


def tests_s(job: dict, timeout_s: float) -> float:
    """What all of a job's tests may take, from their start: ``timeout_s`` a test (an ``asserts``
    job's, from the start of its tests to its last call's reply). The harness's deadline for the
    candidate, the evaluation's (``MARGIN_S`` more) for the harness, and how long a candidate that
    cannot start is tried again (``code_runner.Harness.run``).

    Example:
        >>> tests_s({"inputs": ["1", "2", "3"]}, 6.0), tests_s({}, 5.0)
        (18.0, 5.0)
    """
    return timeout_s * num_tests(job)


def until_tests_s(startup_s: float, harness_started: bool) -> float:
    """What the evaluation gives a harness to send ``TESTS_BEGIN``: the candidate's start and the
    program's load, ``startup_s`` each (the harness's reads of them), ``MARGIN_S``, and for a
    harness's first job its own start, ``startup_s`` more.

    Example:
        >>> until_tests_s(5.0, harness_started=True), until_tests_s(5.0, harness_started=False)
        (12.0, 17.0)
    """
    return 2 * startup_s + MARGIN_S + (0 if harness_started else startup_s)


def cpu_s(job: dict, startup_s: float, timeout_s: float) -> int:
    """The candidate's CPU-time limit (``RLIMIT_CPU``, whole seconds): its load and all its tests,
    rounded down, and a second more.

    Example:
        >>> cpu_s({"inputs": ["1", "2"]}, 5.0, 6.0)
        18
    """
    return int(startup_s + tests_s(job, timeout_s)) + 1


def left_for_a_test(timeout_s: float, tests_deadline: float, now: float) -> float:
    """One test's time: ``timeout_s``, or what is left of its job's tests' deadline, the less.

    Example:
        >>> left_for_a_test(6.0, tests_deadline=100.0, now=90.0), left_for_a_test(6.0, tests_deadline=100.0, now=97.5)
        (6.0, 2.5)
    """
    return min(timeout_s, tests_deadline - now)
