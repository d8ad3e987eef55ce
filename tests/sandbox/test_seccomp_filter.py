"""The code sandbox's seccomp filter (entrodrop.sandbox.sandbox_child.seccomp_program): its
allow-list, read as the kernel runs it, and the system calls that name another process. A
hostile program aims each of those at its parent (without bubblewrap, the harness; inside it the
program is its PID namespace's init, whose parent is out of sight: ``getppid()`` is 0) and at
another problem's running candidate (same user, same sandbox), given its pid on stdin: each
call must be refused, both processes left as they were, and the harness must run the next
program: one that got through could stop the harness, kill the next problem's candidate or keep
the next one from starting. Every program runs under bubblewrap (skipped where it cannot run
here) and under the own layer."""

import os
import socket
import tempfile

import pytest
from conftest import descendants, usable_sandbox
from sandbox_helpers import ATTEMPT, GOOD, candidate_running, good_passes, loaded

from entrodrop.sandbox import sandbox_child as child
from entrodrop.sandbox.code_runner import Harness, Limits

PROGRAM = ATTEMPT + """
import ctypes, fcntl, resource, struct
libc = ctypes.CDLL(None, use_errno=True)
NUMBERS = {"x86_64": {"ioprio_set": 251, "sched_setattr": 314}, "aarch64": {"ioprio_set": 30, "sched_setattr": 274}}
def syscall(name, *args):
    if libc.syscall(NUMBERS[os.uname().machine][name], *args) < 0:
        raise OSError(ctypes.get_errno(), name)
victim = int(input())
for pid in (os.getppid() or victim, victim):  # no parent in sight (the init of a PID namespace): the victim twice
"""
# Each names another process (``pid``); a correct program's calls on its own process stay allowed.
AIMED = {
    "prlimit64": ["resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))",
                  "resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))"],
    "setpriority": ["os.setpriority(os.PRIO_PROCESS, pid, 19)", "os.setpriority(os.PRIO_PGRP, pid, 19)"],
    "scheduling": ["os.sched_setaffinity(pid, {0})", "os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))",
                   "os.sched_setparam(pid, os.sched_param(0))",
                   "syscall('sched_setattr', pid, struct.pack('IIQiIQQQ', 48, os.SCHED_BATCH, 0, 19, 0, 0, 0, 0), 0)"],
    "ioprio_set": ["syscall('ioprio_set', 1, pid, 3 << 13)", "syscall('ioprio_set', 2, pid, 3 << 13)"],  # process, group: idle
    # On I/O, SIGIO (default: terminate), or the signal F_SETSIG names, goes to the descriptor's owner.
    "signal owner": ["fcntl.fcntl(r, fcntl.F_SETOWN, pid)", "fcntl.fcntl(r, 15, struct.pack('ii', 1, pid))",  # F_SETOWN_EX
                     "fcntl.fcntl(r, 10, 9)",  # F_SETSIG: SIGKILL
                     "fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)",
                     "fcntl.ioctl(a, 0x8901, struct.pack('i', pid))", "fcntl.ioctl(a, 0x8902, struct.pack('i', pid))",
                     "fcntl.ioctl(a, 0x5452, struct.pack('i', 1))"],  # FIOSETOWN, SIOCSPGRP, FIOASYNC
}
OPEN_AND_WRITE = ("    r, w = os.pipe()\n    a, b = socket.socketpair()\n", "    os.write(w, b'x')\n    b.send(b'x')\n")
SLEEPER = {"kind": "stdin", "code": "import time\ntime.sleep(60)", "inputs": [""]}


def hostile_program(calls: str) -> str:
    before, after = OPEN_AND_WRITE if calls == "signal owner" else ("", "")
    return PROGRAM + before + f"    print({', '.join(f'attempt(lambda: {c})' for c in AIMED[calls])}, end=' ')\n" + after


def state(pid: int) -> tuple:
    """What the calls above would change in process ``pid`` (its limits read from /proc: root
    here may lack CAP_SYS_RESOURCE, which ``prlimit`` on another user's process needs)."""
    with open(f"/proc/{pid}/limits") as f:
        limits = f.read()
    return limits, os.getpriority(os.PRIO_PROCESS, pid), os.sched_getaffinity(pid), os.sched_getscheduler(pid)


@pytest.fixture(scope="module", params=["bubblewrap", "own"])
def layer(request) -> str:
    """The ``sandbox`` fixture, for the whole module: the sleeper below serves every test."""
    return usable_sandbox(request.param)


@pytest.fixture(scope="module")
def sleeper(layer):
    """Another problem's candidate, sleeping in its sandbox through this module's tests: (its
    harness, its pid)."""
    with candidate_running(SLEEPER, Limits(timeout_s=60, sandbox=layer)) as harness:
        # under bubblewrap, below bwrap's outer process, which holds no CPU limit
        yield harness, next(pid for pid in descendants(harness.process.pid) if loaded(pid))


@pytest.mark.parametrize("calls", list(AIMED))
def test_no_call_reaches_another_process(layer, sleeper, calls):
    other, victim = sleeper
    limits = Limits(timeout_s=2.0, sandbox=layer)
    harness = Harness(layer)
    try:
        before = state(harness.process.pid), state(victim)
        hostile = harness.run({"kind": "stdin", "code": hostile_program(calls), "inputs": [f"{victim}\n"]}, limits,
                              spare=True)
        assert (state(harness.process.pid), state(victim)) == before
        assert other.process.poll() is None and victim in descendants(other.process.pid)  # the other candidate runs on
        after = harness.run(GOOD, limits, spare=False)  # the same harness starts and runs the next program
    finally:
        harness.close()
    assert hostile.error is None and set(hostile.outputs[0].split()) == {"refused"}, hostile
    assert good_passes(after), after


def test_no_datagram_reaches_a_socket_outside(layer):
    """A socketpair's datagram socket may send to any address: no address, no new peer, no
    descriptor sent out."""
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o755)  # whoever the candidate runs as may reach the socket and write to it
        servers = []
        for address in (os.path.join(directory, "outside.sock"), f"\0entrodrop-datagram-{os.getpid()}"):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            server.bind(address)
            server.setblocking(False)
            servers.append(server)
        os.chmod(servers[0].getsockname(), 0o777)
        program = ATTEMPT + "import array\na, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n" + "".join(
            f"address = {server.getsockname()!r}\n"
            "print(attempt(lambda: a.sendto(b'x', address)),"
            " attempt(lambda: a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0]))], 0, address)),"
            " attempt(lambda: (a.connect(address), a.send(b'x'))), end=' ')\n" for server in servers)
        harness = Harness(layer)
        try:
            result = harness.run({"kind": "stdin", "code": program, "inputs": [""]}, Limits(sandbox=layer), spare=False)
            assert result.outputs == ["refused " * 6], result
            for server in servers:
                with pytest.raises(BlockingIOError):  # nothing arrived
                    server.recv(16)
        finally:
            harness.close()
            for server in servers:
                server.close()


def test_a_correct_programs_own_calls_still_work(layer):
    """What the filter allows on the program's own process: threads (with a big stack, as
    competitive programs start them), its own limits, priority and CPUs, asyncio's socketpair."""
    program = """
import asyncio, os, resource, socket, threading
resource.setrlimit(resource.RLIMIT_STACK, resource.getrlimit(resource.RLIMIT_STACK))
resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
os.nice(1)
os.sched_setaffinity(0, os.sched_getaffinity(0))
os.sched_setaffinity(os.getpid(), os.sched_getaffinity(os.getpid()))
threading.stack_size(64 << 20)
done = []
thread = threading.Thread(target=lambda: done.append(sum(map(int, input().split()))))
thread.start()
thread.join()
a, b = socket.socketpair()
a.send(b"x")
assert b.recv(1) == b"x"
asyncio.run(asyncio.sleep(0))
print(done[0])
"""
    harness = Harness(layer)
    try:
        result = harness.run({**GOOD, "code": program}, Limits(sandbox=layer), spare=False)
    finally:
        harness.close()
    assert good_passes(result), result


def test_a_call_off_the_list_fails_as_on_a_kernel_without_it(layer):
    """Deny by default: setsid and getxattr are on no list, and answer ENOSYS."""
    program = ("import errno, os\nanswers = []\nfor call in (os.setsid, lambda: os.getxattr('.', 'user.x')):\n"
               "    try:\n        call()\n        answers.append('reached')\n"
               "    except OSError as e:\n        answers.append(errno.errorcode[e.errno])\nprint(*answers)")
    harness = Harness(layer)
    try:
        result = harness.run({"kind": "stdin", "code": program, "inputs": [""]}, Limits(sandbox=layer), spare=False)
    finally:
        harness.close()
    assert result.outputs == ["ENOSYS ENOSYS\n"], result


# ------------------------------------------------------------------ the filter itself, run here

def decide(program: list, number: int, args=(0,) * 6, arch: int = 0xC000003E) -> str:
    """What the kernel would answer ``program`` for one call: the classic BPF it runs, read
    instruction by instruction (loads of struct seccomp_data, jumps, returns)."""
    data = {child.NR: number, child.ARCH: arch, **{child.ARG0 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}}
    names = {child.ALLOW: "allow", child.EPERM: "EPERM", child.ENOSYS: "ENOSYS", child.KILL: "kill"}
    pc, accumulator = 0, None
    while True:
        code, jt, jf, k = program[pc]
        if code == child.RET:
            return names[k]
        if code == child.LD:
            accumulator, pc = data[k], pc + 1
            continue
        taken = {child.JEQ: accumulator == k, child.JGE: accumulator >= k, child.JSET: accumulator & k != 0}[code]
        pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", list(child.MACHINES))
def test_the_filter_allows_its_list_and_refuses_every_other_call(machine):
    column, arch = child.MACHINES[machine]
    program = child.seccomp_program(machine, own_pid=2)
    number = {name: numbers[column] for name, numbers in {**child.SYSCALLS, **child.ALLOWED}.items()}
    for name in child.ALLOWED:
        if number[name] is not None:
            assert decide(program, number[name], arch=arch) == "allow", name
    for name in child.REFUSED:
        if number[name] is not None:
            assert decide(program, number[name], arch=arch) == "EPERM", name
    known = {n for n in number.values() if n is not None}
    assert all(decide(program, n, arch=arch) == "ENOSYS" for n in range(500) if n not in known)  # setsid, getxattr...
    on = {"kill": [(2, 0), (1, 9), (0, 9), (-1 & 0xFFFFFFFF, 9), (2, 9), (2, 19), (2, 15)], "prlimit64": [(0,), (2,), (1,)],
          "setpriority": [(0, 0), (0, 2), (0, 1), (2, 0)], "sched_setaffinity": [(0,), (2,), (1,)],
          "sendto": [(3, 0, 1, 0, 0, 0), (3, 0, 1, 0, 0x7F0000000000, 16)],
          "fcntl": [(3, 1), (3, 4, 0x800), (3, child.F_SETOWN), (3, child.F_SETFL, child.O_ASYNC), (3, child.F_SETSIG)],
          "ioctl": [(0, 0x5401), (0, child.FIOSETOWN)], "clone": [(0x3D0F00,), (0x1200011,)]}
    answers = {name: [decide(program, number[name], args + (0,) * (6 - len(args)), arch) for args in calls]
               for name, calls in on.items()}
    # SIGKILL and SIGSTOP to itself end it: as bubblewrap's init it would ignore them (one verdict on both layers)
    assert answers == {"kill": ["allow", "EPERM", "EPERM", "EPERM", "kill", "kill", "allow"],
                       "prlimit64": ["allow", "allow", "EPERM"],
                       "setpriority": ["allow", "allow", "EPERM", "EPERM"], "sched_setaffinity": ["allow", "allow", "EPERM"],
                       "sendto": ["allow", "EPERM"], "fcntl": ["allow", "allow", "EPERM", "EPERM", "EPERM"],
                       "ioctl": ["allow", "EPERM"], "clone": ["allow", "EPERM"]}  # a thread, a fork


@pytest.mark.parametrize("machine", list(child.MACHINES))
def test_the_filter_lets_a_process_be_read_only_by_itself(machine):
    column, arch = child.MACHINES[machine]
    program = child.seccomp_program(machine, own_pid=2)
    for name in child.PROCESS_IS_SELF:  # pid 0 (the caller), its own pid, bubblewrap's init
        answers = [decide(program, child.SYSCALLS[name][column], (pid, 0, 0, 0, 0, 0), arch) for pid in (0, 2, 1)]
        assert answers == ["allow", "allow", "EPERM"], name
    for name in child.PRIORITY_OF_SELF:  # itself, another process, its group, its user
        answers = [decide(program, child.SYSCALLS[name][column], (which, who, 0, 0, 0, 0), arch)
                   for which, who in ((0, 0), (0, 1), (1, 0), (2, 0))]
        assert answers == ["allow", "EPERM", "EPERM", "EPERM"], name
