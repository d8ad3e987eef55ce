"""The trusted harness of ``entrodrop.sandbox.code_runner``: it holds the benchmark's
tests, never runs model-written code, and reaches the program only as remote calls to a
sandboxed candidate process (``sandbox_child``).

One harness process serves one worker of ``code_runner.run_all``: it reads jobs from the
evaluation, one JSON line each, and for each starts a fresh candidate (one process a problem,
serving all of its calls; the next one starts while this one runs) and answers with one line:

- ``stdin`` jobs (LiveCodeBench): each input goes to the candidate, its stdout comes back;
- ``functional`` jobs (LiveCodeBench): each argument list goes to the candidate, its return
  value comes back, checked here and passed on as it came (a returned tuple as a list);
- ``asserts`` jobs (HumanEval, MBPP): the benchmark's test code runs here, against remote calls
  to the program (``assertion_tests``); the expected values never leave this process.

The harness runs outside any sandbox, started as ``python -I -c code_runner.BOOT ROOT BASE``: it
imports its parts (``entrodrop.sandbox``'s modules) from the package under ``ROOT``. Only
``sandbox_child`` is shown to the candidate.
"""

import ctypes
import json
import os
import signal
import sys
import time

from entrodrop.sandbox.assertion_tests import run_asserts
from entrodrop.sandbox.candidates import Candidate, CandidateFailed, SandboxUnavailable, checked
from entrodrop.sandbox.deadlines import cpu_s, left_for_a_test, tests_s
from entrodrop.sandbox.pipes import OUTPUTS_LIMIT, TESTS_BEGIN, write_all
from entrodrop.sandbox.sandbox_child import encode
from entrodrop.sandbox.scratch import Scratch


def run_job(candidate: Candidate, job: dict, limits: dict, begin=lambda: None) -> dict:
    """One job against its candidate; the reply line's fields. ``begin()`` once the program is
    loaded: its tests' deadline, ``timeout_s`` a test, counts from then, for all they cost here
    too (a test gets ``timeout_s`` or what is left of that, the less: ``deadlines``)."""
    outputs, size = [], 0
    result = {"outputs": outputs, "error": None, "held": False, "sandbox": limits["mode"], "unavailable": None}
    try:
        ready = str(candidate.request({}, limits["startup_s"]))[:200]  # its ready line
        result["sandbox"] = f"{ready}; {candidate.scratch.describe(limits)}"
        # Assertion jobs are HumanEval's and MBPP's, the others LiveCodeBench's.
        prelude = "human-eval" if job["kind"] == "asserts" else "livecodebench"
        candidate.request({"op": "load", "code": job["code"], "prelude": prelude, "main": job["kind"] == "stdin",
                           "cpu_s": cpu_s(job, limits["startup_s"], limits["timeout_s"])}, limits["startup_s"])
        candidate.deadline = time.monotonic() + tests_s(job, limits["timeout_s"])
        begin()
        what = f"{limits['timeout_s']:.1f} s"
        if job["kind"] == "asserts":
            run_asserts(candidate, job)
            result["held"] = True
            return result
        for test in job["inputs"]:
            left = left_for_a_test(limits["timeout_s"], candidate.deadline, time.monotonic())
            if job["kind"] == "stdin":
                output = candidate.request({"op": "stdin", "input": test}, left, what)
                if type(output) is not str:
                    raise candidate.stop("its output is not text")
            else:  # functional: LiveCodeBench converts a returned tuple to a list
                message = {"op": "call", "name": job["func_name"], "args": [encode(a) for a in test], "kwargs": [],
                           "solution": True}
                output = candidate.request(message, left, what)
                # Passed on as it came once its shape is checked, neither built (sets of one hash nested
                # in each other cost the product of their sizes to build) nor encoded again (encoding
                # sorts a set's items by their JSON text, made again at every level: depth x size).
                checked(output, values=False)
                if output[0] == "tuple":
                    output = ["list", output[1]]
                elif output[0] == "namedtuple":  # a tuple too, to LiveCodeBench's isinstance
                    output = ["list", output[1][1]]
            size += len(json.dumps(output))  # as it travels: escapes included
            if size > OUTPUTS_LIMIT:
                raise candidate.stop(f"outputs over {OUTPUTS_LIMIT} bytes")
            outputs.append(output)
    except CandidateFailed as e:
        result["error"] = e.reason
    except SandboxUnavailable as e:
        result["error"] = result["unavailable"] = str(e)
    return result


def main() -> None:
    """Serve jobs from the evaluation: ``python -c BOOT ROOT BASE`` (see ``code_runner``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the evaluation
    # The protocol on private descriptors: what the tests print cannot garble a reply.
    jobs, replies = os.fdopen(os.dup(0), "rb"), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = open(os.devnull, "w")
    scratch = Scratch(sys.argv[2])
    spare = None

    def begin() -> None:
        write_all(replies, TESTS_BEGIN + b"\n", time.monotonic() + 60)

    for line in jobs:
        message = json.loads(line)
        limits = message["limits"]
        if spare is not None and spare.limits != limits:
            spare.close()
            spare = None
        candidate, spare = spare, None
        try:
            candidate = candidate or Candidate(limits, scratch)
            if message["spare"]:  # the next job's candidate starts now: its start overlaps this job
                spare = Candidate(limits, scratch)
            result = run_job(candidate, message["job"], limits, begin)
        except (SandboxUnavailable, OSError) as e:  # e.g. no bwrap: the evaluation stops, loudly
            why = f"cannot start a candidate: {e}"
            result = {"outputs": [], "error": why, "held": False, "sandbox": limits["mode"], "unavailable": why}
        finally:
            if candidate is not None:
                candidate.close()
        write_all(replies, (json.dumps(result) + "\n").encode(), time.monotonic() + 60)
    if spare is not None:
        spare.close()


if __name__ == "__main__":
    main()
